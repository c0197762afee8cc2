// --dtype fp8: linear layers' matmuls at the fp8 rate, their casts, and devices without fp8.
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

JobSpec job(Dtype dt, const std::string& software) {
  JobSpec j;
  j.seq_len = 8192;
  j.global_batch_tokens = 16 * 8192;
  j.train_tokens = 1e12;
  j.dtype = dt;
  j.software = find_software(software);
  return j;
}

Layout fsdp8() {
  Layout l;
  l.dp = 8, l.zero = 3, l.mb = 2;
  return l;
}

// fp8 matmuls reach 0.709 of the fp8 peak in a burst on H100-class tensor cores (the ML
// Engineering book's MAMF table: 1,402.6 of 1,979 TFLOP/s through torch._scaled_mm, where bf16
// reaches 794.5 of 989 in the same software) times the sustained share; the B200 runs at its own
// fp8 MSMF; devices without a measurement scale their bf16 efficiency by the fp8/bf16 ratio.
TEST(PlanFp8, LinearRateIsTheFp8PeakTimesItsEfficiency) {
  const DeviceSpec& h100 = find_device("h100-sxm");
  EXPECT_NEAR(h100.linear_flops(Dtype::fp8), 1979e12 * (1402.6 / 1979) * 0.845, 1e9);
  EXPECT_DOUBLE_EQ(h100.linear_flops(Dtype::bf16), 989e12 * h100.matmul_efficiency);
  EXPECT_NEAR(find_device("b200").linear_flops(Dtype::fp8), 2795.7e12, 1e9);
  const DeviceSpec& l40s = find_device("l40s");
  EXPECT_NEAR(l40s.linear_flops(Dtype::fp8),
              733e12 * l40s.matmul_efficiency * (1402.6 / 1979) / (794.5 / 989), 1e9);
  EXPECT_GT(find_device("mi300x").linear_flops(Dtype::fp8), 0);
}

// An fp8 step of Llama 3 8B on 8 H100s is faster than bf16 but far from twice as fast: attention,
// the LM head, the element-wise work and the casts stay 16-bit, and the fp8 matmul sustains a
// smaller share of its peak.
TEST(PlanFp8, Fp8SpeedsUpOnlyTheLinearLayers) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  const double bf16 = step_time(m, c, job(Dtype::bf16, "torchtitan-compile"), fsdp8(), 1).compute;
  const double fp8 = step_time(m, c, job(Dtype::fp8, "torchtitan-compile"), fsdp8(), 1).compute;
  EXPECT_LT(fp8, 0.85 * bf16);
  EXPECT_GT(fp8, 0.55 * bf16);
}

// --fp8-param-gather (Megatron-Core's --fp8-param-gather, torchtitan's
// enable_fsdp_float8_all_gather): ZeRO-3 gathers the fp8 weights, half the bytes of bf16 ones,
// in time (without overlap the gathers are all exposed) and in the gathered-weight working set;
// it needs --dtype fp8, and the report says it.
TEST(PlanFp8, Fp8ParamGatherHalvesTheGatheredBytes) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec bf16 = job(Dtype::fp8, "torchtitan-compile"), fp8 = bf16;
  fp8.fp8_param_gather = true;
  bf16.overlap_dp = fp8.overlap_dp = false;
  EXPECT_EQ(state_bytes(bf16).gathered, 2);
  EXPECT_EQ(state_bytes(fp8).gathered, 1);
  Layout l;
  l.dp = 32, l.zero = 3, l.mb = 1, l.recompute = Recompute::full;
  const double z16 = step_time(m, c, bf16, l, 1).zero_exposed;
  const double z8 = step_time(m, c, fp8, l, 1).zero_exposed;
  EXPECT_LT(z8, z16);
  EXPECT_GT(z8, 0.5 * z16);  // the gradients' reduce-scatter is unchanged
  EXPECT_LT(memory_per_gpu(m, c, fp8, l, 1).transient, memory_per_gpu(m, c, bf16, l, 1).transient);
  JobSpec wrong = bf16;
  wrong.dtype = Dtype::bf16;
  wrong.fp8_param_gather = true;
  EXPECT_THROW(wrong.validate(), Error);
  auto r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --dtype fp8 --fp8-param-gather --software "
      "torchtitan-compile --layout tp=1,pp=1,mb=2,zero=3,recompute=full,vpp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("weights gathered in fp8"), std::string::npos) << r.output;
  r = kiln::testing::run_kiln("plan --model llama3-8b --gpu h100-sxm --fp8-param-gather");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--fp8-param-gather gathers fp8 weights: it needs --dtype fp8"),
            std::string::npos)
      << r.output;
}

// Casting costs what the software's casts move: torchao's eager dynamic scaling (abs, max, mul,
// clamp, cast, transpose: 7e + 3 bytes an element in 6 kernels) more than torch.compile's fused
// cast (2e + 2 in 2 kernels), itself more than Transformer Engine's cast-transpose (e + 2).
TEST(PlanFp8, CastsCostWhatTheSoftwareMoves) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  auto compute = [&](const std::string& sw, Dtype dt) {
    JobSpec j = job(dt, sw);
    j.software.rmsnorm = j.software.rotary = j.software.swiglu = Composite{};
    j.software.flash_of_peak = {FlashRate{"hopper", {{8192, 0.35}}}};
    j.software.grad_bytes_bf16 = 2;
    return step_time(m, c, j, fsdp8(), 1).compute;
  };
  const double eager = compute("torchtitan", Dtype::fp8) - compute("torchtitan", Dtype::bf16);
  const double compiled =
      compute("torchtitan-compile", Dtype::fp8) - compute("torchtitan-compile", Dtype::bf16);
  const double te = compute("fsdp", Dtype::fp8) - compute("fsdp", Dtype::bf16);
  EXPECT_GT(eager, compiled);
  EXPECT_GT(compiled, te);
}

// A device without fp8 tensor cores is refused, naming the ones that have them.
TEST(PlanFp8, DevicesWithoutFp8AreRefused) {
  EXPECT_NE(precision_problem(find_device("a100-80gb"), Dtype::fp8).find("no fp8 tensor cores"),
            std::string::npos);
  EXPECT_EQ(precision_problem(find_device("h100-sxm"), Dtype::fp8), "");
  EXPECT_EQ(precision_problem(find_device("rtx4090"), Dtype::fp8), "");
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  EXPECT_FALSE(evaluate(m, c, job(Dtype::fp8, "megatron"), fsdp8()).valid());
  auto r = kiln::testing::run_kiln("plan --model llama3-8b --gpu mi250x --dtype fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("mi250x has no fp8 tensor cores"), std::string::npos) << r.output;
  r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --dtype fp8 --software torchtitan-compile --layout "
      "tp=1,pp=1,mb=2,zero=3,recompute=full,vpp=1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace kiln::plan
