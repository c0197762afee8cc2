// The cost of collectives on a cluster: latency + bytes / bandwidth, for ring and tree
// algorithms, with groups that span nodes and switches.
//
// A group of n ranks with k members per node on N = n/k nodes. Rings are laid as NCCL lays them:
// k rings in parallel, each leaving the node through a different NIC, so the bandwidth term is
// set by the slower of the node's link (all of a rank's traffic) and its share of the NICs
// (1/k of the traffic per NIC):
//
//   W(S)            = S · max(1/B_intra [k > 1], 1/(k·B_net) [N > 1])
//   all-reduce ring = base + 2(n−1)·α + 2(n−1)/n · W(S)
//   all-reduce tree = base + 2(⌈log2 N⌉·α_net + (k−1)·α_intra) + 2·W(S)     (N > 1 only)
//   reduce-scatter, all-gather (ring) = base + (n−1)·α + (n−1)/n · W(S)
//   send/recv       = α + S / B
//
// S is the full buffer per rank (before a reduce-scatter, after an all-gather); α is the step
// latency of the slowest link on the path; base is NCCL's fixed cost per collective (8.4 µs).
// B_net is already divided by the topology's slowdown for the group (see group_path()).
//
// The bytes and steps of each algorithm are one formula set (docs/collectives.md, "Algorithms,
// steps and bytes"), shared by this cost model (its ring) and by kiln's shared-memory engine,
// whose byte counter a test checks against them.
#pragma once
#include <string>

#include "plan/hardware.h"
#include "plan/layout.h"

namespace kiln::plan {

// The algorithms of docs/collectives.md (the engine's comm.algorithm values) and the two
// reducing operations they implement.
enum class CollAlgorithm { one_shot, direct, ring, halving_doubling };
enum class CollOp { all_reduce, reduce_scatter };
CollAlgorithm parse_coll_algorithm(const std::string& name);  // "ring", ...; fails otherwise

// Bytes rank `rank` of P sends its peers (writes into shared memory, or puts on a link) for the
// op on a buffer of S bytes per rank (the whole buffer; slices S/P), counted in the buffer's
// element type; whole rounds, even slices.
double bytes_sent(CollAlgorithm a, CollOp op, int P, int rank, double S);
// The most any rank sends: what sets the bandwidth term.
double max_bytes_sent(CollAlgorithm a, CollOp op, int P, double S);
// Hand-offs in sequence (each waits for a peer's data) per round of the algorithm.
int sync_steps(CollAlgorithm a, CollOp op, int P);

struct GroupPath {
  int size = 1;                        // n
  int per_node = 1;                    // k
  int nodes = 1;                       // N
  double intra_bw = 0, intra_lat = 0;  // bytes/s per rank and direction; seconds per step
  double net_bw = 0, net_lat = 0;      // per rank share of the NICs, after topology slowdown
  double slowdown = 1;                 // the topology's factor already applied to net_bw
  // A torus slice (plan/torus.h): intra_bw is the chip's share of the axes the group spans,
  // intra_lat one hop, and a ring pass takes `hops` hops; no launch cost (XLA runs the step as
  // one program). A group over several slices has `nodes` slices of `per_node` members, and
  // net_bw is a chip's share of its host's data-centre NICs.
  bool torus = false;
  int hops = 0;
};

double all_reduce_s(double bytes, const GroupPath& g);
double reduce_scatter_s(double bytes, const GroupPath& g);
double all_gather_s(double bytes, const GroupPath& g);

// Which parallel dimension a group belongs to: dp is the group gradients are reduced over and
// ZeRO shards over, the dp × cp ranks holding the same weights; with hybrid sharding (shard=)
// ZeRO shards over `shard` of them (the innermost) and each shard's gradients are all-reduced
// across the `replica` group, the ranks holding the same shard.
enum class Dim { tp, cp, pp, dp, shard, replica };

// How the groups of one dimension lie on the cluster for `l` (placing ranks in the cluster's
// rank order), with the slowdown the topology puts on their traffic between nodes:
//   fat-tree   none (non-blocking)
//   spine-leaf r / (nodes of one ring under a leaf) for rings that leave a leaf; for pipeline
//              sends, r · (fraction of nodes whose partner is under another leaf)
//   dragonfly  as spine-leaf with 2r: traffic between groups takes Valiant (non-minimal) routes
//              over two global links
//   ring       the node stride: every hop of a group crosses that many physical links, and
//              that many groups share each link
//   torus      the links of the torus axes the group spans (plan/torus.h); nodes are hosts
//              and play no part
// (factors below 1 are 1). Derivation in docs/planner.md.
GroupPath group_path(const ClusterSpec& c, const Layout& l, Dim dim);

// One pipeline send/recv of `bytes` between neighbouring stages.
double p2p_s(double bytes, const ClusterSpec& c, const Layout& l);

}  // namespace kiln::plan
