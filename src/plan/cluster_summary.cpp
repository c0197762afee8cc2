#include "plan/cluster_summary.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::plan {

ClusterSummary summarize_cluster(const ClusterSpec& c, const PowerInputs& p) {
  ClusterSummary s;
  const DeviceSpec& d = c.device;
  s.gpus = c.total_gpus();
  s.nodes = c.nodes;
  s.gpus_per_node = c.gpus_per_node;
  s.hbm_per_gpu_gib = d.memory_gib;
  s.hbm_total_tib = d.memory_gib * s.gpus / 1024;
  s.hbm_bw_per_gpu_gbs = d.mem_bw_gbs;
  if (d.peak_tflops_16 > 0)
    s.peaks.push_back(
        {d.bf16 ? "bf16/fp16" : "fp16", d.peak_tflops_16, d.peak_tflops_16 * s.gpus / 1e3});
  if (d.peak_tflops_32 > 0)
    s.peaks.push_back({"fp32", d.peak_tflops_32, d.peak_tflops_32 * s.gpus / 1e3});
  if (d.peak_tflops_8 > 0)
    s.peaks.push_back({"fp8", d.peak_tflops_8, d.peak_tflops_8 * s.gpus / 1e3});

  s.intra_link = c.intra_link;
  if (c.topology == Topology::torus) {
    // Every chip's ICI links, to chips of its own host and of others alike.
    const double links = 2.0 * d.torus_dims;
    s.intra_per_gpu_gbs = links * c.intra_link_gbs;
    s.intra_per_gpu_effective_gbs = links * c.intra_bw() / 1e9;
    s.intra_per_node_gbs = s.intra_per_gpu_gbs * c.gpus_per_node;
  } else if (c.gpus_per_node > 1) {
    s.intra_per_gpu_gbs = c.intra_link_gbs;
    s.intra_per_gpu_effective_gbs = c.intra_bw() / 1e9;
    s.intra_per_node_gbs = c.intra_link_gbs * c.gpus_per_node;
  }

  s.network = c.network;
  s.topology = topology_name(c.topology);
  s.nics_per_node = c.nics_per_node;
  s.nic_gbps = c.nic_gbps;
  const double node_gbs = c.nics_per_node * c.nic_gbps / 8;
  s.inter_per_node_gbs = node_gbs;
  s.inter_per_gpu_gbs = node_gbs / c.gpus_per_node;
  s.inter_per_gpu_effective_gbs = c.inter_bw_per_gpu() / 1e9;
  s.injection_total_gbs = node_gbs * c.nodes;
  // Bisection: half the nodes sending to the other half. A non-blocking fat-tree carries all of
  // their NICs; a spine-leaf or dragonfly network spanning more than one leaf or group carries
  // 1/r of it across (the leaf's uplinks, the tapered global links); a ring of nodes is cut
  // through two links of one node's bandwidth each.
  const int half = c.nodes / 2;
  const double full = half * node_gbs;
  if (c.topology == Topology::torus && c.slices > 1) {
    // Slices meet only over their hosts' data-centre NICs: a cut between halves of the slices.
    s.bisection_gbs = full;
    s.bisection_how = fmt::format("{} slices over the data-centre network: {} hosts × {:g} GB/s",
                                  c.slices, half, node_gbs);
  } else if (c.topology == Topology::torus) {
    // A cut across the longest axis of the slice: the links of one cross-section, twice over
    // when the axis wraps round.
    const TorusShape t = c.torus();
    const int axis = int(std::max_element(t.dim.begin(), t.dim.end()) - t.dim.begin());
    const int cut = (t.wrap[axis] ? 2 : 1) * (t.chips() / t.dim[axis]);
    s.bisection_gbs = t.chips() > 1 ? cut * c.intra_link_gbs : 0;
    s.bisection_how = t.chips() > 1 ? fmt::format(
                                          "ICI slice {}: a cut across its {}-chip axis "
                                          "crosses {} links of {:g} GB/s",
                                          t.name(), t.dim[axis], cut, c.intra_link_gbs)
                                    : "one chip";
  } else if (c.nodes < 2) {
    s.bisection_how = "one node: no network between nodes";
  } else if (c.topology == Topology::fat_tree) {
    s.bisection_gbs = full;
    s.bisection_how =
        fmt::format("non-blocking: {} node{} × {:g} GB/s", half, half == 1 ? "" : "s", node_gbs);
  } else if (c.topology == Topology::ring) {
    s.bisection_gbs = (c.nodes > 2 ? 2 : 1) * node_gbs;
    s.bisection_how = fmt::format("a ring of nodes: a cut crosses {} link{} of {:g} GB/s",
                                  c.nodes > 2 ? 2 : 1, c.nodes > 2 ? "s" : "", node_gbs);
  } else if (c.nodes <= c.nodes_per_domain || c.oversubscription == 1) {
    s.bisection_gbs = full;
    s.bisection_how = c.oversubscription == 1
                          ? fmt::format("not oversubscribed: {} node{} × {:g} GB/s", half,
                                        half == 1 ? "" : "s", node_gbs)
                          : fmt::format("within one {} ({} ≤ {} nodes): non-blocking",
                                        c.topology == Topology::spine_leaf ? "leaf" : "group",
                                        c.nodes, c.nodes_per_domain);
  } else {
    s.bisection_gbs = full / c.oversubscription;
    s.bisection_how =
        fmt::format("{} node{} × {:g} GB/s over {:g}:1 {}", half, half == 1 ? "" : "s", node_gbs,
                    c.oversubscription,
                    c.topology == Topology::spine_leaf ? "leaf uplinks" : "tapered global links");
  }

  s.pue = p.pue;
  s.gpu_w = p.gpu_w > 0 ? p.gpu_w : d.tdp_w;
  s.node_overhead_w = p.node_overhead_w >= 0 ? p.node_overhead_w : d.node_overhead_w;
  s.power_source = p.gpu_w > 0                ? "--gpu-power-w"
                   : c.device.power_cap_w > 0 ? "--power-cap-w"
                                              : "TDP";
  if (s.gpu_w > 0) {
    s.has_power = true;
    s.it_kw = (s.gpus * s.gpu_w + s.nodes * s.node_overhead_w) / 1000;
    s.facility_kw = s.it_kw * s.pue;
    s.energy_usd_per_hour = s.facility_kw * p.usd_per_kwh;
    s.co2_kg_per_hour = s.facility_kw * p.gco2_per_kwh / 1000;
    if (d.cpu) s.power_note = "the CPU's power is an estimate, not a measurement";
  } else {
    s.power_note = fmt::format(
        "no power figure: '{}' has no tdp_w in its description (give --gpu-power-w W)", d.name);
    if (p.usd_per_kwh > 0 || p.gco2_per_kwh > 0)
      s.power_note += "; electricity and CO2 per hour need one";
  }
  s.rent_usd_per_hour = s.gpus * p.usd_per_gpu_hour;
  s.source = d.source;
  return s;
}

}  // namespace kiln::plan
