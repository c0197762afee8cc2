// The per-algorithm checks of the shared-memory engine (tests/comm/shm_algo_<name>_mpitest.cpp,
// and shm_algorithms_mpitest.cpp across algorithms): an engine forced to one algorithm by name
// (CommOptions::algorithm), a serial reference summed in that algorithm's documented order
// (docs/collectives.md), bit for bit, fp32 and bf16, on awkward sizes and counts.
// A new algorithm's test calls these with its name; one that sums in a new order adds it to
// ordered_sum.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/counts.h"

namespace kiln::test {

// A small chunk (4 KiB: rounds of a few hundred elements, so sizes up to 70000 take hundreds of
// pipelined steps) and the default one.
inline Communicator& engine(const std::string& algorithm, bool small_chunk) {
  // MPI is initialised first, so that this map is destroyed before MPI's exit handler finalises
  // it (the engines free their windows when destroyed).
  static std::map<std::string, std::unique_ptr<Communicator>> made = [] {
    CommOptions mpi;
    mpi.backend = "mpi";
    make_world_communicator(mpi);
    return std::map<std::string, std::unique_ptr<Communicator>>{};
  }();
  const std::string key = algorithm + (small_chunk ? "/small" : "/big");
  auto& c = made[key];
  if (!c) {
    CommOptions o;
    o.timeout_seconds = 60;
    o.backend = "shm";
    o.algorithm = algorithm;
    if (algorithm == "shared" || algorithm == "shared_fresh") {  // auto, in place at any size
      o.algorithm = "auto";
      o.shm.shared_bytes = 1;
    }
    o.shm.slots = small_chunk ? 2 : 4;
    if (small_chunk) o.shm.chunk_bytes = 4096;
    c = make_world_communicator(o);
  }
  return *c;
}

// Rank r's value at index i: an arbitrary float (a hash), so sums round and order matters.
inline float value(int r, int64_t i) {
  uint64_t h =
      (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r + 1) << 40);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1.37e-4f;
}

// The sum of x(0..P-1) in the algorithm's order for slice q (docs/collectives.md), in fp32.
template <class X>
inline float ordered_sum(const std::string& algorithm, int P, int q, X x) {
  if (algorithm == "ring") {  // slice q: q+1, q+2, ..., q
    float s = x((q + 1) % P);
    for (int k = 2; k <= P; k++) s += x((q + k) % P);
    return s;
  }
  if (algorithm == "halving_doubling") {  // fold ranks >= P2 into r - P2, then a pairwise tree
    int P2 = 1;
    while (P2 * 2 <= P) P2 *= 2;
    std::vector<float> w(P2);
    for (int b = 0; b < P2; b++) w[b] = b + P2 < P ? x(b) + x(b + P2) : x(b);
    for (int d = 1; d < P2; d *= 2)
      for (int b = 0; b < P2; b += 2 * d) w[b] = w[b] + w[b + d];
    return w[0];
  }
  float s = x(0);  // one_shot, direct: rank order
  for (int r = 1; r < P; r++) s += x(r);
  return s;
}

inline float reference(const std::string& a, int P, int q, int64_t i) {
  return ordered_sum(a, P, q, [&](int r) { return value(r, i); });
}
inline uint16_t reference_bf16(const std::string& a, int P, int q, int64_t i) {
  return float_to_bf16(
      ordered_sum(a, P, q, [&](int r) { return bf16_to_float(float_to_bf16(value(r, i))); }));
}

// The slice (owner) of each element for the given counts.
inline std::vector<int> owners(const std::vector<int64_t>& counts) {
  std::vector<int> o;
  for (size_t r = 0; r < counts.size(); r++) o.insert(o.end(), counts[r], static_cast<int>(r));
  return o;
}

inline std::vector<int64_t> sizes() {
  std::vector<int64_t> s;
  for (int64_t n = 1; n <= 70; n++) s.push_back(n);
  // Round edges with the 4 KiB chunk: direct 1024/P floats per slice (2048/P bf16), ring 1024
  // per slice, halving-doubling 1024/P rounded down to 16; one-shot 1024 floats per round.
  for (int64_t n : {255,  256,  257,  335,  336,  337,  511,  512,  513,  1007, 1008, 1009, 1023,
                    1024, 1025, 2047, 2048, 2049, 3071, 3072, 3073, 4095, 4096, 4097, 8193, 70001})
    s.push_back(n);
  return s;
}

inline void check_all_reduce(const std::string& a, Communicator& c, int64_t n) {
  const int P = c.size(), me = c.rank();
  const std::vector<int> owner = owners(even_counts(n, P));
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++) x[i] = value(me, i);
  c.all_reduce(x.data(), n, DType::F32);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(x[i], reference(a, P, owner[i], i)) << a << " n=" << n << " i=" << i;
  std::vector<uint16_t> h(n);
  for (int64_t i = 0; i < n; i++) h[i] = float_to_bf16(value(me, i));
  c.all_reduce(h.data(), n, DType::BF16);
  for (int64_t i = 0; i < n; i++)
    ASSERT_EQ(h[i], reference_bf16(a, P, owner[i], i)) << a << " bf16 n=" << n << " i=" << i;
}

