#include <fmt/format.h>

#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "obs/prometheus.h"
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
    int metrics_port = 0;  // read only when --metrics-port is given
    std::string metrics_host = "127.0.0.1";
    std::string trace;
    bool check = false;
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
  CLI::Option* port_opt = cmd->add_option(
      "--metrics-port", o->metrics_port,
      "serve Prometheus metrics at http://HOST:PORT/metrics from rank 0 (0-65535; 0: any free "
      "port, printed)");
  cmd->add_option("--metrics-host", o->metrics_host,
                  "address the metrics server binds (an IPv6 address such as ::1 too)")
      ->capture_default_str();
  cmd->add_option("--trace", o->trace,
                  "write a Chrome trace (chrome://tracing, Perfetto) of every rank's forward, "
                  "backward, optimizer, collectives and checkpoints to this file at the end");
  cmd->add_flag("--check", o->check,
                "check the config (every key's range, and that it fits in this machine's "
                "memory), print it resolved as JSON and exit");
  std::string keys =
      "Config keys (each is checked: numbers must be finite and in range, see README.md):\n";
  for (const auto& k : train_config_keys()) keys += "  " + k + "\n";
  cmd->footer(keys);
  cmd->callback([o, port_opt]() {
    std::vector<std::string> sets = o->sets;
    if (o->resume) sets.push_back("train.resume=must");
    if (o->overwrite) sets.push_back("train.overwrite=true");
    if (!o->init_from.empty()) sets.push_back("train.init_from=" + o->init_from);
    // A config that cannot work is refused before anything starts, with kExitBadInput: the
    // same command would fail the same way again, so launchers do not retry it.
    TrainConfig cfg;
    try {
      if (port_opt->count()) check_metrics_port(o->metrics_port);
      if (o->resume && o->overwrite)
        fail("--resume and --overwrite contradict each other: continue the run or start over");
      cfg = load_train_config(o->config, sets);
      check_memory_fits(cfg, usable_memory_bytes());
    } catch (const Error& e) {
      fmt::print(stderr, "kiln: error: {}\n", e.what());
      std::exit(kExitBadInput);
    }
    if (o->check) {
      fmt::print("{}\n", cfg.to_json().dump(2));
      return;
    }
    TrainerOptions opts;
    opts.metrics_port = port_opt->count() ? o->metrics_port : -1;
    opts.metrics_host = o->metrics_host;
    opts.trace_path = o->trace;
    const TrainConfig asked = cfg;
    try {
      Trainer trainer(std::move(cfg), opts);
      // Stopped early on a signal, after a checkpoint: a job script requeues on this code.
      if (!trainer.run()) std::exit(kExitStoppedForRequeue);
    } catch (const std::bad_alloc&) {
      // check_memory_fits is a lower bound; what did not fit is still said in terms of the keys.
      fail(
          "{}: out of memory (an allocation failed) for train.batch_size = {} x train.seq_len = "
          "{} with a model of model.n_layer = {}, model.n_embd = {}; lower train.batch_size "
          "(raising train.grad_accum keeps the batch), set train.recompute = \"full\", shard "
          "the model state with train.zero, or run fewer ranks per machine",
          asked.source, asked.batch_size, asked.seq_len, asked.model.n_layer, asked.model.n_embd);
    }
  });
}

}  // namespace kiln::cli
