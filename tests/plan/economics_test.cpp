// The ways to pay for a run and the cluster's power (plan/economics.h): each option's arithmetic
// from its definition, spot's pre-emptions through the goodput model, and the report's lines.
#include "plan/economics.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/goodput.h"
#include "plan/report.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

struct PricedRun {
  Preset p = find_preset("llama2-7b");
  ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = p.job();
  Estimate e;
  PricedRun() { e = search(p.model, c, j).fitting.front(); }
  std::vector<CostOption> options() const { return cost_options(p.model, c, j, e); }
};

TEST(PlanEconomics, PowerIsTheDevicesAndServersTimesPue) {
  PricedRun r;
  r.j.gpu_power_w = 600;
  r.j.node_overhead_w = 2000;
  r.j.pue = 1.25;
  const PowerDraw p = power_draw(r.c, r.j);
  EXPECT_DOUBLE_EQ(p.it_kw, (32 * 600 + 4 * 2000) / 1000.0);
  EXPECT_DOUBLE_EQ(p.facility_kw, p.it_kw * 1.25);
  EXPECT_NEAR(p.overhead_kw, p.it_kw * 0.25, 1e-9);
  // Electricity: the run's energy (which already holds the PUE) at the price.
  r.j.usd_per_kwh = 0.12;
  EXPECT_DOUBLE_EQ(electricity_usd(r.j, r.e), r.e.energy_kwh * 0.12);
}

TEST(PlanEconomics, OnDemandAndReservedPayTheRunWithFailures) {
  PricedRun r;
  EXPECT_TRUE(r.options().empty());  // nothing priced, nothing shown
  r.j.usd_per_gpu_hour = 3;
  r.j.reserved_usd_per_gpu_hour = 2;
  const auto o = r.options();
  ASSERT_EQ(o.size(), 2u);
  const RunGoodput g = run_goodput(r.p.model, r.c, r.j, r.e);
  EXPECT_EQ(o[0].name, "on demand");
  EXPECT_DOUBLE_EQ(o[0].gpu_hours, g.g.wall_hours * 32);
  EXPECT_DOUBLE_EQ(o[0].usd, o[0].gpu_hours * 3);
  EXPECT_GT(o[0].gpu_hours, r.e.gpu_hours);  // failures cost hours
  EXPECT_EQ(o[1].name, "reserved");
  EXPECT_DOUBLE_EQ(o[1].usd, o[0].gpu_hours * 2);
}

TEST(PlanEconomics, SpotPreemptionsJoinTheFailures) {
  PricedRun r;
  r.j.usd_per_gpu_hour = 3;
  r.j.spot_usd_per_gpu_hour = 1;
  r.j.spot_monthly_interruption = 0;  // never reclaimed: the on-demand run at a lower price
  auto o = r.options();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_NEAR(o[1].gpu_hours, o[0].gpu_hours, 1e-6 * o[0].gpu_hours);
  // Each node reclaimed 30% of months, an hour to get capacity back: more interruptions (the
  // rate per device-hour grows by 0.3 / 730 / 8), more hours, less goodput.
  r.j.spot_monthly_interruption = 0.3;
  r.j.spot_restart_minutes = 60;
  o = r.options();
  EXPECT_NEAR(o[1].interruptions_per_gpu_hour, r.j.failures_per_gpu_hour + 0.3 / 730 / 8, 1e-15);
  EXPECT_GT(o[1].gpu_hours, o[0].gpu_hours);
  EXPECT_LT(o[1].goodput, o[0].goodput);
  // The same as the goodput model with that rate and the rate-weighted restart.
  GoodputInputs in;
  in.solve_hours = r.e.days * 24;
  in.devices = 32;
  in.failures_per_gpu_hour = o[1].interruptions_per_gpu_hour;
  in.checkpoint_seconds = run_goodput(r.p.model, r.c, r.j, r.e).checkpoint_seconds;
  const double pre = 0.3 / 730 / 8;
  in.restart_seconds =
      60 * (r.j.failures_per_gpu_hour * 10 + pre * 60) / (r.j.failures_per_gpu_hour + pre);
  EXPECT_NEAR(o[1].gpu_hours, expected_goodput(in).wall_hours * 32, 1e-6);
  EXPECT_FALSE(o[1].stalled);
  // Reclaimed far faster than an hour's restart: the spot run never finishes. Its row says so
  // (stalled, no finite hours or cost) and the on-demand row stands.
  r.j.spot_monthly_interruption = 1000;
  o = r.options();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_FALSE(o[0].stalled);
  EXPECT_TRUE(o[1].stalled);
  EXPECT_LT(o[1].goodput, kMinGoodput);
}

TEST(PlanEconomics, OwnedHardwareSpreadsItsCapitalAndPaysItsElectricity) {
  PricedRun r;
  r.j.capex_usd_per_gpu = 35000;
  r.j.depreciation_years = 4;
  r.j.utilisation = 0.5;
  r.j.usd_per_kwh = 0.08;
  const auto o = r.options();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].name, "owned");
  const double capital = 35000 / (4 * 8766 * 0.5);
  const double energy = power_draw(r.c, r.j).facility_kw / 32 * 0.08;
  EXPECT_NEAR(o[0].usd_per_gpu_hour, capital + energy, 1e-12);
  EXPECT_NEAR(o[0].usd, o[0].gpu_hours * (capital + energy), 1e-6);
}

TEST(PlanEconomics, TheReportShowsPowerAndEveryPricedOptionAndRefusesBadPrices) {
  auto r = kiln::testing::run_kiln(
      "plan --model llama2-7b --gpu h100-sxm --nodes 4 --usd-per-gpu-hour 3 "
      "--spot-usd-per-gpu-hour 1.2 --capex-usd-per-gpu 30000 --usd-per-kwh 0.1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto& best = j.at("best").at(0);
  EXPECT_GT(best.at("power_kw").at("facility").get<double>(),
            best.at("power_kw").at("it").get<double>());
  ASSERT_EQ(best.at("cost_options").size(), 3u);
  EXPECT_EQ(best.at("cost_options")[1].at("name"), "spot");
  r = kiln::testing::run_kiln("plan --model llama2-7b --gpu h100-sxm --nodes 4 --usd-per-kwh 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cooling and conversion, kW"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("electricity at $0.1/kWh"), std::string::npos) << r.output;
  for (const std::string bad : {"--utilisation 0", "--utilisation 1.5", "--depreciation-years 0",
                                "--spot-usd-per-gpu-hour -1", "--capex-usd-per-gpu 30000"}) {
    r = kiln::testing::run_kiln("plan --model llama2-7b --gpu h100-sxm --nodes 4 " + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.output.find(bad.substr(0, bad.find(' '))), std::string::npos) << bad << "\n"
                                                                              << r.output;
  }
}

}  // namespace
}  // namespace kiln::plan
