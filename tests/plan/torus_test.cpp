// TPU v4 slices: the torus shapes, the collectives over ICI against the Scaling Book's worked
// answers, and the catalog entry against Google's published pod figures.
#include "plan/torus.h"

#include <gtest/gtest.h>

#include "plan/cluster_summary.h"
#include "plan/collectives.h"
#include "plan/planner.h"
#include "plan/sizing.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

using kiln::testing::run_kiln;

ClusterSpec tpu_v4(int chips) {
  return default_cluster(find_device("tpu-v4"), chips / 4);
}

TEST(PlanTorus, SlicesAreWholeCubesWithWraparoundOrSmallOpenBoxes) {
  std::string problem;
  TorusShape t = torus_shape(4096, 4096, &problem);
  EXPECT_EQ(problem, "");
  EXPECT_EQ(t.name(), "16x16x16");
  EXPECT_TRUE(t.wrap[0] && t.wrap[1] && t.wrap[2]);
  EXPECT_EQ(torus_shape(128, 4096, nullptr).name(), "4x4x8");
  EXPECT_EQ(torus_shape(3072, 4096, nullptr).name(), "12x16x16");
  t = torus_shape(16, 4096, nullptr);
  EXPECT_EQ(t.name(), "2x2x4");
  EXPECT_FALSE(t.wrap[2]);  // below a 4×4×4 cube the optical switches add no wraparound
  torus_shape(48, 4096, &problem);
  EXPECT_NE(problem.find("cannot have 48 chips"), std::string::npos) << problem;
  EXPECT_NE(problem.find("4, 8, 16, 32, 64, 128"), std::string::npos) << problem;
  torus_shape(8192, 4096, &problem);
  EXPECT_NE(problem.find("with --slices N"), std::string::npos) << problem;
}

// Google's TPU v4 page: 1.1 PB/s of all-reduce bandwidth and 24 TB/s of bisection per pod of
// 4,096 chips. kiln builds both from the Scaling Book's 45 GB/s per link each way.
TEST(PlanTorus, PodBandwidthsMatchGooglesFigures) {
  const ClusterSpec c = tpu_v4(4096);
  const ClusterSummary s = summarize_cluster(c, PowerInputs{});
  EXPECT_NEAR(s.intra_per_gpu_gbs * 4096 / 1.1e6, 1.0, 0.01);  // 6 links × 45 GB/s per chip
  EXPECT_NEAR(s.bisection_gbs / 24e3, 1.0, 0.05);              // 2 × 16 × 16 links: 23 TB/s
  EXPECT_EQ(s.topology, "torus");
  EXPECT_TRUE(s.has_power);
  EXPECT_DOUBLE_EQ(s.gpu_w, 192);  // the page's measured maximum
}

// The Scaling Book (sharding.md, question 2): on a TPU v4 4×4×4 slice, all-gathering a bf16
// [1024, 4096] array over one axis takes V / W_bidi = 8.4 MB / 90 GB/s = 93 µs, and over two
// axes half of that. kiln's ring moves (n − 1)/n of it at 82% of the link rate, after |X|/2 hops
// of 1 µs per axis.
TEST(PlanTorus, AllGatherOverAxesAsTheScalingBookCountsIt) {
  const ClusterSpec c = tpu_v4(64);
  ASSERT_EQ(c.torus().name(), "4x4x4");
  const double V = 2.0 * 1024 * 4096, link = 45e9 * 0.82;
  Layout x = parse_layout("tp=4,pp=1,dp=16");
  const GroupPath gx = group_path(c, x, Dim::tp);
  EXPECT_TRUE(gx.torus);
  EXPECT_EQ(gx.hops, 2);
  EXPECT_NEAR(all_gather_s(V, gx), 2e-6 + 0.75 * V / (2 * link), 1e-12);
  EXPECT_NEAR(0.75 * V / (2 * 45e9), 0.75 * 93e-6, 1e-6);  // the book's answer, kiln's share
  // dp=16 with tp=1: ranks 0..15 cover the x and y axes, both wrapped: twice the bandwidth.
  Layout xy = parse_layout("tp=1,pp=4,dp=16");
  const GroupPath gxy = group_path(c, xy, Dim::dp);
  EXPECT_EQ(gxy.hops, 4);
  EXPECT_NEAR(all_gather_s(V, gxy), 4e-6 + (15.0 / 16) * V / (4 * link), 1e-12);
  // An all-reduce is a reduce-scatter and an all-gather.
  EXPECT_NEAR(all_reduce_s(V, gxy), 2 * all_gather_s(V, gxy), 1e-12);
}

TEST(PlanTorus, OpenAxesAndSpacedGroupsGetLessOfTheLinks) {
  // 2×2×4 has no wraparound: a pair along x is a line, one link each way, one hop.
  const ClusterSpec open = tpu_v4(16);
  const GroupPath pair = group_path(open, parse_layout("tp=2,pp=1,dp=8"), Dim::tp);
  EXPECT_EQ(pair.hops, 1);
  EXPECT_NEAR(pair.intra_bw, 45e9 * 0.82, 1);
  // On 4×4×4, chips 0 and 2 of an x ring reach each other both ways round it (2 links), two
  // hops each, sharing every link with the pair {1, 3}: one link's worth each.
  const ClusterSpec cube = tpu_v4(64);
  const TorusPath spaced = torus_group(cube.torus(), {0, 2});
  EXPECT_DOUBLE_EQ(spaced.links, 1);
  EXPECT_EQ(spaced.hops, 2);
  const TorusPath whole = torus_group(cube.torus(), {0, 1, 2, 3});
  EXPECT_DOUBLE_EQ(whole.links, 2);
  // Pipeline sends: rank 0 to rank 15 of 16x16x16 is one hop round the wraparound.
  const TorusPath send = torus_send(tpu_v4(4096).torus(), 0, 15);
  EXPECT_EQ(send.hops, 1);
  EXPECT_DOUBLE_EQ(send.links, 1);
}

