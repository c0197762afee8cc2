// The Ascend 910 in the catalog: its server rebuilt from Huawei's published figures, the HCCS
// full mesh (a group gets the links that reach its members), fp16 as its only 16-bit precision,
// and tensor parallelism kept inside one HCCS group.
#include <gtest/gtest.h>

#include "plan/cluster_summary.h"
#include "plan/collectives.h"
#include "plan/planner.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

using kiln::testing::error_of;
using kiln::testing::run_kiln;

ClusterSpec ascend(int chips) {
  return default_cluster(find_device("ascend-910"), chips / 4);
}

// Huawei: an Atlas 800 server of 8 processors and its CPUs draws 6 kW (Hot Chips 2019), and an
// Atlas 900 of 1,024 to 4,096 processors gives "256P~1024P FLOPS @FP16" (256 TFLOP/s each).
TEST(PlanAscend, ServerAndClusterMatchHuaweisFigures) {
  const ClusterSummary server = summarize_cluster(ascend(8), PowerInputs{});
  EXPECT_EQ(server.nodes, 2);  // kiln's node is one HCCS group of 4
  EXPECT_NEAR(server.it_kw, 6.0, 1e-9);
  const ClusterSummary pod = summarize_cluster(ascend(4096), PowerInputs{});
  ASSERT_EQ(pod.peaks.size(), 1u);  // fp16 only: no bf16, no fp8, no published fp32 matrix rate
  EXPECT_EQ(pod.peaks[0].dtype, "fp16");
  EXPECT_NEAR(pod.peaks[0].total, 1024 * 1.024, 1e-6);  // 1,048.6 PFLOP/s: Huawei's "1024P"
  // Each processor's own 100 Gb/s RoCE port (Huawei's HCCN Tool guide: one per NPU).
  EXPECT_NEAR(server.inter_per_gpu_gbs, 12.5, 1e-9);
}

// Three HCCS links per chip, one to each other chip of its group of 4: all of them serve a group
// of the 4, one a pair; a switch (NVLink) gives any group the device's whole rate.
TEST(PlanAscend, AMeshGroupGetsTheLinksThatReachItsMembers) {
  const ClusterSpec c = ascend(8);
  const double link = 30e9 * 0.80;
  const GroupPath four = group_path(c, parse_layout("tp=4,pp=1,dp=2"), Dim::tp);
  EXPECT_EQ(four.nodes, 1);
  EXPECT_NEAR(four.intra_bw, 3 * link, 1);
  const GroupPath pair = group_path(c, parse_layout("tp=2,pp=1,dp=4"), Dim::tp);
  EXPECT_NEAR(pair.intra_bw, link, 1);
  const double S = 64e6;
  // A ring moves 2(n−1)/n of the buffer: 1 over one link against 3/2 over three.
  const double G = 1e9;  // large enough that the steps' latency is below 0.2%
  EXPECT_NEAR(all_reduce_s(G, pair) / all_reduce_s(G, four), 1.0 / (1.5 / 3), 0.005);
  // A pipeline send between stages of one group takes one link.
  const double send = p2p_s(S, ascend(4), parse_layout("tp=1,pp=4,dp=1"));
  EXPECT_NEAR(send, 3.4e-6 + S / link, 1e-9);
  // The MI300X platform is a mesh of 8: a pair gets one of a GPU's 7 links, 8 get all of them.
  const ClusterSpec mi = default_cluster(find_device("mi300x"), 1);
  const double xgmi_link = 448e9 / 7 * 0.70;
  EXPECT_NEAR(group_path(mi, parse_layout("tp=2,pp=1,dp=4"), Dim::tp).intra_bw, xgmi_link, 1);
  EXPECT_NEAR(group_path(mi, parse_layout("tp=8,pp=1,dp=1"), Dim::tp).intra_bw, 7 * xgmi_link, 1);
  // NVLink: a pair gets what a group of 8 gets.
  const ClusterSpec dgx = default_cluster(find_device("a100-80gb"), 1);
  EXPECT_DOUBLE_EQ(group_path(dgx, parse_layout("tp=2,pp=1,dp=4"), Dim::tp).intra_bw,
                   group_path(dgx, parse_layout("tp=8,pp=1,dp=1"), Dim::tp).intra_bw);
}

