// Goodput: Daly's expected wall-clock time and optimum interval, checked against a simulation of
// failures and against the first-order (Young) approximation; the planner's report.
#include "plan/goodput.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "plan/planner.h"
#include "plan/report.h"

namespace kiln::plan {
namespace {

// A run of Ts hours of work, checkpointed every tau hours of work (delta hours each), failing
// as a Poisson process of mean time M (also during checkpoints and restarts); a failure loses
// the work since the last checkpoint and costs R hours of restart. The mean wall-clock time.
double simulate(double Ts, double tau, double delta, double R, double M, int runs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> next_failure(1.0 / M);
  double total = 0;
  for (int r = 0; r < runs; r++) {
    double wall = 0, done = 0, until_failure = next_failure(rng);
    while (done < Ts - 1e-12) {
      const double work = std::min(tau, Ts - done);
      const double segment = work + delta;
      if (until_failure >= segment) {  // the segment and its checkpoint complete
        wall += segment;
        until_failure -= segment;
        done += work;
        continue;
      }
      wall += until_failure;  // lost; then restart, which may itself be interrupted
      for (;;) {
        until_failure = next_failure(rng);
        if (until_failure >= R) {
          wall += R;
          until_failure -= R;
          break;
        }
        wall += until_failure;
      }
    }
    total += wall;
  }
  return total / runs;
}

TEST(PlanGoodput, DalysWallClockMatchesASimulationOfFailures) {
  GoodputInputs in;
  in.solve_hours = 200;
  in.devices = 1000;
  in.failures_per_gpu_hour = 1.0 / 20000;  // M = 20 h
  in.checkpoint_seconds = 0.1 * 3600;      // 6 minutes
  in.restart_seconds = 0.5 * 3600;
  const Goodput g = expected_goodput(in);
  EXPECT_NEAR(g.mtbf_hours, 20.0, 1e-9);
  // Daly's optimum: sqrt(2·δ·M) − δ.
  EXPECT_NEAR(g.interval_hours, std::sqrt(2 * 0.1 * 20) - 0.1, 1e-12);
  const double sim = simulate(200, g.interval_hours, 0.1, 0.5, 20, 4000, 7);
  EXPECT_NEAR(g.wall_hours, sim, 0.02 * sim) << "formula " << g.wall_hours << ", simulated " << sim;
  EXPECT_NEAR(g.expected_failures, g.wall_hours / 20.0, 1e-9);
  EXPECT_NEAR(g.goodput, 200 / g.wall_hours, 1e-12);
  // Near the optimum: the simulated wall-clock at half or twice the interval is longer.
  EXPECT_GT(simulate(200, g.interval_hours / 2, 0.1, 0.5, 20, 4000, 8), 0.995 * sim);
  EXPECT_GT(simulate(200, g.interval_hours * 2, 0.1, 0.5, 20, 4000, 9), 0.995 * sim);
}

TEST(PlanGoodput, SmallOverheadsAgreeWithTheFirstOrderModel) {
  // With δ, R ≪ τ ≪ M: T ≈ Ts·(1 + δ/τ + (τ/2 + R)/M).
  GoodputInputs in;
  in.solve_hours = 1000;
  in.devices = 100;
  in.failures_per_gpu_hour = 1e-5;  // M = 1000 h
  in.checkpoint_seconds = 36;       // 0.01 h
  in.restart_seconds = 36;
  const Goodput g = expected_goodput(in);
  const double tau = g.interval_hours;
  const double first_order = 1000 * (1 + 0.01 / tau + (tau / 2 + 0.01) / 1000);
  EXPECT_NEAR(g.wall_hours, first_order, 2e-3 * first_order);
  EXPECT_GT(g.goodput, 0.99);
}

TEST(PlanGoodput, NoFailuresCostOneCheckpointAndMoreDevicesFailMoreOften) {
  GoodputInputs in;
  in.solve_hours = 100;
  in.devices = 8;
  in.failures_per_gpu_hour = 0;
  in.checkpoint_seconds = 360;
  in.restart_seconds = 600;
  Goodput g = expected_goodput(in);
  EXPECT_DOUBLE_EQ(g.wall_hours, 100.1);
  EXPECT_EQ(g.expected_failures, 0);
  // The same work on more devices (a shorter run, as data parallelism gives): failures per
  // hour grow with the devices, goodput falls.
  in.failures_per_gpu_hour = 2e-5;
  double last = 1;
  for (int64_t n : {64, 1024, 16384}) {
    in.devices = n;
    in.solve_hours = 100.0 * 64 / n;
    g = expected_goodput(in);
    EXPECT_LT(g.goodput, last) << n;
    last = g.goodput;
  }
  in.restart_seconds = -1;
  EXPECT_THROW(expected_goodput(in), Error);
  in.restart_seconds = 600;
  in.failures_per_gpu_hour = NAN;
  EXPECT_THROW(expected_goodput(in), Error);
  // A job that fails faster than it restarts would train under 1% of the time: refused, naming
  // the flags, not printed as astronomical (or infinite) days.
  in.failures_per_gpu_hour = 100;
  in.devices = 32;
  in.solve_hours = 1000;
  try {
    expected_goodput(in);
    ADD_FAILURE() << "a job failing every 1.9 s was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--failures-per-gpu-hour"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("would not finish"), std::string::npos) << e.what();
  }
  in.failures_per_gpu_hour = 2e-5;
  in.restart_seconds = 1e9 * 60;
  EXPECT_THROW(expected_goodput(in), Error);
}

// Llama 3's figures: 419 interruptions in 54 days on 16,384 GPUs is the default rate, so a run of
// that size and length expects 419.
TEST(PlanGoodput, TheDefaultRateIsLlama3sAndTheReportShowsTheRunWithFailures) {
  const JobSpec j;
  GoodputInputs in;
  in.devices = 16384;
  in.failures_per_gpu_hour = j.failures_per_gpu_hour;
  const double M = 1.0 / (16384 * j.failures_per_gpu_hour);
  EXPECT_NEAR(54 * 24 / M, 419, 1e-6);
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 8);
  JobSpec job = p.job();
  job.usd_per_gpu_hour = 2;
  const SearchResult r = search(p.model, c, job);
  ASSERT_FALSE(r.fitting.empty());
  const Estimate& e = r.fitting.front();
  const PlanInputs pin{p.model, c, job};
  const std::string text = estimate_text(e, pin);
  EXPECT_NE(text.find("with failures"), std::string::npos) << text;
  EXPECT_NE(text.find("goodput"), std::string::npos) << text;
  const auto js = estimate_json(e, pin);
  const auto& wf = js.at("with_failures");
  EXPECT_GT(wf.at("days").get<double>(), e.days);
  EXPECT_GT(wf.at("cost_usd").get<double>(), e.cost_usd);
  EXPECT_LT(wf.at("goodput").get<double>(), 1.0);
  // 6.74B parameters × 14 bytes over min(8 nodes × one NIC, 2 TB/s).
  EXPECT_NEAR(wf.at("checkpoint_seconds").get<double>(),
              double(count_params(p.model).total) * 14 / (8 * c.nic_gbps / 8 * 1e9), 1e-9);
}

}  // namespace
}  // namespace kiln::plan
