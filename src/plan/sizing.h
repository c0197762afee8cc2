// The questions asked before buying time: how large a cluster trains this in D days
// (`--days`), and what a budget in dollars buys (`--budget`). Both answer with the planner's
// own search and cost model (cost = GPU-hours × price per device-hour).
#pragma once
#include <cstdint>
#include <string>

#include "plan/planner.h"

namespace kiln::plan {

// The smallest cluster, in whole nodes of `c`'s kind (c.nodes is ignored), whose fastest
// fitting layout (with `fixed`'s fields) trains the job in at most `days`, counting the expected
// failures, restarts and checkpoints of the job's goodput model (goodput.h). Sizes are tried from
// a lower bound upwards — every matmul weight's 6 FLOPs per token at the device's sustained
// matmul rate, which no layout beats — up to `max_nodes`. On a TPU torus with max_slices > 1
// a size up to a pod is one slice, and a larger one is split into the fewest slices (at most
// max_slices, each a slice Google offers) joined over the data-centre network; with max_slices 1
// it keeps c.slices.
struct DeadlineResult {
  bool found = false;
  ClusterSpec cluster;       // the cluster found (or the largest tried)
  Estimate best;             // its fastest fitting layout
  double expected_days = 0;  // its run with failures (best.days is failure-free)
  int64_t first_nodes = 0;   // the lower bound the scan started from (may exceed max_nodes)
  int sizes_tried = 0;       // node counts searched
  int sizes_runnable = 0;    // of those, sizes with a valid layout (the batch splits over them)
  // When nothing was found: the fastest run (with failures) seen at any size tried (days 0 when
  // none fit).
  double fastest_days = 0;
  int fastest_nodes = 0;
};
DeadlineResult smallest_cluster_for_days(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                         double days, const FixedFields& fixed = {},
                                         int max_nodes = 16384, int max_slices = 1);
// The smallest cluster of more nodes than `c` (of its kind, up to max_nodes) on which some layout
// with `fixed`'s fields fits: found false when none up to the cap does. The scan stops once it
// has evaluated max_layouts layouts (a search per size; a large batch has many), and says how far
// it got.
struct FitResult {
  bool found = false;
  ClusterSpec cluster;
  Estimate best;            // its fastest fitting layout with those fields
  int64_t searched_to = 0;  // the largest node count searched
};
FitResult fewest_nodes_that_fit(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                const FixedFields& fixed, int max_nodes = 16384,
                                int64_t max_layouts = 200000);
// The nodes below which no layout can train the job in `days` (at least 1).
int64_t nodes_lower_bound(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, double days);

// What `usd` buys on `c` with the layout of `e` at the job's price per device-hour: whole
// optimizer steps, their tokens and wall-clock time.
struct BudgetResult {
  double usd_per_step = 0;                       // step time × devices × price
  int64_t steps = 0;                             // floor(budget / cost of a step)
  double tokens = 0;                             // steps × tokens per step
  double days = 0, gpu_hours = 0, cost_usd = 0;  // of those steps (cost ≤ budget)
  double tokens_per_param = 0;                   // Hoffmann et al. 2022 put the optimum near 20
  bool too_many = false;                         // the budget buys more than kMaxBudgetSteps
};
// The most steps a budget is planned for: 10¹² (a million times any published run's).
constexpr double kMaxBudgetSteps = 1e12;
BudgetResult what_budget_buys(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                              const Estimate& e, double usd);

}  // namespace kiln::plan
