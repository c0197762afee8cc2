// Every all-reduce and reduce-scatter algorithm of the shared-memory engine (one_shot, direct,
// ring, halving_doubling) against a serial reference summed in that algorithm's documented order
// (docs/collectives.md), bit for bit: fp32 and bf16 (summed in fp32, rounded once), every size
// from 1 to 70 elements, sizes around the chunk and round edges, a few large ones; even and
// uneven reduce-scatter counts. Runs under mpirun with 2, 3 and 4 ranks (4: oversubscribed).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>

#include "comm/communicator.h"
#include "comm/counts.h"
#include "core/error.h"
#include "core/job.h"
#include "plan/collectives.h"

namespace kiln {
namespace {

const char* const kAlgorithms[] = {"one_shot", "direct", "ring", "halving_doubling"};

// A small chunk (4 KiB: rounds of a few hundred elements, so sizes up to 70000 take hundreds of
// pipelined steps) and the default one.
Communicator& engine(const std::string& algorithm, bool small_chunk) {
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
float value(int r, int64_t i) {
  uint64_t h =
      (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r + 1) << 40);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1.37e-4f;
}

// The sum of x(0..P-1) in the algorithm's order for slice q (docs/collectives.md), in fp32.
template <class X>
float ordered_sum(const std::string& algorithm, int P, int q, X x) {
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

float reference(const std::string& a, int P, int q, int64_t i) {
  return ordered_sum(a, P, q, [&](int r) { return value(r, i); });
}
uint16_t reference_bf16(const std::string& a, int P, int q, int64_t i) {
  return float_to_bf16(
      ordered_sum(a, P, q, [&](int r) { return bf16_to_float(float_to_bf16(value(r, i))); }));
}

using test::even_counts;
using test::uneven_counts;

// The slice (owner) of each element for the given counts.
std::vector<int> owners(const std::vector<int64_t>& counts) {
  std::vector<int> o;
  for (size_t r = 0; r < counts.size(); r++) o.insert(o.end(), counts[r], static_cast<int>(r));
  return o;
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> s;
  for (int64_t n = 1; n <= 70; n++) s.push_back(n);
  // Round edges with the 4 KiB chunk: direct 1024/P floats per slice (2048/P bf16), ring 1024
  // per slice, halving-doubling 1024/P rounded down to 16; one-shot 1024 floats per round.
  for (int64_t n : {255,  256,  257,  335,  336,  337,  511,  512,  513,  1007, 1008, 1009, 1023,
                    1024, 1025, 2047, 2048, 2049, 3071, 3072, 3073, 4095, 4096, 4097, 8193, 70001})
    s.push_back(n);
  return s;
}

void check_all_reduce(const std::string& a, Communicator& c, int64_t n) {
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

void check_reduce_scatter(const std::string& a, Communicator& c, int64_t n,
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
std::string reduce_scatter_order(const std::string& a) {
  return a == "one_shot" ? "direct" : a;
}

TEST(ShmAlgorithms, AllReduceMatchesTheReferenceInTheAlgorithmsOrderOnEverySize) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
  for (const char* a : kAlgorithms)
    for (bool small : {true, false}) {
      Communicator& c = engine(a, small);
      ASSERT_EQ(c.backend(), "shm");
      for (int64_t n : sizes()) {
        check_all_reduce(a, c, n);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

TEST(ShmAlgorithms, ReduceScatterMatchesTheReferenceWithEvenAndUnevenCounts) {
  for (const char* a : kAlgorithms)
    for (bool small : {true, false}) {
      Communicator& c = engine(a, small);
      int salt = 0;
      for (int64_t n : sizes()) {
        check_reduce_scatter(reduce_scatter_order(a), c, n, even_counts(n, c.size()));
        if (::testing::Test::HasFatalFailure()) return;
        check_reduce_scatter(reduce_scatter_order(a), c, n, uneven_counts(n, c.size(), salt++));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

TEST(ShmAlgorithms, LargeBuffersAndRunsRepeatBitForBit) {
  for (const char* a : kAlgorithms) {
    Communicator& c = engine(a, false);
    const int me = c.rank();
    for (int64_t n : {int64_t{300007}, int64_t{1} << 20}) {
      check_all_reduce(a, c, n);
      if (::testing::Test::HasFatalFailure()) return;
      std::vector<float> x(n), y(n);
      for (int64_t i = 0; i < n; i++) x[i] = y[i] = value(me, i) * 3.1f;
      c.all_reduce(x.data(), n, DType::F32);
      c.all_reduce(y.data(), n, DType::F32);
      EXPECT_EQ(std::memcmp(x.data(), y.data(), n * sizeof(float)), 0) << a << " n=" << n;
    }
  }
}

TEST(ShmAlgorithms, AsyncOperationsOfMixedAlgorithmsInterleave) {
  // Operations of different algorithms on one communicator's window keep the step discipline:
  // async all-reduces alternate with synchronous reduce-scatters on the ring engine, then the
  // other engines run between them.
  Communicator& ring = engine("ring", true);
  Communicator& hd = engine("halving_doubling", true);
  const int P = ring.size(), me = ring.rank();
  std::vector<std::vector<float>> bufs(4);
  std::vector<std::shared_ptr<Work>> ws;
  for (int k = 0; k < 4; k++) {
    const int64_t n = 50 + 2500 * k;
    bufs[k].resize(n);
    for (int64_t i = 0; i < n; i++) bufs[k][i] = value(me, i);
    ws.push_back(ring.all_reduce_async(bufs[k].data(), n, DType::F32));
  }
  check_all_reduce("halving_doubling", hd, 777);
  for (int k = 3; k >= 0; k--) ws[k]->wait();
  for (int k = 0; k < 4; k++) {
    const std::vector<int> owner = owners(even_counts(bufs[k].size(), P));
    for (size_t i = 0; i < bufs[k].size(); i++)
      ASSERT_EQ(bufs[k][i], reference("ring", P, owner[i], i)) << k;
  }
}

// All-reduces of buffers in alloc_shared memory read the peers' buffers in place (docs/
// collectives.md, "Shared buffers"), summing in rank order: the direct algorithm's bits, on
// every size, fp32 and bf16, from a different offset on each rank, and nothing past the end
// changes. The bytes a rank writes for its peers are its own slice's sums only, which shows the
// staging was skipped.
TEST(ShmShared, AllReduceInPlaceMatchesRankOrderOnEverySize) {
  std::vector<int64_t> ns = sizes();
  ns.push_back(300007);
  ns.push_back(int64_t{1} << 20);
  for (bool small : {true, false}) {
    Communicator& c = engine("shared", small);
    const int P = c.size(), me = c.rank();
    auto mem = c.alloc_shared(((int64_t{1} << 20) + 64) * sizeof(float));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(mem->data()) % 64, 0u);
    float* f = static_cast<float*>(mem->data()) + 3 * me;
    uint16_t* h = static_cast<uint16_t*>(mem->data()) + 5 * me;
    for (int64_t n : ns) {
      const std::vector<int64_t> counts = even_counts(n, P);
      const std::vector<int> owner = owners(counts);
      for (int64_t i = 0; i < n; i++) f[i] = value(me, i);
      f[n] = -5.0f;
      const int64_t before = c.bytes_sent();
      c.all_reduce(f, n, DType::F32);
      EXPECT_EQ(c.bytes_sent() - before, counts[me] * 4) << "n=" << n;
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(f[i], reference("direct", P, owner[i], i)) << "n=" << n << " i=" << i;
      ASSERT_EQ(f[n], -5.0f) << "wrote past the buffer, n=" << n;
      for (int64_t i = 0; i < n; i++) h[i] = float_to_bf16(value(me, i));
      h[n] = 0x7777;
      const int64_t before_bf16 = c.bytes_sent();
      c.all_reduce(h, n, DType::BF16);
      EXPECT_EQ(c.bytes_sent() - before_bf16, counts[me] * 2) << "bf16 n=" << n;
      for (int64_t i = 0; i < n; i++)
        ASSERT_EQ(h[i], reference_bf16("direct", P, owner[i], i)) << "bf16 n=" << n << " i=" << i;
      ASSERT_EQ(h[n], 0x7777) << "wrote past the buffer, n=" << n;
    }
  }
}

// Reduce-scatters of inputs in alloc_shared memory sum each slice straight from every rank's
// input, rank order, writing nothing for the peers: every size, even and uneven counts (an
// empty rank), fp32 and bf16, inputs unchanged, nothing past the slice.
TEST(ShmShared, ReduceScatterFromThePeersInputsMatchesRankOrder) {
  Communicator& c = engine("shared", true);
  const int P = c.size(), me = c.rank();
  std::vector<int64_t> ns = sizes();
  ns.push_back(300007);
  auto mem = c.alloc_shared((300007 + 64) * sizeof(float));
  float* in = static_cast<float*>(mem->data()) + me;
  uint16_t* hin = static_cast<uint16_t*>(mem->data()) + 2 * me;
  int salt = 0;
  for (int64_t n : ns) {
    for (const std::vector<int64_t>& counts : {even_counts(n, P), uneven_counts(n, P, salt++)}) {
      const int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
      for (int64_t i = 0; i < n; i++) in[i] = value(me, i);
      std::vector<float> out(counts[me] + 1, -7.0f);
      const int64_t before = c.bytes_sent();
      c.reduce_scatter(in, out.data(), counts, DType::F32);
      EXPECT_EQ(c.bytes_sent(), before) << "n=" << n;  // staged, it would have sent
      for (int64_t i = 0; i < counts[me]; i++)
        ASSERT_EQ(out[i], reference("direct", P, me, off + i)) << "n=" << n << " i=" << i;
      ASSERT_EQ(out[counts[me]], -7.0f) << "wrote past its slice, n=" << n;
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(in[i], value(me, i)) << "changed its input";
      for (int64_t i = 0; i < n; i++) hin[i] = float_to_bf16(value(me, i));
      std::vector<uint16_t> hout(counts[me] + 1, 0x7777);
      c.reduce_scatter(hin, hout.data(), counts, DType::BF16);
      for (int64_t i = 0; i < counts[me]; i++)
        ASSERT_EQ(hout[i], reference_bf16("direct", P, me, off + i)) << "bf16 n=" << n << " " << i;
      ASSERT_EQ(hout[counts[me]], 0x7777) << "wrote past its slice, n=" << n;
    }
  }
}

// If one rank's buffer is not in shared memory, every rank stages (they decide together), and
// async operations on shared buffers queue behind others as usual.
TEST(ShmShared, APlainBufferOnOneRankFallsBackToStagingOnAll) {
  Communicator& c = engine("shared", true);
  const int P = c.size(), me = c.rank();
  const int64_t n = 5000;  // direct (rank order) when staged
  auto mem = c.alloc_shared(n * sizeof(float));
  std::vector<float> plain(n);
  float* x = me == 0 ? plain.data() : static_cast<float*>(mem->data());
  for (int64_t i = 0; i < n; i++) x[i] = value(me, i);
  const int64_t before = c.bytes_sent();
  c.all_reduce(x, n, DType::F32);
  EXPECT_EQ(c.bytes_sent() - before, n * 4);  // direct: (P-1)/P n staged, n/P result
  const std::vector<int> owner = owners(even_counts(n, P));
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], reference("direct", P, owner[i], i)) << i;

  float* y = static_cast<float*>(mem->data());
  for (int64_t i = 0; i < n; i++) y[i] = value(me, i);
  std::vector<float> z(777);
  for (int64_t i = 0; i < 777; i++) z[i] = value(me, i);
  const int64_t before_async = c.bytes_sent();
  auto wz = c.all_reduce_async(z.data(), 777, DType::F32);
  auto wy = c.all_reduce_async(y, n, DType::F32);
  wy->wait();
  wz->wait();
  // z: one-shot, staged whole; y: in place, this rank's slice only.
  EXPECT_EQ(c.bytes_sent() - before_async, 777 * 4 + even_counts(n, P)[me] * 4);
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(y[i], reference("direct", P, owner[i], i)) << i;
  const std::vector<int> owner_z = owners(even_counts(777, P));
  for (int64_t i = 0; i < 777; i++) ASSERT_EQ(z[i], reference("direct", P, owner_z[i], i)) << i;
}

// An all-reduce issued before the communicator's first alloc_shared stages, even if it runs
// after it (the choice is made at issue, alike on every rank); the next one reads in place.
TEST(ShmShared, TheChoiceIsMadeWhenTheOperationIsIssued) {
  Communicator& c = engine("shared_fresh", true);
  const int P = c.size(), me = c.rank();
  const int64_t n = 5000;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++) x[i] = value(me, i);
  const int64_t before = c.bytes_sent();
  auto wx = c.all_reduce_async(x.data(), n, DType::F32);
  auto mem = c.alloc_shared(n * sizeof(float));
  wx->wait();
  EXPECT_EQ(c.bytes_sent() - before, n * 4);  // direct, staged
  float* y = static_cast<float*>(mem->data());
  for (int64_t i = 0; i < n; i++) y[i] = value(me, i);
  const int64_t before_y = c.bytes_sent();
  c.all_reduce(y, n, DType::F32);
  EXPECT_EQ(c.bytes_sent() - before_y, even_counts(n, P)[me] * 4);  // in place
  const std::vector<int> owner = owners(even_counts(n, P));
  for (int64_t i = 0; i < n; i++) {
    ASSERT_EQ(x[i], reference("direct", P, owner[i], i)) << i;
    ASSERT_EQ(y[i], reference("direct", P, owner[i], i)) << i;
  }
}

// The bytes each rank writes for its peers are the ones docs/collectives.md and the planner
// count (plan::bytes_sent): the engine's counter against the formula, per algorithm.
TEST(ShmAlgorithms, BytesSentAreThoseOfTheDocumentedFormulas) {
  for (const char* a : kAlgorithms) {
    Communicator& c = engine(a, false);
    const int P = c.size(), me = c.rank();
    const int64_t n = int64_t{P} * 65536;  // whole rounds, even slices
    std::vector<float> x(n, 1.0f);
    const int64_t before = c.bytes_sent();
    c.all_reduce(x.data(), n, DType::F32);
    const double want = plan::bytes_sent(plan::parse_coll_algorithm(a), plan::CollOp::all_reduce, P,
                                         me, static_cast<double>(n * sizeof(float)));
    EXPECT_EQ(static_cast<double>(c.bytes_sent() - before), want) << a << " rank " << me;
    std::vector<float> out(n / P);
    const int64_t before_rs = c.bytes_sent();
    c.reduce_scatter(x.data(), out.data(), std::vector<int64_t>(P, n / P), DType::F32);
    const double want_rs =
        plan::bytes_sent(plan::parse_coll_algorithm(a), plan::CollOp::reduce_scatter, P, me,
                         static_cast<double>(n * sizeof(float)));
    EXPECT_EQ(static_cast<double>(c.bytes_sent() - before_rs), want_rs) << a << " rank " << me;
  }
}

// The tuner's choice shows in the summation order (with 3 or more ranks; with 2 every order
// gives the same bits): one-shot and direct sum in rank order, the ring does not.
TEST(ShmAlgorithms, TheTunerPicksTheRingForLargeBuffersAndDirectBelow) {
  Communicator& c = engine("auto", false);
  const CommOptions d;
  const int P = c.size();
  ASSERT_LE(P, d.shm.ring_max_ranks);
  for (int64_t bytes : {d.shm.one_shot_bytes, d.shm.ring_bytes / 2, d.shm.ring_bytes}) {
    check_all_reduce(bytes >= d.shm.ring_bytes ? "ring" : "direct", c, bytes / 4);
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (int64_t bytes : {d.shm.ring_scatter_bytes / 2, d.shm.ring_scatter_bytes + 4 * P}) {
    const int64_t n = bytes / 4 / P * P;
    check_reduce_scatter(n * 4 >= d.shm.ring_scatter_bytes ? "ring" : "direct", c, n,
                         even_counts(n, P));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ShmAlgorithms, AnUnknownAlgorithmIsAnErrorNamingTheKeyAndTheChoices) {
  CommOptions o;
  o.backend = "shm";
  o.algorithm = "tree";
  std::string e;
  try {
    make_world_communicator(o);
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("comm.algorithm must be \"auto\", \"one_shot\", \"direct\", \"ring\" or "
                   "\"halving_doubling\", got 'tree'"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kiln
