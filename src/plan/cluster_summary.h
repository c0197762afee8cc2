// What a cluster is, with no model: devices, memory, peak FLOP/s per precision, the links inside
// and between nodes, and power, from the same hardware description the planner uses
// (`kiln plan --gpu h100-sxm --nodes 16` with no --model).
#pragma once
#include <string>
#include <vector>

#include "plan/hardware.h"

namespace kiln::plan {

// Power of the cluster: each device's draw and the rest of each node, times the data centre's
// PUE. `gpu_w` 0 takes the device's TDP; `node_overhead_w` < 0 takes the catalog's figure.
struct PowerInputs {
  double gpu_w = 0;
  double node_overhead_w = -1;
  double pue = 1.2;
  // What an hour of the whole cluster costs, each where given (0: not asked): renting it, the
  // facility's electricity, and its emissions.
  double usd_per_gpu_hour = 0, usd_per_kwh = 0, gco2_per_kwh = 0;
};

struct PeakRate {
  std::string dtype;   // "bf16/fp16" ("fp16" without bf16), "fp32" or "fp8" (all dense)
  double per_gpu = 0;  // TFLOP/s
  double total = 0;    // PFLOP/s
};

// Rates in GB/s (1e9 bytes/s) per direction. "datasheet" is the link's rate; "effective" is what
// a collective's bus bandwidth reaches (datasheet × the link's efficiency), as the time model
// uses it.
struct ClusterSummary {
  int gpus = 0, nodes = 0, gpus_per_node = 0;
  // The capacity the planner fits into: what the driver reports (binary units;
  // plan/device_catalog.cpp).
  double hbm_per_gpu_gib = 0, hbm_total_tib = 0;
  double hbm_bw_per_gpu_gbs = 0;
  std::vector<PeakRate> peaks;  // only the precisions the device has a peak for
  // Inside a node: per device, and all devices of a node together.
  std::string intra_link;
  double intra_per_gpu_gbs = 0, intra_per_gpu_effective_gbs = 0, intra_per_node_gbs = 0;
  // Between nodes: a node's NICs, a device's share of them, every node's injection bandwidth
  // together, and the bisection (the least bandwidth across a cut into two equal halves) as
  // the topology model has it; `bisection_how` says how it was worked out.
  std::string network, topology;
  int nics_per_node = 0;
  double nic_gbps = 0;
  double inter_per_node_gbs = 0, inter_per_gpu_gbs = 0, inter_per_gpu_effective_gbs = 0;
  double injection_total_gbs = 0, bisection_gbs = 0;
  std::string bisection_how;
  // Power: none when the description has no device power (`power_note` says so).
  bool has_power = false;
  double gpu_w = 0, node_overhead_w = 0, it_kw = 0, pue = 0, facility_kw = 0;
  std::string power_source;  // "TDP (catalog)", "--gpu-power-w", ...
  std::string power_note;
  // One hour of the whole cluster, each 0 when its price or intensity was not given (or, for
  // electricity and CO2, when there is no power figure).
  double rent_usd_per_hour = 0, energy_usd_per_hour = 0, co2_kg_per_hour = 0;
  std::string source;  // the device's sources, from the catalog or the hardware file
};

ClusterSummary summarize_cluster(const ClusterSpec& c, const PowerInputs& p);

}  // namespace kiln::plan
