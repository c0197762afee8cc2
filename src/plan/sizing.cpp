#include "plan/sizing.h"

#include <algorithm>
#include <cmath>

#include "plan/goodput.h"

namespace kiln::plan {

int64_t nodes_lower_bound(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, double days) {
  // Every layout runs each matmul weight's 2 forward and 4 backward FLOPs per token (tensor and
  // pipeline parallelism split them, recompute adds to them) at no more than the sustained
  // matmul rate; attention, element-wise work and communication only add time.
  const ParamCounts pc = count_params(m);
  const double matmul_weights = double(m.n_layer) * double(pc.per_layer_matmul) +
                                double(m.vocab) * double(m.hidden);  // blocks and LM head
  const double flops = 6 * matmul_weights * double(j.steps()) * double(j.global_batch_tokens);
  const double rate = c.device.linear_flops(j.dtype);
  const double devices = flops / (rate * days * 86400);
  return std::max<int64_t>(1, int64_t(std::floor(devices / c.gpus_per_node)));
}

// `n` nodes of `c`'s kind as a cluster: on a torus, up to a pod one slice, beyond it the fewest
// slices of a size Google offers (up to max_slices; 1 keeps c.slices). False when none works.
bool cluster_of_nodes(const ClusterSpec& c, int64_t n, int max_slices, ClusterSpec* out) {
  *out = c;
  out->nodes = int(n);
  if (c.topology != Topology::torus || max_slices <= 1) return out->size_problem().empty();
  out->slices = 1;
  if (out->total_gpus() <= c.device.max_slice_chips) return out->size_problem().empty();
  for (int s = 2; s <= max_slices; s++) {
    out->slices = s;
    if (out->size_problem().empty()) return true;
  }
  return false;
}

DeadlineResult smallest_cluster_for_days(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                         double days, const FixedFields& fixed, int max_nodes,
                                         int max_slices) {
  DeadlineResult out;
  const int64_t lb = nodes_lower_bound(m, c, j, days);
  out.first_nodes = lb;
  out.cluster = c;
  for (int64_t n = lb; n <= max_nodes; n++) {
    ClusterSpec cc;
    if (!cluster_of_nodes(c, n, max_slices, &cc)) continue;  // e.g. no torus slice this size
    const SearchResult r = search(m, cc, j, fixed);
    out.sizes_tried++;
    if (r.considered > 0) out.sizes_runnable++;
    if (r.fitting.empty()) continue;
    const Estimate& e = r.fitting.front();
    // The deadline holds for the expected run with failures, restarts and checkpoints (the
    // failure-free time when the job gives no failure rate); a job that would hardly train at
    // this size misses it.
    const Goodput g = run_goodput(m, cc, j, e, /*refuse_stalled=*/false).g;
    const double expected = g.goodput >= kMinGoodput ? g.wall_hours / 24 : INFINITY;
    if (out.fastest_nodes == 0 || expected < out.fastest_days) {
      out.fastest_days = expected;
      out.fastest_nodes = int(n);
    }
    if (expected <= days) {
      out.found = true;
      out.cluster = cc;
      out.best = e;
      out.expected_days = expected;
      return out;
    }
  }
  return out;
}

FitResult fewest_nodes_that_fit(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                const FixedFields& fixed, int max_nodes, int64_t max_layouts) {
  FitResult out;
  int64_t evaluated = 0;
  for (int64_t n = int64_t(c.nodes) + 1; n <= max_nodes && evaluated < max_layouts; n++) {
    out.searched_to = n;
    ClusterSpec cc;
    if (!cluster_of_nodes(c, n, 1, &cc)) continue;
    const SearchResult r = search(m, cc, j, fixed);
    evaluated += r.considered;
    if (r.fitting.empty()) continue;
    out.found = true;
    out.cluster = cc;
    out.best = r.fitting.front();
    return out;
  }
  return out;
}

BudgetResult what_budget_buys(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                              const Estimate& e, double usd) {
  BudgetResult b;
  const int N = c.total_gpus();
  b.usd_per_step = e.time.step / 3600 * N * j.usd_per_gpu_hour;
  // The division can land a hair below a whole number of steps the budget exactly buys. A
  // budget buying more than kMaxBudgetSteps is refused by the caller (steps stays 0 then and
  // `too_many` says so), before the count overflows or rounds past the budget.
  const double steps = std::floor(usd / b.usd_per_step * (1 + 1e-12));
  if (!(steps <= kMaxBudgetSteps)) {
    b.too_many = true;
    return b;
  }
  b.steps = int64_t(steps);
  b.tokens = double(b.steps) * e.tokens_per_step;
  const double seconds = double(b.steps) * e.time.step;
  b.days = seconds / 86400;
  b.gpu_hours = seconds / 3600 * N;
  b.cost_usd = b.gpu_hours * j.usd_per_gpu_hour;
  b.tokens_per_param = b.tokens / double(count_params(m).total);
  return b;
}

}  // namespace kiln::plan
