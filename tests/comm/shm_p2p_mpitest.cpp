// Point-to-point messages through the shared-memory engine's window (comm/shm_p2p.h), run under
// mpirun with 2 and 3 ranks: every size and path (in the descriptor, from ordinary memory through
// the kernel, from shared memory with memcpy) arrives bit for bit; matching by peer and tag in
// posting order; more messages in flight than a pair has descriptors; and a receive that times
// out, or whose buffer is too small, fails naming the message and breaks the communicator.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/job.h"

namespace kiln {
namespace {

CommOptions p2p_options(double timeout = 30, bool p2p = true) {
  CommOptions o;
  o.timeout_seconds = timeout;
  o.backend = "shm";
  o.shm.p2p = p2p;
  return o;
}

Communicator& engine() {
  static std::unique_ptr<Communicator> c = make_world_communicator(p2p_options());
  return *c;
}

// Message k of rank r at index i: distinct bits for every sender, message and index.
float value(int r, int k, int64_t i) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ static_cast<uint32_t>(r * 977 + k * 131);
  h ^= h >> 15;
  return static_cast<float>(h % 100003) * 0.01f - 500.0f;
}

void fill(float* x, int64_t n, int r, int k) {
  for (int64_t i = 0; i < n; i++) x[i] = value(r, k, i);
}

int64_t mismatches(const float* x, int64_t n, int r, int k) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) bad += x[i] != value(r, k, i);
  return bad;
}

TEST(ShmP2p, EverySizeAndPathArrivesBitForBit) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
  Communicator& c = engine();
  ASSERT_EQ(c.backend(), "shm");
  const int R = c.size(), me = c.rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  // 0 to 20 floats travel in the descriptor (80 bytes); 21 and up are read from the sender.
  const std::vector<int64_t> sizes = {0, 1, 19, 20, 21, 1000, 65537, 1 << 20};
  for (bool shared : {false, true}) {
    for (size_t k = 0; k < sizes.size(); k++) {
      const int64_t n = sizes[k];
      // Shared buffers come from this communicator's alloc_shared (collective: every rank).
      std::unique_ptr<SharedMemory> mem_out, mem_back;
      std::vector<float> plain_out, plain_back;
      float *out = nullptr, *back = nullptr;
      if (shared) {
        mem_out = c.alloc_shared(std::max<int64_t>(n, 1) * 4);
        mem_back = c.alloc_shared(std::max<int64_t>(n, 1) * 4);
        out = static_cast<float*>(mem_out->data());
        back = static_cast<float*>(mem_back->data());
      } else {
        plain_out.resize(std::max<int64_t>(n, 1));
        plain_back.resize(std::max<int64_t>(n, 1));
        out = plain_out.data();
        back = plain_back.data();
      }
      fill(out, n, me, static_cast<int>(k));
      fill(back, n, me, 100 + static_cast<int>(k));
      std::vector<float> from_prev(std::max<int64_t>(n, 1), -1.0f),
          from_next(std::max<int64_t>(n, 1), -1.0f);
      // Both directions at once, the receives posted after the sends on every rank.
      auto s1 = c.send_async(out, n, DType::F32, next, 1);
      auto s2 = c.send_async(back, n, DType::F32, prev, 2);
      auto r2 = c.recv_async(from_next.data(), n, DType::F32, next, 2);
      c.recv(from_prev.data(), n, DType::F32, prev, 1);
      r2->wait();
      s1->wait();
      s2->wait();
      EXPECT_EQ(mismatches(from_prev.data(), n, prev, static_cast<int>(k)), 0)
          << n << " floats, shared " << shared;
      EXPECT_EQ(mismatches(from_next.data(), n, next, 100 + static_cast<int>(k)), 0)
          << n << " floats, shared " << shared;
      if (n > 0) {
        EXPECT_EQ(from_prev[n - 1], value(prev, static_cast<int>(k), n - 1));
      }
      c.barrier();  // the buffers are freed after every peer has read them
    }
  }
  // bf16: the element size counts.
  std::vector<uint16_t> h(333), got(333, 0);
  for (int i = 0; i < 333; i++) h[i] = static_cast<uint16_t>(me * 1000 + i);
  auto s = c.send_async(h.data(), 333, DType::BF16, next, 3);
  c.recv(got.data(), 333, DType::BF16, prev, 3);
  s->wait();
  for (int i = 0; i < 333; i++) ASSERT_EQ(got[i], static_cast<uint16_t>(prev * 1000 + i));
}

TEST(ShmP2p, MatchesByPeerAndTagInPostingOrder) {
  Communicator& c = engine();
  const int R = c.size(), me = c.rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  const int64_t n = 5000;  // read from the sender, not in the descriptor
  // Three messages to the next rank: tags 7, 8, 7.
  std::vector<std::vector<float>> out(3, std::vector<float>(n));
  std::vector<std::shared_ptr<Work>> sends;
  const int tags[3] = {7, 8, 7};
  for (int k = 0; k < 3; k++) {
    fill(out[k].data(), n, me, k);
    sends.push_back(c.send_async(out[k].data(), n, DType::F32, next, tags[k]));
  }
  // Received as tag 8 first, then the two 7s: the first 7 posted gets the first 7 sent.
  std::vector<float> a(n), b(n), d(n);
  auto r8 = c.recv_async(a.data(), n, DType::F32, prev, 8);
  auto r7 = c.recv_async(b.data(), n, DType::F32, prev, 7);
  auto r7b = c.recv_async(d.data(), n, DType::F32, prev, 7);
  r7b->wait();  // waiting out of order is fine
  r8->wait();
  r7->wait();
  for (auto& w : sends) w->wait();
  EXPECT_EQ(mismatches(a.data(), n, prev, 1), 0);
  EXPECT_EQ(mismatches(b.data(), n, prev, 0), 0);
  EXPECT_EQ(mismatches(d.data(), n, prev, 2), 0);
  c.barrier();
}

