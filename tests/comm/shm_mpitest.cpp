// The shared-memory engine against a serial reference (run under mpirun with 2 and 3 ranks):
// every operation on sizes from one element up, odd sizes and uneven counts (zeros included),
// fp32 and bf16, with a small chunk so that large buffers take many pipelined steps; results
// that do not depend on the chunking, bit for bit; and timeouts that name the missing rank.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "comm/communicator.h"
#include "comm/counts.h"
#include "core/error.h"
#include "core/job.h"

namespace kiln {
namespace {

// One chunk of 4 KiB (the smallest) pipelines a 100k-element buffer in ~100 steps.
// (Direct copies, process_vm_readv, from 4 KiB on with the small chunk; never with the big one,
// so both all-gather and broadcast paths are checked.)
CommOptions shm_options(int64_t chunk_bytes, int64_t one_shot_bytes = 32 << 10,
                        int64_t direct_bytes = 4096) {
  CommOptions o;
  o.timeout_seconds = 30;
  o.backend = "shm";
  o.shm.chunk_bytes = chunk_bytes;
  o.shm.one_shot_bytes = one_shot_bytes;
  o.shm.direct_bytes = direct_bytes;
  o.shm.slots = 3;
  o.algorithm = "direct";  // one-shot and direct (shm_algorithms_mpitest.cpp: the others)
  return o;
}

Communicator& small_chunks() {
  static std::unique_ptr<Communicator> c = make_world_communicator(shm_options(4096));
  return *c;
}

Communicator& big_chunks() {
  static std::unique_ptr<Communicator> c = make_world_communicator(shm_options(256 << 10, 0, 0));
  return *c;
}

// Rank r's value at index i: an arbitrary float (a hash), so sums round and order matters.
float value(int r, int64_t i) {
  uint64_t h =
      (static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(r) << 40);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int64_t>(h % 2000001) - 1000000) * 1.37e-4f;
}

// The serial reference: summed in rank order in fp32.
float reference(int R, int64_t i) {
  float s = value(0, i);
  for (int r = 1; r < R; r++) s += value(r, i);
  return s;
}

uint16_t reference_bf16(int R, int64_t i) {
  float s = bf16_to_float(float_to_bf16(value(0, i)));
  for (int r = 1; r < R; r++) s += bf16_to_float(float_to_bf16(value(r, i)));
  return float_to_bf16(s);
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> s;
  for (int64_t n = 1; n <= 40; n++) s.push_back(n);
  // Around the steps of a 4 KiB chunk (1024 floats; per owner 512 or 336 with 2 or 3 ranks).
  for (int64_t n :
       {335, 336, 337, 511, 512, 513, 1023, 1024, 1025, 2047, 2049, 4099, 65537, 100003})
    s.push_back(n);
  return s;
}

TEST(ShmEngine, AllReduceMatchesSerialReferenceOnEverySize) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
  for (Communicator* c : {&small_chunks(), &big_chunks()}) {
    ASSERT_EQ(c->backend(), "shm");
    const int R = c->size(), me = c->rank();
    for (int64_t n : sizes()) {
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; i++) x[i] = value(me, i);
      c->all_reduce(x.data(), n, DType::F32);
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], reference(R, i)) << "n=" << n << " i=" << i;
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; i++) h[i] = float_to_bf16(value(me, i));
      c->all_reduce(h.data(), n, DType::BF16);
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(h[i], reference_bf16(R, i)) << "n=" << n;
    }
  }
}

TEST(ShmEngine, ResultsAreTheSameBitsWhateverTheChunking) {
  const int me = small_chunks().rank();
  const int64_t n = 300007;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; i++) a[i] = b[i] = value(me, i);
  small_chunks().all_reduce(a.data(), n, DType::F32);
  big_chunks().all_reduce(b.data(), n, DType::F32);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0);
  // The one-shot path for small buffers sums in the same order as the pipelined one.
  std::vector<float> c(1000), d(1000);
  for (int64_t i = 0; i < 1000; i++) c[i] = d[i] = value(me, i);
  small_chunks().all_reduce(c.data(), 1000, DType::F32);  // 4000 bytes: one shot
  big_chunks().all_reduce(d.data(), 1000, DType::F32);    // one shot disabled: pipelined
  EXPECT_EQ(std::memcmp(c.data(), d.data(), 1000 * sizeof(float)), 0);
}

