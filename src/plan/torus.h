// TPU-style slices: chips joined to their nearest neighbours by inter-chip links (ICI) in a 3D
// torus, with no switch. A collective's bandwidth then depends on which axes of the torus its
// group spans, not on nodes and NICs (docs/planner.md, "Torus slices (TPU)").
//
// The rules, from Google's TPU v4 documentation and the Scaling Book ("How to Scale Your Model",
// tpus.md and sharding.md):
//   - a slice is a box a×b×c of chips; from 64 chips up every side is a multiple of 4 (whole
//     4×4×4 cubes) and each axis closes into a ring through the optical switches (wraparound);
//     the smaller slices 2×2×1, 2×2×2, 2×2×4 and 2×4×4 have no wraparound;
//   - an all-gather or reduce-scatter of V bytes over a ring with wraparound moves V / (2·W) per
//     axis (both directions of the link, W one-way per link), V / W without wraparound, and
//     spreads over every axis the group spans: V / (W · Σ links per axis);
//   - each hop costs about 1 µs: |X|/2 hops around a wrapped axis of |X| chips, |X| − 1 along
//     an open one.
#pragma once
#include <array>
#include <string>
#include <vector>

namespace kiln::plan {

struct TorusShape {
  std::array<int, 3> dim{1, 1, 1};  // chips along x, y, z (x varies fastest over ranks)
  std::array<bool, 3> wrap{false, false, false};
  int chips() const { return dim[0] * dim[1] * dim[2]; }
  std::string name() const;  // "16x16x16"
};

// The slice `chips` chips form (the most cubic box the rules allow), or "" in `problem` naming
// the sizes a slice can have; `max_chips` is the pod's size.
TorusShape torus_shape(int chips, int max_chips, std::string* problem);
// Chip counts a slice can have, up to max_chips (for messages and the --days search).
bool torus_size_ok(int chips, int max_chips);
std::string torus_sizes(int max_chips);

// How a group of ranks (rank r sits at x = r mod a, y = r/a mod b, z = r/(ab)) runs a ring
// collective on the torus: the one-way link equivalents each chip sends over (2 per wrapped
// axis the group covers, 1 per open one, divided by the spacing of its members along the axis,
// whose links it shares with the groups in between) and the hops in sequence.
struct TorusPath {
  double links = 0;
  int hops = 0;
};
TorusPath torus_group(const TorusShape& t, const std::vector<int>& ranks);
// A send from rank `from` to rank `to`: hops on the shortest route and how many sends share
// its busiest link (every stage sends at once, each along the same route shifted).
TorusPath torus_send(const TorusShape& t, int from, int to);

}  // namespace kiln::plan