// A pair has 16 descriptors: 50 messages posted before any is received queue on the sender and
// are posted as the receiver takes them, in order.
TEST(ShmP2p, MoreMessagesThanDescriptorsArriveInOrder) {
  Communicator& c = engine();
  const int R = c.size(), me = c.rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  constexpr int K = 50;
  const int64_t n = 300;
  std::vector<std::vector<float>> out(K, std::vector<float>(n)), in(K, std::vector<float>(n));
  std::vector<std::shared_ptr<Work>> sends;
  for (int k = 0; k < K; k++) {
    fill(out[k].data(), n, me, k);
    sends.push_back(c.send_async(out[k].data(), n, DType::F32, next, 4));
  }
  for (int k = 0; k < K; k++) c.recv(in[k].data(), n, DType::F32, prev, 4);
  for (auto& w : sends) w->wait();
  for (int k = 0; k < K; k++) EXPECT_EQ(mismatches(in[k].data(), n, prev, k), 0) << k;
  // Sends and collectives interleave: a collective does not wait for a send, nor the reverse.
  std::vector<float> x(1000);
  fill(x.data(), 1000, me, 0);
  auto s = c.send_async(x.data(), 1000, DType::F32, next, 5);
  double v = me;
  c.all_reduce(&v, 1, DType::F64);
  EXPECT_EQ(v, R * (R - 1) / 2.0);
  std::vector<float> y(1000);
  c.recv(y.data(), 1000, DType::F32, prev, 5);
  s->wait();
  EXPECT_EQ(mismatches(y.data(), 1000, prev, 0), 0);
}

TEST(ShmP2p, WithP2pOffMessagesGoThroughMpi) {
  auto c = make_world_communicator(p2p_options(30, false));
  const int R = c->size(), me = c->rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  std::vector<float> out(4000), in(4000);
  fill(out.data(), 4000, me, 9);
  auto s = c->send_async(out.data(), 4000, DType::F32, next, 6);
  c->recv(in.data(), 4000, DType::F32, prev, 6);
  s->wait();
  EXPECT_EQ(mismatches(in.data(), 4000, prev, 9), 0);
}

TEST(ShmP2p, AReceiveThatTimesOutNamesItAndBreaksTheCommunicator) {
  auto c = make_world_communicator(p2p_options(0.5));
  static float late[4];
  if (c->rank() == 0) {
    auto w = c->recv_async(late, 4, DType::F32, 1, 99);
    try {
      w->wait();
      ADD_FAILURE() << "the wait did not time out";
    } catch (const Error& e) {
      const std::string m = e.what();
      // "(tag 99)": the engine's message, not MPI's.
      EXPECT_NE(m.find("rank 0: receive of 4 elements from rank 1 (tag 99) timed out"),
                std::string::npos)
          << m;
    }
    try {
      c->barrier();
      ADD_FAILURE() << "a broken communicator ran a collective";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("earlier operation failed"), std::string::npos);
    }
    try {
      c->send(late, 4, DType::F32, 1, 1);
      ADD_FAILURE() << "a broken communicator sent a message";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("send of 4 elements to rank 1 not run"),
                std::string::npos)
          << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The hierarchical backend sends to a rank of its own node through that node's engine (here
// every rank is on one node): a receive nobody answers fails with the engine's words.
TEST(ShmP2p, TheHierarchicalBackendSendsInsideANodeThroughTheEngine) {
  CommOptions o = p2p_options(0.5);
  o.backend = "hier";
  auto c = make_world_communicator(o);
  ASSERT_EQ(c->backend(), "hier");
  const int R = c->size(), me = c->rank(), next = (me + 1) % R, prev = (me + R - 1) % R;
  std::vector<float> out(3000), in(3000);
  fill(out.data(), 3000, me, 4);
  auto s = c->send_async(out.data(), 3000, DType::F32, next, 8);
  c->recv(in.data(), 3000, DType::F32, prev, 8);
  s->wait();
  EXPECT_EQ(mismatches(in.data(), 3000, prev, 4), 0);
  static float late[4];
  if (me == 0) {
    try {
      c->recv(late, 4, DType::F32, 1, 99);
      ADD_FAILURE() << "the wait did not time out";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("receive of 4 elements from rank 1 (tag 99) timed out"),
                std::string::npos)
          << e.what();
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(ShmP2p, AMessageLargerThanTheReceiveBufferIsRefused) {
  auto c = make_world_communicator(p2p_options(5));
  if (c->size() < 2) GTEST_SKIP();
  static float big[64];
  if (c->rank() == 1) {
    auto s = c->send_async(big, 64, DType::F32, 0, 3);  // never taken: not waited for
  } else if (c->rank() == 0) {
    float small[32];
    try {
      c->recv(small, 32, DType::F32, 1, 3);
      ADD_FAILURE() << "a truncated message was received";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("receive of 32 elements from rank 1 (tag 3): the message has 256 bytes, "
                       "more than the 128"),
                std::string::npos)
          << m;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace kiln