TEST(PlanTorus, TensorParallelismStaysOnOneAxisAndSizesAreSlices) {
  const Preset& p = find_preset("llama2-7b");
  JobSpec j = p.job();
  j.software = find_software("maxtext");  // what a TPU slice runs (the CLI's default there)
  // 4x8x8: tp up to the 4 chips of x.
  const ClusterSpec c = tpu_v4(256);
  EXPECT_EQ(layout_problem(p.model, c, j, parse_layout("tp=4,pp=1,dp=64")), "");
  const std::string wide = layout_problem(p.model, c, j, parse_layout("tp=8,pp=1,dp=32"));
  EXPECT_NE(wide.find("x axis of the slice"), std::string::npos) << wide;
  // A size no slice has is refused by the search's checks, not thrown.
  const std::string odd = layout_problem(p.model, tpu_v4(48), j, parse_layout("tp=1,pp=1,dp=48"));
  EXPECT_NE(odd.find("cannot have 48 chips"), std::string::npos) << odd;
  // --days searches slice sizes only.
  const DeadlineResult r = smallest_cluster_for_days(p.model, tpu_v4(4), j, 60, {}, 1024);
  ASSERT_TRUE(r.found);
  EXPECT_TRUE(torus_size_ok(r.cluster.total_gpus(), 4096)) << r.cluster.total_gpus();
}

// Beyond a pod, --days splits a size into the fewest slices Google offers, joined over the
// data-centre network; held to one slice (--slices 1) the same deadline is out of reach.
TEST(PlanTorus, DeadlineBeyondAPodUsesSlices) {
  const Preset& p = find_preset("llama2-70b");
  JobSpec j = p.job();
  j.software = find_software("maxtext");
  j.train_tokens = 2e12;
  const int pod_hosts = 4096 / 4;
  const DeadlineResult one = smallest_cluster_for_days(p.model, tpu_v4(4), j, 10, {}, pod_hosts);
  EXPECT_FALSE(one.found);
  const DeadlineResult many =
      smallest_cluster_for_days(p.model, tpu_v4(4), j, 10, {}, 32 * pod_hosts, 32);
  ASSERT_TRUE(many.found);
  EXPECT_LE(many.best.days, 10);
  const ClusterSpec& c = many.cluster;
  EXPECT_GT(c.slices, 1);
  EXPECT_EQ(c.total_gpus() % c.slices, 0);
  EXPECT_TRUE(torus_size_ok(c.total_gpus() / c.slices, 4096)) << c.describe();
  // The fewest slices: one fewer would need a slice larger than a pod.
  EXPECT_GT(c.total_gpus() / (c.slices - 1), 4096) << c.describe();
}

TEST(PlanTorus, HardwareFileKeepsTheTorus) {
  const HardwareFile hw = parse_hardware_toml(
      "[device]\nbase = \"tpu-v4\"\nname = \"tpu-v4-small-pod\"\nmax_slice_chips = 512\n"
      "[cluster]\nnodes = 128\n",
      "pod.toml");
  EXPECT_EQ(hw.cluster.topology, Topology::torus);
  EXPECT_EQ(hw.cluster.torus().name(), "8x8x8");
  const std::string text = hardware_toml(hw.device, "round trip");
  EXPECT_NE(text.find("torus_dims = 3\nmax_slice_chips = 512"), std::string::npos) << text;
  EXPECT_EQ(parse_hardware_toml(text, "again.toml").device.max_slice_chips, 512);
  ClusterSpec too_big = hw.cluster;
  too_big.nodes = 256;
  EXPECT_NE(kiln::testing::error_of([&] { too_big.validate(); }).find("more than one pod of 512"),
            std::string::npos);
}

TEST(PlanTorus, CliPlansASliceAndRefusesWhatIsNotOne) {
  auto ok = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 256 --top 1");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("slice 4x8x8 of ICI links with wraparound"), std::string::npos)
      << ok.output;
  EXPECT_NE(ok.output.find("software maxtext"), std::string::npos) << ok.output;  // XLA, not a
  auto gpu = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 256 --top 1 --software fsdp");
  EXPECT_NE(gpu.output.find("software fsdp"), std::string::npos) << gpu.output;  // GPU framework
  auto odd = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 48");
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("cannot have 48 chips"), std::string::npos) << odd.output;
  auto fat = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 64 --topology fat-tree");
  EXPECT_NE(fat.exit_code, 0);
  EXPECT_NE(fat.output.find("ICI torus"), std::string::npos) << fat.output;
  auto json = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 128 --top 1 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_NE(json.output.find("\"slice\": \"4x4x8\""), std::string::npos) << json.output;
  auto summary = run_kiln("plan --gpu tpu-v4 --gpus 4096");
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("512 links of 45 GB/s"), std::string::npos) << summary.output;
}

}  // namespace
}  // namespace kiln::plan
