#include "plan/collectives.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"

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

// A ring reduce-scatter / all-gather (one pass) or all-reduce (two): NCCL's launch, the steps in
// sequence and the bytes, or on a torus the hops of each pass and the bytes over its axes.
double ring_s(double bytes, const GroupPath& g, CollOp op) {
  const int n = g.size;
  const CollAlgorithm R = CollAlgorithm::ring;
  const double moved = max_bytes_sent(R, op, n, bandwidth_term(bytes, g));
  if (g.torus) {
    // Each pass: the hops round the slice's axes, then a step over the network per slice.
    const double pass = g.hops * g.intra_lat + (g.nodes > 1 ? (g.nodes - 1) * g.net_lat : 0.0);
    return (op == CollOp::all_reduce ? 2 : 1) * pass + moved;
  }
  return kBaseLatency + sync_steps(R, op, n) * step_latency(g) + moved;
}

// Ranks in a group and the rank distance between neighbours; a group of two dimensions (dp × cp)
// has an outer level of `size2` blocks `stride2` apart.
struct Placement {
  int size = 1, stride = 1;
  int size2 = 1, stride2 = 0;
};

// Context parallelism sits next to tp (Megatron-LM: tp, cp, dp, pp; Llama 3: tp, cp, pp, dp).
Placement placement(const ClusterSpec& c, const Layout& l, Dim dim) {
  const bool dp_inner = c.order == RankOrder::tp_dp_pp;
  const int tc = l.tp * l.cp;
  switch (dim) {
    case Dim::tp:
      return {l.tp, 1};
    case Dim::cp:
      return {l.cp, l.tp};
    case Dim::dp:
      if (l.cp > 1) return {l.cp, l.tp, l.dp, dp_inner ? tc : tc * l.pp};
      return {l.dp, dp_inner ? l.tp : l.tp * l.pp};
    case Dim::pp:
      return {l.pp, dp_inner ? tc * l.dp : tc};
    case Dim::shard:
    case Dim::replica: {
      const Placement all = placement(c, l, Dim::dp);
      const int z = l.zero_group();
      if (z == l.dp_cp()) return dim == Dim::shard ? all : Placement{};
      const int dp_stride = dp_inner ? tc : tc * l.pp;
      const int dp_in_shard = l.cp > 1 ? z / l.cp : z;  // shard is a multiple of cp
      if (dim == Dim::replica) return {l.replicas(), dp_stride * dp_in_shard};
      if (l.cp > 1) return {l.cp, l.tp, dp_in_shard, dp_stride};
      return {z, dp_stride};
    }
  }
  return {};
}

double domain_factor(const ClusterSpec& c) {
  return c.topology == Topology::dragonfly ? 2.0 * c.oversubscription : c.oversubscription;
}

}  // namespace

CollAlgorithm parse_coll_algorithm(const std::string& name) {
  if (name == "one_shot") return CollAlgorithm::one_shot;
  if (name == "direct") return CollAlgorithm::direct;
  if (name == "ring") return CollAlgorithm::ring;
  if (name == "halving_doubling") return CollAlgorithm::halving_doubling;
  fail("unknown collective algorithm '{}': expected one_shot, direct, ring or halving_doubling",
       name);
}

namespace {

// Halving-doubling: P2 = the largest power of two <= P; rank b < P2 "holds" slice q when q mod
// P2 agrees with b on the bits handled so far. Slices of the classes that agree with `who` on
// `mask`, counted.
int held_slices(int P, int P2, int who, int mask) {
  int k = 0;
  for (int q = 0; q < P; q++) k += ((q % P2) & mask) == (who & mask);
  return k;
}

}  // namespace

double bytes_sent(CollAlgorithm a, CollOp op, int P, int rank, double S) {
  if (P <= 1) return 0;
  const double slice = S / P;
  const bool ar = op == CollOp::all_reduce;
  switch (a) {
    case CollAlgorithm::one_shot:  // all-reduce: stage the whole buffer; reduce-scatter: direct
      if (ar) return S;
      [[fallthrough]];
    case CollAlgorithm::direct:  // stage the others' slices (+ one's own sum for the all-gather)
      return (P - 1) * slice + (ar ? slice : 0);
    case CollAlgorithm::ring:  // P-1 partial sums, then P-1 finished slices passed on
      return (P - 1) * slice * (ar ? 2 : 1);
    case CollAlgorithm::halving_doubling: {
      int P2 = 1;
      while (P2 * 2 <= P) P2 *= 2;
      if (rank >= P2) return S;  // an extra rank hands its whole buffer over, sends nothing else
      double sent = 0;
      int mask = 0;
      for (int d = 1; d < P2; d *= 2) {  // halving: the slices the partner keeps
        sent += held_slices(P, P2, rank ^ d, mask | d) * slice;
        mask |= d;
      }
      if (ar)
        for (int d = P2 / 2; d >= 1; d /= 2) {  // doubling: the slices held
          sent += held_slices(P, P2, rank, mask) * slice;
          mask &= ~d;
        }
      if (rank + P2 < P) sent += ar ? S : slice;  // the result for the extra rank
      return sent;
    }
  }
  return 0;
}

double max_bytes_sent(CollAlgorithm a, CollOp op, int P, double S) {
  double m = 0;
  for (int r = 0; r < P; r++) m = std::max(m, bytes_sent(a, op, P, r, S));
  return m;
}

