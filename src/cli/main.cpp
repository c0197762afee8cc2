#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/job.h"
#include "train/comm_observer.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kiln: train transformer language models on a cluster of CPUs\n"
      "Run `kiln <command> --help` for the options of each command."};
  // Every communicator's operations go to the flight recorder (and the trace when one is taken).
  kiln::observe_communicators();
  app.require_subcommand(1);
  app.set_version_flag("--version", KILN_VERSION);
  kiln::cli::register_train(app);
  kiln::cli::register_generate(app);
  kiln::cli::register_bench(app);
  kiln::cli::register_data(app);
  kiln::cli::register_tokenize(app);
  kiln::cli::register_launch(app);
  kiln::cli::register_plan(app);
  kiln::cli::register_submit(app);
  kiln::cli::register_report(app);
  kiln::cli::register_ckpt(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::ExitCodeError& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    if (kiln::launched_by_mpi()) kiln::abort_job(e.code());
    return e.code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    // In a multi-process job the other ranks may be waiting for this one in a collective.
    if (kiln::launched_by_mpi()) kiln::abort_job(1);
    return 1;
  }
  return 0;
}
