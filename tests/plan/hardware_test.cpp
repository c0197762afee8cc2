#include "plan/hardware.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

using kiln::testing::error_of;

TEST(PlanHardware, FileStartsFromACatalogEntryAndOverridesIt) {
  const HardwareFile hw = parse_hardware_toml(R"(
[device]
base = "h100-sxm"
name = "h100-cut"
memory_gib = 60
[node]
nics_per_node = 4
[cluster]
nodes = 16
topology = "spine-leaf"
oversubscription = 2.0
nodes_per_domain = 8
rank_order = "tp-pp-dp"
)",
                                              "cut.toml");
  EXPECT_EQ(hw.device.name, "h100-cut");
  EXPECT_DOUBLE_EQ(hw.device.memory_gib, 60);
  EXPECT_DOUBLE_EQ(hw.device.peak_tflops_16, 989);  // from the base
  EXPECT_EQ(hw.cluster.nics_per_node, 4);
  EXPECT_EQ(hw.cluster.nodes, 16);
  EXPECT_TRUE(hw.has_nodes);
  EXPECT_EQ(hw.cluster.topology, Topology::spine_leaf);
  EXPECT_DOUBLE_EQ(hw.cluster.oversubscription, 2);
  EXPECT_EQ(hw.cluster.order, RankOrder::tp_pp_dp);
  // 4 NICs of 400 Gb/s at 92% shared by 8 GPUs.
  EXPECT_DOUBLE_EQ(hw.cluster.inter_bw_per_gpu(), 4 * 400 / 8.0 * 1e9 * 0.92 / 8);
}

TEST(PlanHardware, WrittenFileReadsBack) {
  DeviceSpec d = find_device("cpu");
  d.name = "this-cpu";
  d.peak_tflops_32 = 0.1875;
  d.cache_mib = 32;
  d.cache_bw_gbs = 95.5;
  d.overlap_slowdown = 0.25;
  d.sustained = 0.9;
  const HardwareFile hw = parse_hardware_toml(hardware_toml(d, "measured\non a test"), "x.toml");
  EXPECT_EQ(hw.device.name, "this-cpu");
  EXPECT_TRUE(hw.device.cpu);
  EXPECT_DOUBLE_EQ(hw.device.peak_tflops_32, 0.1875);
  EXPECT_DOUBLE_EQ(hw.device.cache_bw_gbs, 95.5);
  EXPECT_DOUBLE_EQ(hw.device.overlap_slowdown, 0.25);
  EXPECT_DOUBLE_EQ(hw.device.sustained, 0.9);
  EXPECT_EQ(hw.cluster.gpus_per_node, 1);
}

TEST(PlanHardware, ErrorsNameTheKeyAndTheFile) {
  EXPECT_NE(error_of([] {
              parse_hardware_toml("[device]\nbase = \"a100-80gb\"\nmemory_gb = 3\n", "a.toml");
            })
                .find("a.toml: unknown hardware key 'device.memory_gb' (did you mean "
                      "'device.memory_gib'?)"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_hardware_toml("[device]\nname = \"x\"\n", "b.toml");
            }).find("b.toml: device 'x' needs peak_tflops_bf16 or peak_tflops_fp32"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_hardware_toml("[device]\nbase = \"a100-80gb\"\nmemory_gib = \"lots\"\n",
                                  "c.toml");
            }).find("c.toml: hardware key 'device.memory_gib' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_hardware_toml("[gpu]\nx = 1\n", "d.toml");
            }).find("d.toml: unknown table or key 'gpu'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_hardware_toml("[device]\nbase = \"h100-sxm\"\noverlap_slowdown = 1.5\n",
                                  "f.toml");
            }).find("f.toml: device 'h100-sxm': overlap_slowdown is the fraction"),
            std::string::npos);
  for (const char* v : {"0", "1.2", "-0.5"})
    EXPECT_NE(error_of([&] {
                parse_hardware_toml(
                    std::string("[device]\nbase = \"h100-sxm\"\nsustained = ") + v + "\n",
                    "g.toml");
              }).find("g.toml: device 'h100-sxm': sustained is the share of a burst's rate"),
              std::string::npos)
        << v;
  EXPECT_NE(error_of([] { parse_hardware_toml("[device\n", "e.toml"); }).find("e.toml:1:"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              load_hardware_file("/nonexistent/hw.toml");
            }).find("cannot read hardware file /nonexistent/hw.toml"),
            std::string::npos);
}