int sync_steps(CollAlgorithm a, CollOp op, int P) {
  if (P <= 1) return 0;
  const bool ar = op == CollOp::all_reduce;
  switch (a) {
    case CollAlgorithm::one_shot:
      return 1;
    case CollAlgorithm::direct:
      return ar ? 2 : 1;
    case CollAlgorithm::ring:
      return (P - 1) * (ar ? 2 : 1);
    case CollAlgorithm::halving_doubling: {
      int levels = 0, P2 = 1;
      while (P2 * 2 <= P) P2 *= 2, levels++;
      return levels * (ar ? 2 : 1) + (P != P2 ? 2 : 0);
    }
  }
  return 0;
}

// The GPU model's ring is the ring above; its bytes go over the slowest link of the path.
double all_reduce_s(double bytes, const GroupPath& g) {
  const int n = g.size;
  if (n <= 1 || bytes <= 0) return 0;
  const double w = bandwidth_term(bytes, g);
  const double ring = ring_s(bytes, g, CollOp::all_reduce);
  if (g.nodes <= 1 || g.torus) return ring;
  double tree =
      kBaseLatency +
      2.0 * (std::ceil(std::log2(double(g.nodes))) * g.net_lat + (g.per_node - 1) * g.intra_lat) +
      2.0 * w;
  return std::min(ring, tree);
}

double reduce_scatter_s(double bytes, const GroupPath& g) {
  if (g.size <= 1 || bytes <= 0) return 0;
  return ring_s(bytes, g, CollOp::reduce_scatter);
}

double all_gather_s(double bytes, const GroupPath& g) {
  return reduce_scatter_s(bytes, g);
}

GroupPath group_path(const ClusterSpec& c, const Layout& l, Dim dim) {
  const Placement p = placement(c, l, dim);
  const int gpn = c.gpus_per_node;
  GroupPath g;
  g.size = p.size * p.size2;
  if (c.topology == Topology::torus) {
    // The group holding rank 0; every group of the dimension is a shifted copy of it. Ranks fill
    // one slice after another: the members in rank 0's slice ring over the torus links, and a
    // group spanning slices is two levels, as nodes on NICs are, the slices' hosts sending over
    // the data-centre network.
    const TorusShape shape = c.torus();
    const int per_slice = shape.chips();
    std::map<int, std::vector<int>> by_slice;
    for (int i = 0; i < p.size2; i++)
      for (int k = 0; k < p.size; k++) {
        const int r = i * p.stride2 + k * p.stride;
        by_slice[r / per_slice].push_back(r % per_slice);
      }
    g.torus = true;
    g.nodes = int(by_slice.size());
    g.per_node = 0;
    for (const auto& [slice, members] : by_slice)
      g.per_node = std::max(g.per_node, int(members.size()));
    const TorusPath t = torus_group(shape, by_slice.begin()->second);
    g.intra_bw = t.links * c.intra_bw();
    g.intra_lat = c.intra_latency();
    g.hops = t.hops;
    if (g.nodes > 1) {
      g.net_bw = c.inter_bw_per_gpu();
      g.net_lat = c.inter_latency();
    }
    return g;
  }
  g.intra_bw = c.intra_bw();
  g.intra_lat = c.intra_latency();
  g.net_bw = c.inter_bw_per_gpu();
  g.net_lat = c.inter_latency();
  int node_stride = 1;
  if (p.size2 > 1) {
    // Two levels: count the nodes the group's members sit on and the most on one node.
    std::map<int, int> on_node;
    for (int i = 0; i < p.size2; i++)
      for (int k = 0; k < p.size; k++) on_node[(i * p.stride2 + k * p.stride) / gpn]++;
    g.nodes = int(on_node.size());
    g.per_node = 0;
    for (const auto& [node, count] : on_node) g.per_node = std::max(g.per_node, count);
    const int span = on_node.rbegin()->first - on_node.begin()->first + 1;
    node_stride = g.nodes > 1 ? std::max(1, (span - 1) / (g.nodes - 1)) : 1;
  } else if (p.size <= 1) {
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
  g.intra_bw = c.intra_bw_among(g.per_node);
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
      case Topology::torus:  // handled above
        break;
    }
  }
  g.net_bw /= g.slowdown;
  return g;
}

double p2p_s(double bytes, const ClusterSpec& c, const Layout& l) {
  if (l.pp <= 1 || bytes <= 0) return 0;
  const Placement p = placement(c, l, Dim::pp);
  if (c.topology == Topology::torus) {
    const TorusShape shape = c.torus();
    // A pipeline reaching past its slice: its sends between slices take the hosts' network.
    if (int64_t(p.stride) * l.pp > shape.chips())
      return c.inter_latency() + bytes / c.inter_bw_per_gpu();
    const TorusPath t = torus_send(shape, 0, p.stride);
    return t.hops * c.intra_latency() + bytes / (t.links * c.intra_bw());
  }
  const int gpn = c.gpus_per_node;
  if (p.stride < gpn && gpn % p.stride == 0 && p.stride * l.pp <= gpn)
    return c.intra_latency() + bytes / c.intra_bw_among(2);  // every stage in one node
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
    case Topology::torus:  // handled above
      break;
  }
  return c.inter_latency() + bytes / (c.inter_bw_per_gpu() / slowdown);
}

}  // namespace kiln::plan
