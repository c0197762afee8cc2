#include "plan/economics.h"

#include "plan/goodput.h"

namespace kiln::plan {

namespace {

constexpr double kHoursPerYear = 8766;  // 365.25 days

}  // namespace

PowerDraw power_draw(const ClusterSpec& c, const JobSpec& j) {
  const double gpu_w = j.gpu_power_w > 0 ? j.gpu_power_w : c.device.tdp_w;
  const double node_w = j.node_overhead_w >= 0 ? j.node_overhead_w : c.device.node_overhead_w;
  PowerDraw p;
  p.it_kw = (c.total_gpus() * gpu_w + c.nodes * node_w) / 1000;
  p.facility_kw = p.it_kw * j.pue;
  p.overhead_kw = p.facility_kw - p.it_kw;
  return p;
}

double electricity_usd(const JobSpec& j, const Estimate& e) {
  return e.energy_kwh * j.usd_per_kwh;
}

std::vector<CostOption> cost_options(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                     const Estimate& e) {
  std::vector<CostOption> out;
  const int N = c.total_gpus();
  const RunGoodput base = run_goodput(m, c, j, e, /*refuse_stalled=*/false);
  auto option = [&](const char* name, double price, const Goodput& g, double rate) {
    CostOption o;
    o.name = name;
    o.usd_per_gpu_hour = price;
    o.interruptions_per_gpu_hour = rate;
    o.days = g.wall_hours / 24;
    o.gpu_hours = g.wall_hours * N;
    o.usd = o.gpu_hours * price;
    o.goodput = g.goodput;
    o.stalled = g.stalled();
    out.push_back(o);
  };
  if (j.usd_per_gpu_hour > 0)
    option("on demand", j.usd_per_gpu_hour, base.g, j.failures_per_gpu_hour);
  if (j.reserved_usd_per_gpu_hour > 0)
    option("reserved", j.reserved_usd_per_gpu_hour, base.g, j.failures_per_gpu_hour);
  if (j.spot_usd_per_gpu_hour > 0) {
    // A node reclaimed F times a month (730 hours) stops the job like a failure of one of its
    // devices: F / 730 per node-hour, spread over its devices.
    const double preemptions = j.spot_monthly_interruption / 730.0 / c.gpus_per_node;
    GoodputInputs in;
    in.solve_hours = e.days * 24;
    in.devices = N;
    in.failures_per_gpu_hour = j.failures_per_gpu_hour + preemptions;
    in.checkpoint_seconds = base.checkpoint_seconds;
    // Failures and pre-emptions restart in proportion to their rates.
    const double spot_restart =
        j.spot_restart_minutes >= 0 ? j.spot_restart_minutes : j.restart_minutes;
    in.restart_seconds =
        in.failures_per_gpu_hour > 0
            ? 60 * (j.failures_per_gpu_hour * j.restart_minutes + preemptions * spot_restart) /
                  in.failures_per_gpu_hour
            : 60 * j.restart_minutes;
    option("spot", j.spot_usd_per_gpu_hour, expected_goodput(in, /*refuse_stalled=*/false),
           in.failures_per_gpu_hour);
  }
  if (j.capex_usd_per_gpu > 0) {
    const PowerDraw p = power_draw(c, j);
    const double capital =
        j.capex_usd_per_gpu / (j.depreciation_years * kHoursPerYear * j.utilisation);
    const double energy = p.facility_kw / N * j.usd_per_kwh;  // per device-hour
    option("owned", capital + energy, base.g, j.failures_per_gpu_hour);
  }
  return out;
}

}  // namespace kiln::plan
