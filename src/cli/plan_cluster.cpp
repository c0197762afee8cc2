// The cluster `kiln plan`'s flags describe (src/cli/plan_opts.h), and its summary when no model
// is given.
#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "cli/plan_opts.h"
#include "core/closest_name.h"
#include "core/error.h"
#include "plan/cluster_summary.h"
#include "plan/report.h"

namespace kiln::cli {

using namespace kiln::plan;

namespace {

// --gpus N as whole nodes of the cluster's server; with --nodes as well, the two must agree.
int nodes_for_gpus(const PlanOpts& o, const Given& g, const ClusterSpec& c) {
  const int per = c.gpus_per_node;
  if (o.gpus < 1) fail("--gpus (devices in the cluster) must be at least 1, got {}", o.gpus);
  if (per < 1) fail("--gpus-per-node must be at least 1, got {}", per);
  if (g.nodes->count() && int64_t(o.nodes) * per != o.gpus)
    fail(
        "--gpus {} and --nodes {} disagree: {} nodes of {} devices are {} devices; give one of "
        "them (or --gpus-per-node {} if the nodes are that size)",
        o.gpus, o.nodes, o.nodes, per, int64_t(o.nodes) * per,
        o.nodes > 0 && o.gpus % o.nodes == 0 ? std::to_string(o.gpus / o.nodes) : "N");
  if (o.gpus % per != 0) {
    const int below = o.gpus / per, above = below + 1;
    std::string whole =
        below > 0 ? fmt::format("--gpus {} ({} node{}) or --gpus {} ({} nodes)", below * per, below,
                                below == 1 ? "" : "s", above * per, above)
                  : fmt::format("--gpus {} (1 node)", per);
    fail(
        "--gpus {} is not a whole number of {}-device nodes of {}: the planner lays out whole "
        "nodes; use {}, or --gpus-per-node to describe smaller nodes (--gpus-per-node {} "
        "--gpus {} is {} node{})",
        o.gpus, per, c.device.name, whole, std::gcd(o.gpus, per), o.gpus,
        o.gpus / std::gcd(o.gpus, per), o.gpus / std::gcd(o.gpus, per) == 1 ? "" : "s");
  }
  return o.gpus / per;
}

}  // namespace

ClusterSpec cluster_from(const PlanOpts& o, const Given& g) {
  if (!o.gpu.empty() && !o.hardware.empty())
    fail(
        "give --gpu or --hardware, not both (a hardware file can start from a catalog GPU with "
        "base = \"{}\")",
        o.gpu);
  ClusterSpec c;
  if (!o.hardware.empty()) {
    c = load_hardware_file(o.hardware).cluster;
  } else if (!o.gpu.empty()) {
    c = default_cluster(find_device(o.gpu), 1);
  } else {
    std::vector<std::string> names;
    for (const auto& d : device_catalog()) names.push_back(d.name);
    fail(
        "which hardware? give --gpu NAME (one of: {}) or --hardware FILE (e.g. "
        "configs/hardware/this-cpu.toml, written by `kiln plan --calibrate`)",
        join_names(names));
  }
  if (g.nodes->count()) c.nodes = o.nodes;
  if (g.gpus_per_node->count()) c.gpus_per_node = o.gpus_per_node;
  if (g.gpus->count()) c.nodes = nodes_for_gpus(o, g, c);
  if (g.intra_link->count()) {
    c.intra_link = o.intra_link;
    c.intra_link_gbs = find_link(o.intra_link, false).default_bw;
  }
  if (g.intra_link_gbs->count()) c.intra_link_gbs = o.intra_link_gbs;
  if (g.network->count()) {
    c.network = o.network;
    c.nic_gbps = find_link(o.network, true).default_bw;
  }
  if (g.nics_per_node->count()) c.nics_per_node = o.nics_per_node;
  if (g.nic_gbps->count()) c.nic_gbps = o.nic_gbps;
  if (g.topology->count()) c.topology = parse_topology(o.topology);
  if (g.oversubscription->count()) c.oversubscription = o.oversubscription;
  if (g.nodes_per_domain->count()) c.nodes_per_domain = o.nodes_per_domain;
  if (g.rank_order->count()) c.order = parse_rank_order(o.rank_order);
  if (g.slices->count()) c.slices = o.slices;
  if (g.power_cap->count()) c.device = with_power_cap(c.device, o.power_cap_w);
  // --days chooses the size: check the rest of the description on the smallest cluster of its
  // slices (a host of chips each), not on the one host the size defaults to.
  if (g.days->count() && c.topology == Topology::torus && c.slices > 1 && !g.nodes->count() &&
      !g.gpus->count())
    c.nodes = c.slices;
  c.validate();
  return c;
}

void check_power_under_cap(const PlanOpts& o, const ClusterSpec& c) {
  if (c.device.power_cap_w > 0 && o.gpu_power_w > c.device.power_cap_w)
    fail(
        "--gpu-power-w {:g} is above --power-cap-w {:g}: a device draws at most its limit; give "
        "the average draw under the limit, or leave --gpu-power-w out to charge the limit",
        o.gpu_power_w, c.device.power_cap_w);
}

void summarize(const PlanOpts& o, const Given& g) {
  if (!o.sets.empty()) fail("--set changes a --config; there is none");
  // Every other flag given must be one the summary uses: the Hardware group's, power and prices.
  // The rest plan a model, or go with --calibrate.
  std::set<std::string> cluster_flags(o.hardware_flags.begin(), o.hardware_flags.end());
  cluster_flags.insert({"--gpu-power-w", "--node-overhead-w", "--pue", "--usd-per-gpu-hour",
                        "--usd-per-kwh", "--gco2-per-kwh", "--json"});
  static const std::set<std::string> calibrate_flags = {"--output", "--seconds", "--rounds",
                                                        "--threads"};
  std::vector<std::string> model_flags, calibration;
  for (const std::string& f : o.given) {
    if (calibrate_flags.count(f))
      calibration.push_back(f);
    else if (!cluster_flags.count(f))
      model_flags.push_back(f);
  }
  if (!calibration.empty())
    fail("{} {} with --calibrate (it measures this machine); without it they do nothing",
         join_names(calibration), calibration.size() == 1 ? "goes" : "go");
  if (!model_flags.empty())
    fail(
        "{} {} a model: give --model NAME (see --list-models) or --config FILE; without one, "
        "kiln plan describes the cluster (its hardware, power, and with --usd-per-gpu-hour, "
        "--usd-per-kwh or --gco2-per-kwh what an hour of it costs)",
        join_names(model_flags), model_flags.size() == 1 ? "plans" : "plan");
  if (!std::isfinite(o.gpu_power_w) || o.gpu_power_w < 0)
    fail("--gpu-power-w must be a finite power in W, at least 0, got {}", o.gpu_power_w);
  if (!std::isfinite(o.node_overhead_w))
    fail("--node-overhead-w must be a finite power in W, got {}", o.node_overhead_w);
  if (!std::isfinite(o.pue) || o.pue < 1)
    fail("--pue is total facility power over IT power, at least 1 (got {})", o.pue);
  for (auto [v, flag] : {std::pair{o.usd, "--usd-per-gpu-hour"},
                         {o.prices.usd_per_kwh, "--usd-per-kwh"},
                         {o.gco2, "--gco2-per-kwh"}})
    if (v < 0) fail("{} must not be negative, got {:g}", flag, v);
  const ClusterSpec c = cluster_from(o, g);
  check_power_under_cap(o, c);
  const ClusterSummary s = summarize_cluster(
      c, PowerInputs{o.gpu_power_w, o.node_overhead_w, o.pue, o.usd, o.prices.usd_per_kwh,
                     o.flag_given("--gco2-per-kwh") ? o.gco2 : 0});
  if (o.json)
    fmt::print("{}\n", cluster_summary_json(c, s).dump(2));
  else
    fmt::print("{}", cluster_summary_text(c, s));
}

}  // namespace kiln::cli
