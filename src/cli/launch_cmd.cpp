#include <unistd.h>

#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "launch/launcher.h"
#include "obs/prometheus.h"
#include "train/config.h"

namespace kiln::cli {

void register_launch(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch", "Run `kiln train` as N processes on this machine, restarting what dies");
  struct Opts {
    int ranks = 1;
    int max_restarts = 0;
    int min_ranks = 0;
    std::string config;
    std::vector<std::string> sets;
    std::vector<std::string> mpirun_args;
    std::string trace, metrics_host;
    int metrics_port = 0;  // read only when --metrics-port is given
    bool resume = false;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-n,--ranks", o->ranks, "processes (data-parallel ranks)")->capture_default_str();
  cmd->add_option("--max-restarts", o->max_restarts,
                  "restart from the newest checkpoint at most this many times when a rank dies")
      ->capture_default_str();
  cmd->add_option(
         "--min-ranks", o->min_ranks,
         "elastic: when the same rank fails twice in a row, go on with fewer data-parallel "
         "ranks, not fewer than this many (0: never), train.grad_accum raised to keep the "
         "global batch")
      ->capture_default_str();
  cmd->add_option("config", o->config, "TOML config")->required();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--resume", o->resume,
                "continue from the newest complete checkpoint in <out_dir>/checkpoints (an error "
                "if there is none), as `kiln train --resume`");
  cmd->add_flag("--overwrite", o->overwrite,
                "start over in an out_dir that holds an earlier run, as `kiln train --overwrite`");
  cmd->add_option("--mpirun-arg", o->mpirun_args, "an extra argument for mpirun (repeatable)");
  cmd->add_option("--trace", o->trace, "passed to `kiln train`: a Chrome trace of every rank");
  CLI::Option* port_opt = cmd->add_option(
      "--metrics-port", o->metrics_port,
      "passed to `kiln train`: Prometheus metrics on this port (rank 0; 0-65535, 0: any free)");
  cmd->add_option("--metrics-host", o->metrics_host, "passed to `kiln train`");
  cmd->callback([o, port_opt]() {
    // Refused here, once, with the bad-input code: every attempt would fail the same way.
    try {
      if (port_opt->count()) check_metrics_port(o->metrics_port);
    } catch (const Error& e) {
      throw ExitCodeError(kExitBadInput, e.what());
    }
    LaunchOptions lo;
    lo.ranks = o->ranks;
    lo.max_restarts = o->max_restarts;
    lo.min_ranks = o->min_ranks;
    lo.kiln_binary = self_executable();
    if (lo.kiln_binary.empty()) fail("launch: cannot find the kiln executable");
    // train.threads = 0 (the default) already shares the cores out among a machine's ranks.
    lo.train_args.push_back(o->config);
    for (const auto& s : o->sets) {
      lo.train_args.push_back("--set");
      lo.train_args.push_back(s);
    }
    if (!o->trace.empty()) lo.train_args.insert(lo.train_args.end(), {"--trace", o->trace});
    if (port_opt->count())
      lo.train_args.insert(lo.train_args.end(),
                           {"--metrics-port", std::to_string(o->metrics_port)});
    if (!o->metrics_host.empty())
      lo.train_args.insert(lo.train_args.end(), {"--metrics-host", o->metrics_host});
    if (o->resume && o->overwrite) fail("launch: --resume and --overwrite contradict each other");
    if (o->overwrite) lo.train_args.insert(lo.train_args.end(), {"--set", "train.overwrite=true"});
    if (o->resume) lo.resume = "must";
    lo.mpirun_args = o->mpirun_args;
    // Read (and checked) here, so a bad config fails once, not once per attempt.
    std::vector<std::string> sets = o->sets;
    if (o->overwrite) sets.push_back("train.overwrite=true");
    try {
      const TrainConfig cfg = load_train_config(o->config, sets);
      lo.out_dir = cfg.out_dir;
      lo.grad_accum = cfg.grad_accum;
      lo.ranks_per_replica = cfg.pp * cfg.tp;
    } catch (const Error& e) {
      throw ExitCodeError(kExitBadInput, e.what());
    }
    int rc = launch(lo);
    if (rc != 0) std::exit(rc);
  });
}

}  // namespace kiln::cli
