#include "plan/collectives.h"

#include <algorithm>
#include <cmath>

namespace kiln::plan {
namespace {

// NCCL's fixed cost of launching one collective (src/graph/tuning.cc, baseLat ring/Simple).
constexpr double kBaseLatency = 8.4e-6;

double bandwidth_term(double bytes, const GroupPath& g) {
  double inv = 0;
  if (g.per_node > 1) inv = std::max(inv, 1.0 / g.intra_bw);
  if (g.nodes > 1) inv = std::max(inv, 1.0 / (g.per_node * g.net_bw));
  return bytes * inv;
}

double step_latency(const GroupPath& g) {
  return g.nodes > 1 ? g.net_lat : g.intra_lat;
}

struct Placement {
  int size = 1, stride = 1;  // ranks in a group, rank distance between neighbours
};

Placement placement(const ClusterSpec& c, const Layout& l, Dim dim) {
  const bool dp_inner = c.order == RankOrder::tp_dp_pp;
  switch (dim) {
    case Dim::tp:
      return {l.tp, 1};
    case Dim::dp:
      return {l.dp, dp_inner ? l.tp : l.tp * l.pp};
    case Dim::pp:
      return {l.pp, dp_inner ? l.tp * l.dp : l.tp};
  }
  return {};
}

double domain_factor(const ClusterSpec& c) {
  return c.topology == Topology::dragonfly ? 2.0 * c.oversubscription : c.oversubscription;
}

}  // namespace

double all_reduce_s(double bytes, const GroupPath& g) {
  const int n = g.size;
  if (n <= 1 || bytes <= 0) return 0;
  const double w = bandwidth_term(bytes, g);
  double ring = kBaseLatency + 2.0 * (n - 1) * step_latency(g) + 2.0 * (n - 1) / n * w;
  if (g.nodes <= 1) return ring;
  double tree =
      kBaseLatency +
      2.0 * (std::ceil(std::log2(double(g.nodes))) * g.net_lat + (g.per_node - 1) * g.intra_lat) +
      2.0 * w;
  return std::min(ring, tree);
}

double reduce_scatter_s(double bytes, const GroupPath& g) {
  const int n = g.size;
  if (n <= 1 || bytes <= 0) return 0;
  return kBaseLatency + (n - 1) * step_latency(g) + double(n - 1) / n * bandwidth_term(bytes, g);
}

double all_gather_s(double bytes, const GroupPath& g) {
  return reduce_scatter_s(bytes, g);
}

GroupPath group_path(const ClusterSpec& c, const Layout& l, Dim dim) {
  const Placement p = placement(c, l, dim);
  const int gpn = c.gpus_per_node;
  GroupPath g;
  g.size = p.size;
  g.intra_bw = c.intra_bw();
  g.intra_lat = c.intra_latency();
  g.net_bw = c.inter_bw_per_gpu();
  g.net_lat = c.inter_latency();
  int node_stride = 1;
  if (p.size <= 1) {
    g.per_node = 1;
    g.nodes = 1;
  } else if (p.stride >= gpn) {
    g.per_node = 1;
    g.nodes = p.size;
    node_stride = p.stride / gpn;
  } else {
    g.per_node = std::min(p.size, std::max(1, gpn / p.stride));
    g.nodes = (p.size + g.per_node - 1) / g.per_node;
  }
  if (g.nodes > 1) {
    const int span = (g.nodes - 1) * node_stride + 1;  // nodes from the first member to the last
    switch (c.topology) {
      case Topology::fat_tree:
        break;
      case Topology::spine_leaf:
      case Topology::dragonfly:
        if (span > c.nodes_per_domain) {
          const int in_domain = std::max(1, std::min(g.nodes, c.nodes_per_domain / node_stride));
          g.slowdown = std::max(1.0, domain_factor(c) / in_domain);
        }
        break;
      case Topology::ring:
        g.slowdown = node_stride;
        break;
    }
  }
  g.net_bw /= g.slowdown;
  return g;
}

double p2p_s(double bytes, const ClusterSpec& c, const Layout& l) {
  if (l.pp <= 1 || bytes <= 0) return 0;
  const Placement p = placement(c, l, Dim::pp);
  const int gpn = c.gpus_per_node;
  if (p.stride < gpn && gpn % p.stride == 0 && p.stride * l.pp <= gpn)
    return c.intra_latency() + bytes / c.intra_bw();  // every stage of a pipeline in one node
  const double node_stride = std::max(1.0, double(p.stride) / gpn);
  double slowdown = 1;
  switch (c.topology) {
    case Topology::fat_tree:
      break;
    case Topology::spine_leaf:
    case Topology::dragonfly:
      slowdown = std::max(1.0, domain_factor(c) * std::min(1.0, node_stride / c.nodes_per_domain));
      break;
    case Topology::ring:
      slowdown = node_stride;
      break;
  }
  return c.inter_latency() + bytes / (c.inter_bw_per_gpu() / slowdown);
}

}  // namespace kiln::plan
