#include <fmt/format.h>

#include <string>

#include "cli/commands.h"
#include "train/model_dir.h"

namespace kiln::cli {

void register_ckpt(CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "Work with checkpoints");
  ckpt->require_subcommand(1);
  auto* exp = ckpt->add_subcommand(
      "export",
      "Write a checkpoint's model as a Hugging Face directory (model.safetensors, config.json), "
      "whole, without the optimizer state");
  auto from = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  exp->add_option("checkpoint", *from,
                  "a checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  exp->add_option("out", *out, "a new (or empty) directory")->required();
  exp->callback([from, out]() {
    const std::string dir = export_model(*from, *out);
    fmt::print("exported {} to {} (model.safetensors, config.json)\n", dir, *out);
  });
}

}  // namespace kiln::cli
