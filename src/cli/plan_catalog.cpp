#include "cli/plan_catalog.h"

#include <fmt/format.h>

#include <string>

#include "core/closest_name.h"
#include "plan/hardware.h"
#include "plan/model_spec.h"
#include "plan/report.h"
#include "plan/software.h"

namespace kiln::cli {

using namespace kiln::plan;

void list_models() {
  fmt::print("{:<15} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>7}  {}\n", "model", "params", "layers",
             "hidden", "heads/kv", "ffn", "vocab", "seq", "source");
  for (const auto& p : presets()) {
    const ModelSpec& m = p.model;
    fmt::print("{:<15} {:>8} {:>6} {:>6} {:>9} {:>7} {:>7} {:>7}  {}\n", m.name,
               si(double(count_params(m).total)), m.n_layer, m.hidden,
               fmt::format("{}/{}", m.n_head, m.n_kv_head), m.ffn_hidden, m.vocab, p.seq_len,
               p.source);
  }
}

void list_gpus() {
  fmt::print("{:<14} {:>9} {:>8} {:>8} {:>6} {:>9} {:>6} {:>6}  {}\n", "gpu", "16-bit TF", "fp8 TF",
             "fp32 TF", "GiB", "HBM GB/s", "matmul", "TDP W", "description");
  auto peak = [](double tf) { return tf > 0 ? fmt::format("{:.4g}", tf) : std::string("–"); };
  for (const auto& d : device_catalog())
    fmt::print("{:<14} {:>9} {:>8} {:>8} {:>6.0f} {:>9.0f} {:>5.0f}% {:>6.0f}  {}\n", d.name,
               peak(d.peak_tflops_16), peak(d.peak_tflops_8), peak(d.peak_tflops_32), d.memory_gib,
               d.mem_bw_gbs, 100 * d.matmul_efficiency, d.tdp_w, d.description);
  fmt::print(
      "\nmatmul: the fraction of the dense peak the time model uses (sustained "
      "matmul rate; see docs/planner.md)\n");
}

void list_software() {
  fmt::print("{:<19} {}\n", "software", "what it sets");
  for (const SoftwareProfile& s : software_catalog()) {
    fmt::print("{:<19} {}\n{:<19} runs on: {}; trains in: {}\n{:<19} source: {}\n", s.name,
               s.description, "",
               s.platforms.empty() ? std::string("any device") : join_names(s.platforms),
               join_names(s.precisions()), "", s.source);
  }
  fmt::print("\nthe numbers and their sources: docs/planner.md, \"Software profiles\"\n");
}

}  // namespace kiln::cli
