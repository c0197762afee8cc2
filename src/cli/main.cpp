#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kiln: train transformer language models on a cluster of CPUs\n"
      "Run `kiln <command> --help` for the options of each command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", KILN_VERSION);
  kiln::cli::register_train(app);
  kiln::cli::register_generate(app);
  kiln::cli::register_bench(app);
  kiln::cli::register_data(app);
  kiln::cli::register_tokenize(app);
  kiln::cli::register_launch(app);
  kiln::cli::register_plan(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
