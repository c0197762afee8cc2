#include "plan/torus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace kiln::plan {
namespace {

// Slices below one 4×4×4 cube (Google's v4-8 to v4-64 types): no wraparound.
constexpr std::array<std::array<int, 3>, 5> kSmall = {
    {{1, 1, 1}, {2, 2, 1}, {2, 2, 2}, {2, 2, 4}, {2, 4, 4}}};
constexpr int kCube = 4;

std::array<int, 3> coord(const TorusShape& t, int r) {
  return {r % t.dim[0], (r / t.dim[0]) % t.dim[1], r / (t.dim[0] * t.dim[1])};
}

bool shape_of(int chips, int max_chips, TorusShape* out) {
  if (chips < 1 || chips > max_chips) return false;
  for (const auto& s : kSmall)
    if (s[0] * s[1] * s[2] == chips) {
      out->dim = s;
      out->wrap = {false, false, false};
      return true;
    }
  // Whole cubes: a ≤ b ≤ c, each a multiple of 4 and at most the pod's side; the most cubic box
  // (smallest c, then largest a).
  int side = kCube;
  while (side * side * side < max_chips) side += kCube;
  bool found = false;
  for (int a = kCube; a <= side; a += kCube)
    for (int b = a; b <= side; b += kCube) {
      if (chips % (a * b) != 0) continue;
      const int c = chips / (a * b);
      if (c % kCube != 0 || c < b || c > side) continue;
      if (!found || c < out->dim[2] || (c == out->dim[2] && a > out->dim[0])) {
        out->dim = {a, b, c};
        found = true;
      }
    }
  out->wrap = {true, true, true};
  return found;
}

}  // namespace

std::string TorusShape::name() const {
  return fmt::format("{}x{}x{}", dim[0], dim[1], dim[2]);
}

bool torus_size_ok(int chips, int max_chips) {
  TorusShape t;
  return shape_of(chips, max_chips, &t);
}

std::string torus_sizes(int max_chips) {
  std::string s;
  int shown = 0;
  for (int n = 1; n <= max_chips && shown < 12; n++)
    if (torus_size_ok(n, max_chips)) s += (shown++ ? ", " : "") + std::to_string(n);
  return s + fmt::format(", …, {} (from 64 chips up, whole 4×4×4 cubes)", max_chips);
}

TorusShape torus_shape(int chips, int max_chips, std::string* problem) {
  TorusShape t;
  if (shape_of(chips, max_chips, &t)) return t;
  if (problem)
    *problem = chips > max_chips
                   ? fmt::format(
                         "a slice of {} chips is more than one pod of {}: join slices of at "
                         "most {} chips over the data-centre network with --slices N",
                         chips, max_chips, max_chips)
                   : fmt::format("a slice cannot have {} chips; it can have {}", chips,
                                 torus_sizes(max_chips));
  return t;
}

TorusPath torus_group(const TorusShape& t, const std::vector<int>& ranks) {
  TorusPath p;
  if (ranks.size() < 2) return p;
  for (int axis = 0; axis < 3; axis++) {
    std::set<int> at;
    for (int r : ranks) at.insert(coord(t, r)[axis]);
    const int n = int(at.size());
    if (n < 2) continue;
    const int spacing = std::max(1, (*at.rbegin() - *at.begin()) / (n - 1));
    const bool ring = t.wrap[axis] && n * spacing == t.dim[axis];
    p.links += (ring ? 2.0 : 1.0) / spacing;
    p.hops += (ring ? n / 2 : n - 1) * spacing;
  }
  return p;
}

TorusPath torus_send(const TorusShape& t, int from, int to) {
  TorusPath p;
  const auto a = coord(t, from), b = coord(t, to);
  int busiest = 1;
  for (int axis = 0; axis < 3; axis++) {
    int d = std::abs(a[axis] - b[axis]);
    if (t.wrap[axis]) d = std::min(d, t.dim[axis] - d);
    p.hops += d;
    busiest = std::max(busiest, d);
  }
  p.links = 1.0 / busiest;
  return p;
}

}  // namespace kiln::plan
