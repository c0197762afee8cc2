#include <string>
#include <vector>

#include "cli/commands.h"
#include "train/config.h"
#include "train/trainer.h"

namespace kiln::cli {

void register_train(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a GPT-2 model from a TOML config");
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    bool resume = false;
    std::string init_from;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("config", o->config, "TOML config (see configs/)")->required();
  cmd->add_option("--set", o->sets, "override a config key: section.key=value (repeatable)");
  cmd->add_flag("--resume", o->resume,
                "continue from the newest complete checkpoint in <out_dir>/checkpoints "
                "(an error if there is none; train.resume = \"auto\" starts fresh instead)");
  cmd->add_option("--init-from", o->init_from,
                  "start from GPT-2 weights in a Hugging Face safetensors file");
  std::string keys = "Config keys:\n";
  for (const auto& k : train_config_keys()) keys += "  " + k + "\n";
  cmd->footer(keys);
  cmd->callback([o]() {
    std::vector<std::string> sets = o->sets;
    if (o->resume) sets.push_back("train.resume=must");
    if (!o->init_from.empty()) sets.push_back("train.init_from=" + o->init_from);
    TrainConfig cfg = load_train_config(o->config, sets);
    Trainer trainer(std::move(cfg));
    trainer.run();
  });
}

}  // namespace kiln::cli
