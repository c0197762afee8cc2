// kiln's matmul times against measured ones: OpenXLA's default matmul performance table
// (xla/service/gpu/model/matmul_interpolator_data.h, as in ROCm/xla at ea2c45f2ca, 2026-07-31),
// XLA's measured BF16 GEMM rates on H100 (sm_90), B200 (sm_100) and MI300X (gfx942). The
// rates below are its single products with every dimension at least 2048, the transformer
// blocks' sizes, as tests/plan/make_openxla_gemm.py prints them from that file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/time_model.h"

namespace kiln::plan {
namespace {

struct Measured {
  std::string gpu;
  double m, n, k;
  double tflops;
};

const std::vector<Measured>& measured() {
  static const std::vector<Measured> rows = {
      {"sm_100_B200", 2048, 2048, 2048, 985.8},  {"sm_100_B200", 2048, 4096, 2048, 1172.8},
      {"sm_100_B200", 2048, 2048, 4096, 1208.5}, {"sm_100_B200", 2048, 4096, 4096, 1342.5},
      {"sm_100_B200", 4096, 2048, 2048, 1170.0}, {"sm_100_B200", 4096, 4096, 2048, 1277.8},
      {"sm_100_B200", 4096, 2048, 4096, 1343.5}, {"sm_100_B200", 4096, 4096, 4096, 1416.9},
      {"sm_90", 2048, 2048, 2048, 641.0},        {"sm_90", 2048, 4096, 2048, 725.5},
      {"sm_90", 2048, 2048, 4096, 752.2},        {"sm_90", 2048, 4096, 4096, 752.3},
      {"sm_90", 4096, 2048, 2048, 727.5},        {"sm_90", 4096, 4096, 2048, 735.6},
      {"sm_90", 4096, 2048, 4096, 759.4},        {"sm_90", 4096, 4096, 4096, 780.2},
      {"gfx942", 2048, 2048, 2048, 393.4},       {"gfx942", 2048, 4096, 2048, 498.8},
      {"gfx942", 2048, 2048, 4096, 433.2},       {"gfx942", 2048, 4096, 4096, 531.3},
      {"gfx942", 4096, 2048, 2048, 461.5},       {"gfx942", 4096, 4096, 2048, 546.5},
      {"gfx942", 4096, 2048, 4096, 488.6},       {"gfx942", 4096, 4096, 4096, 583.1},
  };
  return rows;
}

struct Part {
  std::string gpu, device;
};
const std::vector<Part> kParts = {
    {"sm_90", "h100-sxm"}, {"sm_100_B200", "b200"}, {"gfx942", "mi300x"}};

double seconds(const Measured& r) {
  return 2 * r.m * r.n * r.k / (r.tflops * 1e12);
}

// The catalog's matmul fixed cost is the intercept of the least-squares line
// time = FLOPs / R + t0 through the table's shapes (device_catalog.cpp): the fit, redone here,
// agrees to the 0.1 µs the catalog rounds it to.
TEST(PlanGemmShapes, MatmulFixedCostIsTheMeasuredTablesIntercept) {
  for (const Part& p : kParts) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const Measured& r : measured()) {
      if (r.gpu != p.gpu) continue;
      const double f = 2 * r.m * r.n * r.k, t = seconds(r);
      n += 1, sx += f, sy += t, sxx += f * f, sxy += f * t;
    }
    ASSERT_EQ(n, 8) << p.gpu;
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double t0_us = (sy - slope * sx) / n * 1e6;
    EXPECT_NEAR(find_device(p.device).matmul_overhead_us, t0_us, 0.051) << p.device;
  }
}

// What the fixed cost is for: a smaller GEMM runs further from the device's rate. kiln's time
// of each shape relative to its time of 4096³ follows the measured ratio within 10% (its own
// rate is the sustained one of the catalog, not the table's burst, so ratios are compared; they
// depend on that rate as well as on the fixed cost: the MI300X at its former efficiency fails).
TEST(PlanGemmShapes, SmallerGemmsLoseWhatTheMeasuredTableSays) {
  for (const Part& p : kParts) {
    const DeviceSpec& d = find_device(p.device);
    const Measured* big = nullptr;
    for (const Measured& r : measured())
      if (r.gpu == p.gpu && r.m == 4096 && r.n == 4096 && r.k == 4096) big = &r;
    ASSERT_NE(big, nullptr);
    const double kiln_big = matmul_seconds(d, Dtype::bf16, 4096, 4096, 4096);
    for (const Measured& r : measured()) {
      if (r.gpu != p.gpu) continue;
      const double kiln = matmul_seconds(d, Dtype::bf16, r.m, r.n, r.k) / kiln_big;
      const double table = seconds(r) / seconds(*big);
      EXPECT_NEAR(kiln / table, 1.0, 0.10) << p.device << " " << r.m << "x" << r.n << "x" << r.k
                                           << ": kiln " << kiln << " of 4096³, measured " << table;
    }
  }
}

// Where no table gives it, a matmul's fixed cost is the device's kernel overhead.
TEST(PlanGemmShapes, WithoutATableAMatmulCostsTheKernelOverhead) {
  DeviceSpec d = find_device("a100-80gb");
  ASSERT_EQ(d.matmul_overhead_us, 0);
  const double t = matmul_seconds(d, Dtype::bf16, 4096, 4096, 4096);
  d.kernel_overhead_us += 10;
  EXPECT_NEAR(matmul_seconds(d, Dtype::bf16, 4096, 4096, 4096) - t, 10e-6, 1e-12);
  d.matmul_overhead_us = 3;  // a table's cost replaces it
  EXPECT_NEAR(matmul_seconds(d, Dtype::bf16, 4096, 4096, 4096) - t, (3 - 4) * 1e-6, 1e-12);
}

}  // namespace
}  // namespace kiln::plan