TEST(ShmEngine, ReduceScatterAndAllGatherWithUnevenCounts) {
  for (Communicator* c : {&small_chunks(), &big_chunks()}) {
    const int R = c->size(), me = c->rank();
    int salt = 0;
    for (int64_t n : sizes()) {
      for (bool even : {true, false}) {
        const std::vector<int64_t> counts =
            even ? test::even_counts(n, R) : test::uneven_counts(n, R, salt++);
        ASSERT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}), n);
        const int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
        std::vector<float> in(n), out(counts[me] + 1, -7.0f);
        for (int64_t i = 0; i < n; i++) in[i] = value(me, i);
        c->reduce_scatter(in.data(), out.data(), counts, DType::F32);
        for (int64_t i = 0; i < counts[me]; i++)
          ASSERT_EQ(out[i], reference(R, off + i)) << "n=" << n << " i=" << i;
        EXPECT_EQ(out[counts[me]], -7.0f) << "wrote past its slice";
        for (int64_t i = 0; i < n; i++) EXPECT_EQ(in[i], value(me, i)) << "changed its input";
        // All-gather the slices back, in place.
        std::vector<float> full(n, -100.0f);
        std::copy(out.begin(), out.begin() + counts[me], full.begin() + off);
        c->all_gather(full.data(), counts, DType::F32);
        for (int64_t i = 0; i < n; i++) ASSERT_EQ(full[i], reference(R, i)) << "n=" << n;
        // bf16 reduce-scatter.
        std::vector<uint16_t> hin(n), hout(counts[me] + 1);
        for (int64_t i = 0; i < n; i++) hin[i] = float_to_bf16(value(me, i));
        c->reduce_scatter(hin.data(), hout.data(), counts, DType::BF16);
        for (int64_t i = 0; i < counts[me]; i++) ASSERT_EQ(hout[i], reference_bf16(R, off + i));
      }
    }
  }
}

TEST(ShmEngine, BroadcastFromEveryRootBarrierAndAsyncOrder) {
  Communicator& c = small_chunks();
  const int R = c.size(), me = c.rank();
  for (int root = 0; root < R; root++) {
    for (int64_t n : {1, 3, 1023, 1024, 1025, 50001}) {
      std::vector<float> b(n);
      for (int64_t i = 0; i < n; i++) b[i] = me == root ? value(root, i) : 0.0f;
      c.broadcast(b.data(), n, DType::F32, root);
      for (int64_t i = 0; i < n; i++) ASSERT_EQ(b[i], value(root, i)) << n;
    }
    double d = me == root ? 2.5 : 0;
    c.broadcast(&d, 1, DType::F64, root);
    EXPECT_EQ(d, 2.5);
  }
  c.barrier();
  // Several operations in flight complete in issue order, each correct.
  std::vector<std::vector<float>> bufs(5);
  std::vector<std::shared_ptr<Work>> ws;
  for (int k = 0; k < 5; k++) {
    const int64_t n = 100 + 3000 * k;
    bufs[k].resize(n);
    for (int64_t i = 0; i < n; i++) bufs[k][i] = value(me, i);
    ws.push_back(c.all_reduce_async(bufs[k].data(), n, DType::F32));
  }
  for (int k = 4; k >= 0; k--) ws[k]->wait();  // waiting out of order is fine
  for (int k = 0; k < 5; k++)
    for (size_t i = 0; i < bufs[k].size(); i++) ASSERT_EQ(bufs[k][i], reference(R, i));
  EXPECT_DOUBLE_EQ(c.all_reduce_scalar(1.5), 1.5 * R);
  // Point-to-point goes through MPI.
  std::vector<float> send(3, static_cast<float>(me)), recv(3, -1.0f);
  auto s = c.send_async(send.data(), 3, DType::F32, (me + 1) % R, 5);
  c.recv(recv.data(), 3, DType::F32, (me + R - 1) % R, 5);
  s->wait();
  EXPECT_EQ(recv[0], static_cast<float>((me + R - 1) % R));
}

TEST(ShmEngine, SplitGivesEngineGroups) {
  Communicator& c = small_chunks();
  const int me = c.rank();
  auto group = c.split(me % 2, me);
  EXPECT_EQ(group->backend(), "shm");
  EXPECT_EQ(group->rank(), me / 2);
  std::vector<float> x(5000, static_cast<float>(me));
  group->all_reduce(x.data(), 5000, DType::F32);
  float want = 0;
  for (int r = me % 2; r < c.size(); r += 2) want += static_cast<float>(r);
  EXPECT_EQ(x[4999], want);
}

TEST(ShmEngine, ATimeoutNamesTheOperationTheStepAndTheMissingRank) {
  CommOptions o = shm_options(4096);
  o.timeout_seconds = 0.5;
  auto c = make_world_communicator(o);
  if (c->rank() == 0) {
    std::vector<float> x(10000, 1.0f);
    try {
      c->all_reduce(x.data(), 10000, DType::F32);  // nobody else takes part
      ADD_FAILURE() << "the wait did not time out";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("rank 0: all_reduce of 10000 elements (step 1)"), std::string::npos) << m;
      EXPECT_NE(m.find("timed out"), std::string::npos) << m;
      std::string missing = "waiting for rank(s) 1";
      for (int r = 2; r < c->size(); r++) missing += ", " + std::to_string(r);
      EXPECT_NE(m.find(missing + " "), std::string::npos) << m;
    }
    try {
      c->barrier();
      ADD_FAILURE() << "a broken communicator ran an operation";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("earlier operation failed"), std::string::npos);
    }
  }
  small_chunks().barrier();
}

TEST(ShmEngine, AJobAcrossSeveralNodesIsRefusedOrLeftToMpi) {
  // Every rank of this test runs on one node, so "auto" picks the engine.
  CommOptions o;
  o.backend = "auto";
  EXPECT_EQ(make_world_communicator(o)->backend(), "shm");
  o.backend = "nccl";
  std::string message;
  try {
    make_world_communicator(o);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("expected \"auto\", \"mpi\", \"shm\" or \"hier\""), std::string::npos)
      << message;
}

}  // namespace
}  // namespace kiln
