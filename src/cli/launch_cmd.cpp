#include <unistd.h>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "launch/launcher.h"

namespace kiln::cli {

void register_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Run `kiln train` as N processes on this machine, restarting what dies");
  struct Opts {
    int ranks = 1;
    int max_restarts = 0;
    std::string config;
    std::vector<std::string> sets;
    std::vector<std::string> mpirun_args;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-n,--ranks", o->ranks, "processes (data-parallel ranks)")->capture_default_str();
  cmd->add_option("--max-restarts", o->max_restarts,
                  "restart from the newest checkpoint at most this many times when a rank dies")
      ->capture_default_str();
  cmd->add_option("config", o->config, "TOML config")->required();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_option("--mpirun-arg", o->mpirun_args, "an extra argument for mpirun (repeatable)");
  cmd->callback([o]() {
    LaunchOptions lo;
    lo.ranks = o->ranks;
    lo.max_restarts = o->max_restarts;
    lo.kiln_binary = self_executable();
    if (lo.kiln_binary.empty()) fail("launch: cannot find the kiln executable");
    // train.threads = 0 (the default) already shares the cores out among a machine's ranks.
    lo.train_args.push_back(o->config);
    for (const auto& s : o->sets) {
      lo.train_args.push_back("--set");
      lo.train_args.push_back(s);
    }
    lo.mpirun_args = o->mpirun_args;
    int rc = launch(lo);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace kiln::cli
