#include <string>
#include <vector>

#include "cli/commands.h"
#include "train/config.h"
#include "train/stop_request.h"
#include "train/trainer.h"

namespace kiln::cli {

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT-2 model from a TOML config");
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    bool resume = false;
    bool overwrite = false;
    std::string init_from;
    int metrics_port = -1;
    std::string metrics_host = "127.0.0.1";
    std::string trace;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("config", o->config, "TOML config (see configs/)")->required();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--resume", o->resume,
                "continue from the newest complete checkpoint in <out_dir>/checkpoints "
                "(an error if there is none; train.resume = \"auto\" starts fresh instead)");
  cmd->add_flag("--overwrite", o->overwrite,
                "start over in an out_dir that holds an earlier run, deleting its checkpoints and "
                "metrics (train.overwrite = true; without it such a start is refused)");
  cmd->add_option("--init-from", o->init_from,
                  "start from GPT-2 weights in a Hugging Face safetensors file");
  cmd->add_option("--metrics-port", o->metrics_port,
                  "serve Prometheus metrics at http://HOST:PORT/metrics from rank 0 (0: any free "
                  "port)");
  cmd->add_option("--metrics-host", o->metrics_host, "address the metrics server binds")
      ->capture_default_str();
  cmd->add_option("--trace", o->trace,
                  "write a Chrome trace (chrome://tracing, Perfetto) of every rank's forward, "
                  "backward, optimizer, collectives and checkpoints to this file at the end");
  std::string keys = "Config keys:\n";
  for (const auto& k : train_config_keys()) keys += "  " + k + "\n";
  cmd->footer(keys);
  cmd->callback([o]() {
    std::vector<std::string> sets = o->sets;
    if (o->resume) sets.push_back("train.resume=must");
    if (o->overwrite) sets.push_back("train.overwrite=true");
    if (!o->init_from.empty()) sets.push_back("train.init_from=" + o->init_from);
    TrainConfig cfg = load_train_config(o->config, sets);
    TrainerOptions opts;
    opts.metrics_port = o->metrics_port;
    opts.metrics_host = o->metrics_host;
    opts.trace_path = o->trace;
    Trainer trainer(std::move(cfg), opts);
    // Stopped early on a signal, after a checkpoint: a job script requeues on this code.
    if (!trainer.run()) std::exit(kExitStoppedForRequeue);
  });
}

}  // namespace kiln::cli