inline void check_reduce_scatter(const std::string& a, Communicator& c, int64_t n,
                                 const std::vector<int64_t>& counts) {
  const int P = c.size(), me = c.rank();
  const int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
  std::vector<float> in(n), out(counts[me] + 1, -7.0f);
  for (int64_t i = 0; i < n; i++) in[i] = value(me, i);
  c.reduce_scatter(in.data(), out.data(), counts, DType::F32);
  for (int64_t i = 0; i < counts[me]; i++)
    ASSERT_EQ(out[i], reference(a, P, me, off + i)) << a << " n=" << n << " i=" << i;
  ASSERT_EQ(out[counts[me]], -7.0f) << a << " wrote past its slice, n=" << n;
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(in[i], value(me, i)) << a << " changed its input";
  std::vector<uint16_t> hin(n), hout(counts[me] + 1, 0x7777);
  for (int64_t i = 0; i < n; i++) hin[i] = float_to_bf16(value(me, i));
  c.reduce_scatter(hin.data(), hout.data(), counts, DType::BF16);
  for (int64_t i = 0; i < counts[me]; i++)
    ASSERT_EQ(hout[i], reference_bf16(a, P, me, off + i)) << a << " bf16 n=" << n << " i=" << i;
  ASSERT_EQ(hout[counts[me]], 0x7777) << a << " wrote past its slice, n=" << n;
}

// The reduce-scatter of one-shot is the direct one (docs/collectives.md).
inline std::string reduce_scatter_order(const std::string& a) {
  return a == "one_shot" ? "direct" : a;
}

// Every size of sizes(), with the 4 KiB chunk and the default one: the all-reduce of algorithm
// `a` against the reference in its order.
inline void check_all_reduce_on_every_size(const std::string& a) {
  for (bool small : {true, false}) {
    Communicator& c = engine(a, small);
    ASSERT_EQ(c.backend(), "shm");
    for (int64_t n : sizes()) {
      check_all_reduce(a, c, n);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// The same for the reduce-scatter, with even and uneven counts (an empty rank); `order`: the
// order it sums in (one-shot's is the direct one's).
inline void check_reduce_scatter_on_every_size(const std::string& a, const std::string& order) {
  for (bool small : {true, false}) {
    Communicator& c = engine(a, small);
    int salt = 0;
    for (int64_t n : sizes()) {
      check_reduce_scatter(order, c, n, even_counts(n, c.size()));
      if (::testing::Test::HasFatalFailure()) return;
      check_reduce_scatter(order, c, n, uneven_counts(n, c.size(), salt++));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// All-gathers (even and uneven counts, an empty rank) and broadcasts (from every root) of every
// size, fp32 and bf16, with algorithm `a` forced: every rank ends with every rank's data, and
// nothing past the buffer changes. (An algorithm that cannot take a size declines and the
// tuner's choice runs, which must be as right.)
inline void check_all_gather_and_broadcast_on_every_size(const std::string& a) {
  for (bool small : {true, false}) {
    Communicator& c = engine(a, small);
    const int P = c.size(), me = c.rank();
    int salt = 0;
    for (int64_t n : sizes()) {
      for (const std::vector<int64_t>& counts : {even_counts(n, P), uneven_counts(n, P, salt++)}) {
        const std::vector<int> owner = owners(counts);
        std::vector<float> x(n + 1, -3.0f);
        std::vector<uint16_t> h(n + 1, 0x7777);
        int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
        for (int64_t i = off; i < off + counts[me]; i++) {
          x[i] = value(me, i);
          h[i] = float_to_bf16(value(me, i));
        }
        c.all_gather(x.data(), counts, DType::F32);
        c.all_gather(h.data(), counts, DType::BF16);
        for (int64_t i = 0; i < n; i++) {
          ASSERT_EQ(x[i], value(owner[i], i)) << a << " all_gather n=" << n << " i=" << i;
          ASSERT_EQ(h[i], float_to_bf16(value(owner[i], i))) << a << " bf16 n=" << n;
        }
        ASSERT_EQ(x[n], -3.0f) << a << " wrote past the buffer, n=" << n;
        ASSERT_EQ(h[n], 0x7777) << a << " wrote past the buffer, n=" << n;
      }
      const int root = static_cast<int>(n % P);
      std::vector<float> b(n + 1, -3.0f);
      if (me == root)
        for (int64_t i = 0; i < n; i++) b[i] = value(root, i);
      c.broadcast(b.data(), n, DType::F32, root);
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(b[i], value(root, i)) << a << " broadcast n=" << n << " i=" << i;
      ASSERT_EQ(b[n], -3.0f) << a << " wrote past the buffer, n=" << n;
    }
  }
}

}  // namespace kiln::test
