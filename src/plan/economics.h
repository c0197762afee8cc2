// What a run costs by how its devices are paid for, and the power its cluster draws.
//
// Every option is priced on the run with failures (plan/goodput.h: checkpoints, interruptions
// and restarts included), since that is what is paid for:
//   - on demand (--usd-per-gpu-hour) and reserved (--reserved-usd-per-gpu-hour): a price per
//     device-hour times the device-hours;
//   - spot (--spot-usd-per-gpu-hour): a lower price, but the provider takes nodes back; a
//     reclaimed node stops the job like a failure, so pre-emptions join the failures in the
//     goodput model (the same checkpoint interval optimisation, a restart of
//     --spot-restart-minutes while capacity comes back), and the extra hours are paid too;
//   - owned (--capex-usd-per-gpu): the capital per device (the server's share, network,
//     installation) spread over --depreciation-years at --utilisation (the share of those years
//     that runs jobs), plus the electricity each device-hour draws (--usd-per-kwh).
// Power: the IT load (devices at --gpu-power-w or their TDP, plus each server's overhead), the
// facility's (× PUE) and what the facility adds on top (× (PUE − 1): cooling, power conversion,
// lighting), the cooling load to plan for.
#pragma once
#include <string>
#include <vector>

#include "plan/hardware.h"
#include "plan/job.h"
#include "plan/model_spec.h"
#include "plan/planner.h"

namespace kiln::plan {

struct PowerDraw {
  double it_kw = 0;        // devices and servers
  double facility_kw = 0;  // × PUE
  double overhead_kw = 0;  // facility − IT: cooling, conversion, lighting
};
PowerDraw power_draw(const ClusterSpec& c, const JobSpec& j);

struct CostOption {
  std::string name;  // "on demand", "reserved", "spot", "owned"
  double usd_per_gpu_hour = 0;
  double interruptions_per_gpu_hour = 0;  // failures, plus pre-emptions on spot
  double days = 0, gpu_hours = 0, usd = 0, goodput = 0;
  bool stalled = false;  // under kMinGoodput: no finite days, hours or cost
};

// The options the job prices (none without prices). Owned hardware's price per device-hour:
// capex / (years × 8766 h × utilisation) + the device's share of the IT power × PUE × $/kWh.
std::vector<CostOption> cost_options(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                     const Estimate& e);

// Electricity for the run's failure-free energy (e.energy_kwh) at the job's $/kWh; 0 without one.
double electricity_usd(const JobSpec& j, const Estimate& e);

}  // namespace kiln::plan
