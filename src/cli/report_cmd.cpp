// `kiln report RUN_DIR [-o FILE]`: one self-contained HTML page about a run (src/obs/report_html).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/file.h"
#include "obs/report_html.h"

namespace fs = std::filesystem;

namespace kiln::cli {

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report",
      "Write one self-contained HTML page (curves, speed, memory, restarts, config) "
      "about a run directory");
  struct Opts {
    std::string run_dir, output;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("run_dir", o->run_dir, "the run directory (train.out_dir) with metrics.jsonl")
      ->required();
  cmd->add_option("-o,--output", o->output,
                  "where to write the page (default RUN_DIR/report.html)");
  cmd->callback([o]() {
    std::string html = report_html(o->run_dir);
    std::string out =
        o->output.empty() ? (fs::path(o->run_dir) / "report.html").string() : o->output;
    write_file_atomic(out, html);
    fmt::print("wrote {} ({:.0f} KiB); open it in any browser, it needs no network\n", out,
               html.size() / 1024.0);
  });
}

}  // namespace kiln::cli
