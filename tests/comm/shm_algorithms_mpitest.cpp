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
#include "comm/shm_algorithm_check.h"
#include "core/error.h"
#include "core/job.h"
#include "plan/collectives.h"

namespace kiln {
namespace {

const char* const kAlgorithms[] = {"one_shot", "direct", "ring", "halving_doubling"};

using namespace test;  // engine(), value(), reference(), check_*() (shm_algorithm_check.h)

// Each algorithm's all-reduce and reduce-scatter on every size: its own file,
// shm_algo_<name>_mpitest.cpp (shm_algorithm_check.h).

TEST(ShmAlgorithms, LargeBuffersAndRunsRepeatBitForBit) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
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
