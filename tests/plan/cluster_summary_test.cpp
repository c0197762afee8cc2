// The cluster alone: figures from the catalog, worked out by hand.
#include "plan/cluster_summary.h"

#include <gtest/gtest.h>

#include "plan/report.h"

namespace kiln::plan {
namespace {

// 16 DGX H100: 128 × (989 TFLOP/s BF16, 80 GB, 700 W), 8 × 400 Gb/s NDR and 10.2 kW a node. Memory
// is what the driver reports: nvidia-smi's 81,559 MiB.
TEST(PlanClusterSummary, DgxH100FiguresFromTheCatalog) {
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 16);
  const ClusterSummary s = summarize_cluster(c, PowerInputs{});
  EXPECT_EQ(s.gpus, 128);
  EXPECT_DOUBLE_EQ(s.hbm_per_gpu_gib, 81559.0 / 1024);
  EXPECT_DOUBLE_EQ(s.hbm_total_tib, 128 * 81559.0 / 1024 / 1024);
  ASSERT_EQ(s.peaks.size(), 3u);
  EXPECT_DOUBLE_EQ(s.peaks[0].per_gpu, 989);
  EXPECT_DOUBLE_EQ(s.peaks[0].total, 126.592);  // PFLOP/s
  EXPECT_DOUBLE_EQ(s.peaks[1].total, 8.576);
  EXPECT_EQ(s.peaks[2].dtype, "fp8");  // dense: the datasheet's 3,958 is with sparsity
  EXPECT_DOUBLE_EQ(s.peaks[2].per_gpu, 1979);
  EXPECT_DOUBLE_EQ(s.intra_per_gpu_gbs, 450);
  EXPECT_DOUBLE_EQ(s.intra_per_gpu_effective_gbs, 360);  // NVLink at 0.80
  EXPECT_DOUBLE_EQ(s.inter_per_node_gbs, 400);           // 8 × 400 Gb/s
  EXPECT_DOUBLE_EQ(s.inter_per_gpu_gbs, 50);
  EXPECT_DOUBLE_EQ(s.injection_total_gbs, 6400);
  EXPECT_DOUBLE_EQ(s.bisection_gbs, 3200);  // non-blocking: 8 nodes to the other 8
  ASSERT_TRUE(s.has_power);
  EXPECT_DOUBLE_EQ(s.it_kw, 16 * 10.2);  // the DGX H100's 10.2 kW, GPUs at TDP included
  EXPECT_DOUBLE_EQ(s.facility_kw, 16 * 10.2 * 1.2);
  EXPECT_NE(s.source.find("H100 datasheet"), std::string::npos);
  // --gpu-power-w and --pue replace the TDP and the default PUE.
  const ClusterSummary q = summarize_cluster(c, PowerInputs{500, -1, 1.1});
  EXPECT_DOUBLE_EQ(q.it_kw, (128 * 500 + 16 * 4600) / 1000.0);
  EXPECT_EQ(q.power_source, "--gpu-power-w");
}

// An oversubscribed network spanning leaves carries 1/r across; a ring is cut through 2 links.
TEST(PlanClusterSummary, BisectionFollowsTheTopology) {
  ClusterSpec c = default_cluster(find_device("a100-80gb"), 64);
  c.topology = Topology::spine_leaf;
  c.oversubscription = 2;
  EXPECT_DOUBLE_EQ(summarize_cluster(c, {}).bisection_gbs, 32 * 200.0 / 2);  // 8 × 200 Gb/s
  c.nodes = 32;                                                              // one leaf
  EXPECT_DOUBLE_EQ(summarize_cluster(c, {}).bisection_gbs, 16 * 200.0);
  c.topology = Topology::ring;
  c.oversubscription = 1;
  EXPECT_DOUBLE_EQ(summarize_cluster(c, {}).bisection_gbs, 2 * 200.0);
  c.nodes = 1;
  EXPECT_DOUBLE_EQ(summarize_cluster(c, {}).bisection_gbs, 0);
}

// A description without a device power gives no power figure, and says so; none is made up.
TEST(PlanClusterSummary, NoPowerFigureIsLeftOutAndSaid) {
  HardwareFile hw = parse_hardware_toml("[device]\nbase = \"a100-80gb\"\ntdp_w = 0\n", "test.toml");
  hw.cluster.nodes = 2;
  const ClusterSummary s = summarize_cluster(hw.cluster, {});
  EXPECT_FALSE(s.has_power);
  EXPECT_NE(s.power_note.find("no power figure"), std::string::npos) << s.power_note;
  const nlohmann::json j = cluster_summary_json(hw.cluster, s);
  EXPECT_TRUE(j["power"].is_null());
  EXPECT_EQ(cluster_summary_text(hw.cluster, s).find(" kW"), std::string::npos);
}

}  // namespace
}  // namespace kiln::plan