TEST(PlanAscend, TensorParallelismStaysInOneHccsGroup) {
  const Preset& p = find_preset("llama2-7b");
  JobSpec j = p.job();
  j.dtype = Dtype::fp16;
  const ClusterSpec c = ascend(64);
  EXPECT_EQ(layout_problem(p.model, c, j, parse_layout("tp=4,pp=1,dp=16")), "");
  const std::string wide = layout_problem(p.model, c, j, parse_layout("tp=8,pp=1,dp=8"));
  EXPECT_NE(wide.find("spans more than a node (4 devices)"), std::string::npos) << wide;
  j.dtype = Dtype::bf16;
  const std::string bf16 = layout_problem(p.model, c, j, parse_layout("tp=4,pp=1,dp=16"));
  EXPECT_NE(bf16.find("multiplies fp16, not bf16"), std::string::npos) << bf16;
}

TEST(PlanAscend, HardwareFileKeepsFp16Only) {
  const HardwareFile hw = parse_hardware_toml(
      "[device]\nbase = \"ascend-910\"\nname = \"ascend-910-pro\"\npeak_tflops_bf16 = 280\n",
      "pro.toml");
  EXPECT_FALSE(hw.device.bf16);
  const std::string text = hardware_toml(hw.device, "round trip");
  EXPECT_NE(text.find("bf16 = false"), std::string::npos) << text;
  const HardwareFile again = parse_hardware_toml(text, "again.toml");
  EXPECT_FALSE(again.device.bf16);
  EXPECT_EQ(again.device.intra_link, "hccs");
  EXPECT_DOUBLE_EQ(again.device.peak_tflops_16, 280);
  // A GPU file says nothing and keeps bf16.
  EXPECT_TRUE(parse_hardware_toml("[device]\nbase = \"a100-80gb\"\n", "a.toml").device.bf16);
  const std::string bad = error_of(
      [] { parse_hardware_toml("[device]\nbase = \"ascend-910\"\nbf16 = 0\n", "bad.toml"); });
  EXPECT_NE(bad.find("bad.toml: hardware key 'device.bf16' must be true or false"),
            std::string::npos)
      << bad;
}

TEST(PlanAscend, CliPlansInFp16AndRefusesWhatTheChipLacks) {
  auto ok = run_kiln("plan --model llama2-7b --gpu ascend-910 --gpus 64 --top 1");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_NE(ok.output.find("fp16, flash attention"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("16 nodes × 4, hccs 90 GB/s"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("asynctp=0 (megatron's overlap is CUDA's"), std::string::npos)
      << ok.output;
  auto bf16 = run_kiln("plan --model llama2-7b --gpu ascend-910 --gpus 64 --dtype bf16");
  EXPECT_NE(bf16.exit_code, 0);
  EXPECT_NE(bf16.output.find("plan with --dtype fp16"), std::string::npos) << bf16.output;
  auto fp32 = run_kiln("plan --model llama2-7b --gpu ascend-910 --gpus 64 --dtype fp32");
  EXPECT_NE(fp32.exit_code, 0);
  EXPECT_NE(fp32.output.find("no fp32 peak in its description; plan with --dtype fp16"),
            std::string::npos)
      << fp32.output;
  auto fp8 = run_kiln("plan --model llama2-7b --gpu ascend-910 --gpus 64 --dtype fp8");
  EXPECT_NE(fp8.exit_code, 0);
  EXPECT_NE(fp8.output.find("no fp8 tensor cores"), std::string::npos) << fp8.output;
  auto summary = run_kiln("plan --gpu ascend-910 --gpus 8");
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("peak fp16 dense"), std::string::npos) << summary.output;
  auto list = run_kiln("plan --list-gpus");
  EXPECT_NE(list.output.find("fp16 only"), std::string::npos) << list.output;
}

}  // namespace
}  // namespace kiln::plan
