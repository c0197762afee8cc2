#include <unistd.h>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
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
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) fail("launch: cannot find the kiln executable");
    lo.kiln_binary = std::string(exe, len);
    lo.train_args.push_back(o->config);
    bool threads_set = false;
    for (const auto& s : o->sets) {
      lo.train_args.push_back("--set");
      lo.train_args.push_back(s);
      threads_set |= s.rfind("train.threads=", 0) == 0;
    }
    // Share the cores out among the ranks unless the user chose.
    if (!threads_set) {
      long cores = sysconf(_SC_NPROCESSORS_ONLN);
      lo.train_args.push_back("--set");
      lo.train_args.push_back("train.threads=" + std::to_string(std::max(1L, cores / o->ranks)));
    }
    lo.mpirun_args = o->mpirun_args;
    int rc = launch(lo);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace kiln::cli
