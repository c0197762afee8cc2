// The planner: evaluates a layout (memory, step time, throughput, days, cost, energy, carbon),
// searches all layouts of a cluster for the fastest that fit, and says what would fit when
// nothing does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/job.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/model_spec.h"
#include "plan/time_model.h"

namespace kiln::plan {

struct Estimate {
  Layout layout;
  std::string invalid;        // why the layout cannot run at all ("" when it can)
  int64_t micro_batches = 0;  // m per pipeline and step
  MemoryBreakdown memory;
  TimeBreakdown time;
  std::vector<std::string> notes;  // assumptions that changed the result, for people

  double tokens_per_step = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu_model = 0;  // model FLOPs (6N + 12·L·h·s per token)
  double tflops_per_gpu_hw = 0;     // plus recomputation
  double mfu = 0, hfu = 0;          // the two over the device's peak for the precision
  // Optimizer steps: ceil(training tokens / tokens per step), a whole number; days, GPU-hours,
  // cost and energy are those of this many steps (the last one may overshoot the budget).
  int64_t steps = 0;
  double days = 0, gpu_hours = 0;
  double cost_usd = 0;    // 0 when no price was given
  double energy_kwh = 0;  // devices + node overhead, times PUE
  double co2_t = 0;       // tonnes of CO2

  bool valid() const { return invalid.empty(); }
  bool fits() const { return valid() && memory.fits(); }
};

// Checks that `l` can run `m` on `c` with `j` (dp must be set); "" or the reason it cannot,
// naming what would work ("tp=3 does not divide the 32 heads; tp can be 1, 2, 4 or 8").
// A step time to the 3 significant digits the search ranks by: equal ones rank the lower ZeRO
// stage, then the smaller memory, first (the search table prints this value).
double ranked_step_seconds(double seconds);

std::string layout_problem(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                           const Layout& l);

// Fills dp when the layout left it out and checks the rest; throws kiln::Error with the reason.
// `as_given`, when not empty, is the --layout text the errors quote (the user's partial
// layout, not the defaults filled into it).
Layout complete_layout(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, Layout l,
                       const std::string& as_given = "");

Estimate evaluate(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, const Layout& l);

// One layout field as a search treated it: the key and what was tried ("1, 2, 4, 8"), the
// value the layout fixed ("8"), or the value it was left at and why.
struct SearchField {
  std::string key;
  std::string how;
};
struct SearchResult {
  std::vector<Estimate> fitting;     // every layout that fits, fastest first
  std::vector<Estimate> faster_oom;  // out of memory, at least 1% faster than the best fit
  Estimate least_memory;             // the valid layout needing the least memory (fits or not)
  int64_t considered = 0;            // valid layouts evaluated
  // What decided each field, so that no default decides silently: varied by the search, fixed
  // by the layout, or left at one value (with the reason).
  std::vector<SearchField> searched, fixed, not_searched;
};
// Fields a partial --layout fixed: the search tries only layouts with these values (`keys` says
// which of `values`' fields count) and searches the rest.
struct FixedFields {
  Layout values;
  LayoutKeys keys;  // none given: every layout is searched
};
// Fields the layout leaves open are searched: tp, pp, dp, mb, vpp, zero and recompute always;
// cp (context parallelism) when --seq-len is at least kCpLongSeq, over the degrees that leave
// each rank at least kCpMinTokens of a sequence, and otherwise only when nothing fits at cp=1
// (then down to kCpMinTokensForced per rank); asynctp=1 wherever the software runs it (with tp > 1
// and sp). A field `fixed` gives keeps its value.
SearchResult search(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                    const FixedFields& fixed = {});
inline constexpr int64_t kCpLongSeq = 16384;
inline constexpr int64_t kCpMinTokens = 4096;
inline constexpr int64_t kCpMinTokensForced = 1024;
inline constexpr int64_t kCpMax = 64;

// When nothing fits `c`: the smallest clusters (in whole nodes of the same kind) on which
// something does, with ZeRO-3 data parallelism alone and with tensor/pipeline parallelism plus
// ZeRO-1, as one sentence ("needs at least 24 GPUs with ZeRO-3 (3 nodes), or tp×pp ≥ 4 ...").
std::string fit_advice(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j);

// Single changes to `l` that make it fit (recompute, ZeRO stage, micro-batch, sp, pp), each with
// the memory it would need; empty when none does.
std::vector<std::string> layout_fixes(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                      const Layout& l);

// What a layout spends its step on beyond compute, for the "why" column: "bubble 11%, TP 7%" or
// "compute-bound (93%)".
std::string limiter(const Estimate& e);

}  // namespace kiln::plan