TEST(PlanHardware, CatalogNumbersAreDatasheetTimesStatedEfficiency) {
  for (const DeviceSpec& d : device_catalog()) {
    EXPECT_NO_THROW(d.validate("catalog")) << d.name;
    EXPECT_FALSE(d.source.empty()) << d.name;
  }
  EXPECT_DOUBLE_EQ(find_device("a100-80gb").peak_tflops_16, 312);
  EXPECT_NEAR(find_device("a100-80gb").matmul_efficiency, 0.859 * 0.845, 1e-12);
  EXPECT_NEAR(find_device("mi300x").matmul_efficiency, 668.4 / 1307, 1e-12);
  // torchtitan's 500 W H100: the SXM's peak times the 500 W cap's measured cost (Mayr et al.
  // 2026, table 4: Llama 3 8B tokens/s at 500 W over 700 W), inside the interval torchtitan
  // gives (between the NVL's 835 and the SXM's 989).
  const DeviceSpec& capped = find_device("h100-96gb-500w");
  EXPECT_NEAR(capped.peak_tflops_16, 989 * 27705.3 / 30271.0, 1e-9);
  EXPECT_NEAR(capped.peak_tflops_8, 1979 * 27705.3 / 30271.0, 1e-9);
  EXPECT_GT(capped.peak_tflops_16, 835);
  EXPECT_LT(capped.peak_tflops_16, find_device("h100-sxm").peak_tflops_16);
  EXPECT_DOUBLE_EQ(capped.matmul_efficiency, find_device("h100-sxm").matmul_efficiency);
}

// --power-cap-w: the measured Llama 3 8B training throughput of an HBM2e H100 SXM at each board
// limit (Mayr et al. 2026, table 4), interpolated in W; the peaks scale by it against the part's
// own limit, and the device's power becomes the limit.
TEST(PlanHardware, PowerCapScalesThePeaksByTheMeasuredCurve) {
  const DeviceSpec& sxm = find_device("h100-sxm");
  const DeviceSpec at500 = with_power_cap(sxm, 500);
  EXPECT_NEAR(at500.peak_tflops_16, 989 * 27705.3 / 30271.0, 1e-9);
  EXPECT_NEAR(at500.peak_tflops_8, 1979 * 27705.3 / 30271.0, 1e-9);
  EXPECT_NEAR(at500.peak_tflops_32, 67 * 27705.3 / 30271.0, 1e-9);
  EXPECT_DOUBLE_EQ(at500.tdp_w, 500);
  EXPECT_DOUBLE_EQ(at500.power_cap_w, 500);
  EXPECT_DOUBLE_EQ(at500.matmul_efficiency, sxm.matmul_efficiency);
  // The measured ratio is the whole step's, so memory-bound work takes it too.
  EXPECT_NEAR(at500.mem_bw_gbs, 3350 * 27705.3 / 30271.0, 1e-9);
  // Half-way between two measured limits: half-way between their throughputs.
  EXPECT_NEAR(with_power_cap(sxm, 450).peak_tflops_16, 989 * (24853.4 + 27705.3) / 2 / 30271.0,
              1e-9);
  EXPECT_DOUBLE_EQ(with_power_cap(sxm, 700).peak_tflops_16, 989);
  // torchtitan's 500 W part is the SXM at 500 W; raising its limit to 700 W gives the SXM's
  // peak back, and lowering it scales from its own 500 W.
  const DeviceSpec& tt = find_device("h100-96gb-500w");
  EXPECT_DOUBLE_EQ(tt.peak_tflops_16, at500.peak_tflops_16);
  EXPECT_NEAR(tt.mem_bw_gbs, 2400 * 27705.3 / 30271.0, 1e-9);  // its 2.4 TB/s at 700 W
  EXPECT_NEAR(with_power_cap(tt, 700).peak_tflops_16, 989, 1e-9);
  EXPECT_NEAR(with_power_cap(tt, 700).mem_bw_gbs, 2400, 1e-9);
  EXPECT_NEAR(with_power_cap(tt, 300).peak_tflops_16, 989 * 17982.3 / 30271.0, 1e-9);
  // Outside the measurement, or a part with none, is refused by name.
  EXPECT_NE(error_of([&] { with_power_cap(sxm, 150); })
                .find("--power-cap-w 150: the measurement for h100-sxm covers limits from 200 to "
                      "700 W"),
            std::string::npos);
  EXPECT_NE(error_of([&] { with_power_cap(sxm, 750); }).find("200 to 700 W"), std::string::npos);
  const std::string none = error_of([] { with_power_cap(find_device("a100-80gb"), 300); });
  EXPECT_NE(none.find("no measurement of training throughput under a power limit is known for "
                      "'a100-80gb'; kiln has one for h100-sxm and h100-96gb-500w"),
            std::string::npos)
      << none;
  EXPECT_NE(error_of([] { with_power_cap(find_device("h100-pcie"), 300); }), "");
  // A hardware file keeps its base's curve unless it changes what the curve was measured at
  // (the peaks, the power, the part).
  const HardwareFile same = parse_hardware_toml(
      "[device]\nbase = \"h100-sxm\"\nname = \"ours\"\nmemory_gib = 70\n", "same.toml");
  EXPECT_NEAR(with_power_cap(same.device, 500).peak_tflops_16, at500.peak_tflops_16, 1e-9);
  for (const char* key : {"tdp_w = 600", "peak_tflops_bf16 = 900", "arch = \"blackwell\""}) {
    const HardwareFile other = parse_hardware_toml(
        fmt::format("[device]\nbase = \"h100-sxm\"\nname = \"ours\"\n{}\n", key), "o.toml");
    EXPECT_NE(error_of([&] { with_power_cap(other.device, 500); })
                  .find("no measurement of training throughput under a power limit is known for "
                        "'ours'"),
              std::string::npos)
        << key;
  }
}

}  // namespace
}  // namespace kiln::plan
