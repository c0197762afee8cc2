// --days and --budget: the smallest cluster for a deadline, and what dollars buy.
#include "plan/sizing.h"

#include <gtest/gtest.h>

namespace kiln::plan {
namespace {

JobSpec job_of(const Preset& p) {
  return p.job();
}

// The answer trains in time, and no smaller cluster does: every size below it (those under the
// FLOP lower bound included, which checks the bound) is searched in full.
TEST(PlanSizing, SmallestClusterForDaysIsTheSmallestThatMakesIt) {
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  const JobSpec j = job_of(p);
  const double days = 30;
  const DeadlineResult r = smallest_cluster_for_days(p.model, c, j, days);
  ASSERT_TRUE(r.found);
  EXPECT_LE(r.best.days, days);
  EXPECT_TRUE(r.best.fits());
  EXPECT_EQ(r.cluster.total_gpus(), r.cluster.nodes * 8);
  EXPECT_LE(r.first_nodes, r.cluster.nodes);
  EXPECT_GT(r.first_nodes, 1);  // the bound skips sizes: 2T tokens of 7B is days on 8 A100s
  // The result is what searching the cluster found gives.
  const SearchResult same = search(p.model, r.cluster, j);
  ASSERT_FALSE(same.fitting.empty());
  EXPECT_EQ(same.fitting.front().layout.to_string(), r.best.layout.to_string());
  for (int n = 1; n < r.cluster.nodes; n++) {
    ClusterSpec cc = c;
    cc.nodes = n;
    const SearchResult s = search(p.model, cc, j);
    if (!s.fitting.empty()) {
      EXPECT_GT(s.fitting.front().days, days) << n << " nodes";
    }
  }
}

// Fixed layout fields constrain the clusters searched as they constrain one cluster's search.
TEST(PlanSizing, SmallestClusterForDaysKeepsFixedFields) {
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  FixedFields fixed;
  fixed.values = parse_layout("tp=8,pp=1", &fixed.keys);
  const DeadlineResult r = smallest_cluster_for_days(p.model, c, job_of(p), 30, fixed);
  ASSERT_TRUE(r.found);
  EXPECT_EQ(r.best.layout.tp, 8);
  EXPECT_EQ(r.best.layout.pp, 1);
  const DeadlineResult free = smallest_cluster_for_days(p.model, c, job_of(p), 30);
  EXPECT_GE(r.cluster.nodes, free.cluster.nodes);  // a constraint never makes it smaller
}

// Nothing up to the cap makes it: said, with the bound the scan would have started from.
TEST(PlanSizing, ImpossibleDeadlineIsNotFound) {
  const Preset& p = find_preset("gpt3-175b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  const DeadlineResult r = smallest_cluster_for_days(p.model, c, job_of(p), 0.01, {}, 1000);
  EXPECT_FALSE(r.found);
  EXPECT_GT(r.first_nodes, 1000);
  EXPECT_EQ(r.sizes_tried, 0);
  // 6 × 175B × 300B FLOPs at 312 × 0.726 TFLOP/s in 864 s, over 8 devices per node.
  const double flops = 6 * 174.6e9 * 300e9;
  EXPECT_NEAR(double(r.first_nodes), flops / (312e12 * 0.859 * 0.845 * 864) / 8,
              0.02 * r.first_nodes);
}

// A budget equal to the planner's cost of the run buys exactly the run's steps; a cent less
// buys one step fewer; cost = GPU-hours × price, as the planner's cost model.
TEST(PlanSizing, BudgetBuysWholeStepsAtThePlannersPrice) {
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec j = job_of(p);
  j.usd_per_gpu_hour = 2;
  const SearchResult r = search(p.model, c, j);
  ASSERT_FALSE(r.fitting.empty());
  const Estimate& e = r.fitting.front();
  BudgetResult b = what_budget_buys(p.model, c, j, e, e.cost_usd);
  EXPECT_EQ(b.steps, e.steps);
  EXPECT_NEAR(b.cost_usd, e.cost_usd, 1e-6 * e.cost_usd);
  EXPECT_NEAR(b.days, e.days, 1e-9 * e.days);
  EXPECT_DOUBLE_EQ(b.usd_per_step, e.time.step * 32 * 2 / 3600);
  b = what_budget_buys(p.model, c, j, e, e.cost_usd - b.usd_per_step / 2);
  EXPECT_EQ(b.steps, e.steps - 1);
  EXPECT_LE(b.cost_usd, e.cost_usd - b.usd_per_step / 2);
  EXPECT_DOUBLE_EQ(b.tokens, double(b.steps) * double(j.global_batch_tokens));
  EXPECT_NEAR(b.tokens_per_param, b.tokens / double(count_params(p.model).total), 1e-9);
  EXPECT_EQ(what_budget_buys(p.model, c, j, e, b.usd_per_step * 0.99).steps, 0);
}

// The fewest nodes on which a layout with fixed keys fits: every smaller size was searched and
// fits none; a scan that runs out of its layout budget says how far it got and finds nothing.
TEST(PlanSizing, FewestNodesThatFitAFixedLayout) {
  const Preset& p = find_preset("llama2-70b");
  const JobSpec j = job_of(p);
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  FixedFields fixed;
  fixed.values = parse_layout("tp=8", &fixed.keys);
  const FitResult f = fewest_nodes_that_fit(p.model, c, j, fixed);
  ASSERT_TRUE(f.found);
  EXPECT_EQ(f.best.layout.tp, 8);
  EXPECT_TRUE(f.best.fits());
  for (int n = 1; n < f.cluster.nodes; n++) {
    ClusterSpec smaller = c;
    smaller.nodes = n;
    EXPECT_TRUE(search(p.model, smaller, j, fixed).fitting.empty()) << n;
  }
  const FitResult cut = fewest_nodes_that_fit(p.model, c, j, fixed, 16384, /*max_layouts=*/1);
  EXPECT_FALSE(cut.found);
  EXPECT_EQ(cut.searched_to, 2);  // one size searched, and its layouts spent the budget
}

}  // namespace
}  // namespace kiln::plan
