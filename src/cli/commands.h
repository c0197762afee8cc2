// Each subcommand registers itself on the CLI11 app; the CLI only parses and calls the library.
#pragma once
#include <CLI/CLI.hpp>

namespace kiln::cli {

void register_train(CLI::App& app);
void register_generate(CLI::App& app);
void register_bench(CLI::App& app);
void register_data(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_launch(CLI::App& app);
void register_plan(CLI::App& app);
void register_submit(CLI::App& app);
void register_report(CLI::App& app);
void register_ckpt(CLI::App& app);

}  // namespace kiln::cli
