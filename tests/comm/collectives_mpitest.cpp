// Collectives against a serial reference, run under mpirun with several ranks (see
// tests/CMakeLists.txt): awkward sizes (not divisible by the rank count), fp32 and bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <numeric>

#include "comm/communicator.h"
#include "comm/counts.h"
#include "core/error.h"
#include "core/job.h"
#include "parallel/grid.h"

namespace kiln {
namespace {

// The backend under test: ctest runs this file once per backend (tests/CMakeLists.txt).
std::string backend_under_test() {
  const char* b = std::getenv("KILN_TEST_COMM_BACKEND");
  return b ? b : "mpi";
}

Communicator& world() {
  static std::unique_ptr<Communicator> c = make_world_communicator({30.0, backend_under_test()});
  return *c;
}

// KILN_TEST_COMM_EXPECT: the backend "auto" must choose (the multi-node test sets it).
TEST(Collectives, TheWorldUsesTheBackendUnderTest) {
  const char* expect = std::getenv("KILN_TEST_COMM_EXPECT");
  EXPECT_EQ(world().backend(), expect ? std::string(expect) : backend_under_test());
}

// The value rank r contributes at index i: small integers and halves, exact in fp32 and bf16 sums.
float value(int r, int64_t i) {
  return static_cast<float>(((r + 1) * 7 + i * 3) % 11) * 0.5f - 2.0f;
}

float reference_sum(int64_t i) {
  float s = 0;
  for (int r = 0; r < world().size(); r++) s += value(r, i);
  return s;
}

TEST(Collectives, AllReduceMatchesSerialSumOnAwkwardSizes) {
  ASSERT_TRUE(launched_by_mpi()) << "run this binary under mpirun";
  for (int64_t n : {1, 7, 1023, 100003}) {
    std::vector<float> x(n);
    for (int64_t i = 0; i < n; i++) x[i] = value(world().rank(), i);
    world().all_reduce(x.data(), n, DType::F32);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], reference_sum(i)) << "n=" << n << " i=" << i;
  }
}

// Every backend's alloc_shared gives 64-byte aligned, zeroed memory that collectives use like
// any other (the shared-memory engine reads it in place: tests/comm/shm_algorithms_mpitest.cpp).
TEST(Collectives, AllocSharedGivesAlignedZeroedMemoryForCollectives) {
  const int64_t n = 100003;
  auto mem = world().alloc_shared(n * sizeof(float));
  ASSERT_EQ(mem->bytes(), n * static_cast<int64_t>(sizeof(float)));
  ASSERT_EQ(reinterpret_cast<uintptr_t>(mem->data()) % 64, 0u);
  float* x = static_cast<float*>(mem->data());
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], 0.0f) << i;
  for (int64_t i = 0; i < n; i++) x[i] = value(world().rank(), i);
  world().all_reduce(x, n, DType::F32);
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], reference_sum(i)) << i;
}

TEST(Collectives, Bf16AllReduceSumsInFloatAndRounds) {
  for (int64_t n : {1, 7, 1023}) {
    std::vector<uint16_t> x(n);
    for (int64_t i = 0; i < n; i++) x[i] = float_to_bf16(value(world().rank(), i));
    world().all_reduce(x.data(), n, DType::BF16);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(bf16_to_float(x[i]), reference_sum(i)) << i;
  }
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);  // ties round to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.01171875f)), 1.015625f);
}

TEST(Collectives, ReduceScatterAndAllGatherWithUnevenCounts) {
  const int R = world().size(), me = world().rank();
  for (int64_t n : {1, 7, 1023}) {
    const std::vector<int64_t> counts = test::even_counts(n, R);
    int64_t offset = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
    std::vector<float> in(n), out(std::max<int64_t>(1, counts[me]));
    for (int64_t i = 0; i < n; i++) in[i] = value(me, i);
    world().reduce_scatter(in.data(), out.data(), counts, DType::F32);
    for (int64_t i = 0; i < counts[me]; i++) ASSERT_EQ(out[i], reference_sum(offset + i));
    // All-gather the reduced slices back in place.
    std::vector<float> full(n, -100.0f);
    std::copy(out.begin(), out.begin() + counts[me], full.begin() + offset);
    world().all_gather(full.data(), counts, DType::F32);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(full[i], reference_sum(i)) << "n=" << n;
  }
}

TEST(Collectives, BroadcastSendRecvAndAsyncOrder) {
  const int R = world().size(), me = world().rank();
  std::vector<double> b(5, me == R - 1 ? 3.25 : 0.0);
  world().broadcast(b.data(), 5, DType::F64, R - 1);
  for (double v : b) EXPECT_EQ(v, 3.25);
  // A ring of messages.
  std::vector<float> send(3, static_cast<float>(me)), recv(3, -1.0f);
  auto s = world().send_async(send.data(), 3, DType::F32, (me + 1) % R, 5);
  world().recv(recv.data(), 3, DType::F32, (me + R - 1) % R, 5);
  s->wait();
  EXPECT_EQ(recv[0], static_cast<float>((me + R - 1) % R));
  // Several reductions in flight complete in issue order, each correct.
  std::vector<std::vector<float>> bufs(4, std::vector<float>(257));
  std::vector<std::shared_ptr<Work>> ws;
  for (int k = 0; k < 4; k++) {
    for (int64_t i = 0; i < 257; i++) bufs[k][i] = value(me, i + k);
    ws.push_back(world().all_reduce_async(bufs[k].data(), 257, DType::F32));
  }
  for (int k = 0; k < 4; k++) {
    ws[k]->wait();
    for (int64_t i = 0; i < 257; i++) ASSERT_EQ(bufs[k][i], reference_sum(i + k));
  }
  world().barrier();
  EXPECT_DOUBLE_EQ(world().all_reduce_scalar(1.5), 1.5 * R);
}

// Pipeline schedules exchange in whatever order their steps come: here every rank sends a large
// message to each neighbour before it receives from them (MPI's rendezvous sizes: a send is
// only done once its receive is posted), with a reduction issued between the sends and the
// receives. A backend that finished each send before starting the next operation would hang.
TEST(Collectives, SendsIssuedBeforeTheirReceivesOnEveryRankComplete) {
  {
    Communicator* c = &world();
    const int R = c->size(), me = c->rank();
    const int next = (me + 1) % R, prev = (me + R - 1) % R;
    constexpr int64_t n = 1 << 20;  // 4 MiB: far above any eager limit
    std::vector<float> to_next(n), to_prev(n), from_prev(n, -1), from_next(n, -1);
    for (int64_t i = 0; i < n; i++) {
      to_next[i] = value(me, i);
      to_prev[i] = -value(me, i);
    }
    for (int round = 0; round < 3; round++) {
      std::vector<std::shared_ptr<Work>> ws;
      ws.push_back(c->send_async(to_next.data(), n, DType::F32, next, round));
      ws.push_back(c->send_async(to_prev.data(), n, DType::F32, prev, 100 + round));
      double s = me;
      auto red = c->all_reduce_async(&s, 1, DType::F64);
      ws.push_back(c->recv_async(from_prev.data(), n, DType::F32, prev, round));
      ws.push_back(c->recv_async(from_next.data(), n, DType::F32, next, 100 + round));
      red->wait();
      EXPECT_EQ(s, R * (R - 1) / 2.0);
      for (auto& w : ws) w->wait();
      for (int64_t i = 0; i < n; i += 4097) {
        ASSERT_EQ(from_prev[i], value(prev, i)) << i;
        ASSERT_EQ(from_next[i], -value(next, i)) << i;
      }
    }
  }
}

TEST(Collectives, SplitMakesGroupsOfTheGrid) {
  const int me = world().rank();
  auto group = world().split(me % 2, me);
  EXPECT_EQ(group->size(), (world().size() + 1 - me % 2) / 2);
  EXPECT_EQ(group->rank(), me / 2);
  double v = group->all_reduce_scalar(me);
  double want = 0;
  for (int r = me % 2; r < world().size(); r += 2) want += r;
  EXPECT_EQ(v, want);
}

TEST(Collectives, AWaitThatTimesOutNamesTheOperationAndRank) {
  // MPI's point-to-point timeout (the shared-memory engine's: shm_mpitest.cpp).
  auto c = make_world_communicator({0.5, "mpi"});  // every rank takes part in creating it
  static float late[4];
  if (c->rank() == 0) {
    // A receive nobody answers in time must fail, not hang.
    auto w = c->recv_async(late, 4, DType::F32, 1, 99);
    try {
      w->wait();
      ADD_FAILURE() << "the wait did not time out";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("receive of 4 elements from rank 1"), std::string::npos) << m;
      EXPECT_NE(m.find("timed out"), std::string::npos) << m;
    }
    // The communicator is now unusable, and says why.
    try {
      c->barrier();
      ADD_FAILURE() << "a broken communicator ran an operation";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("earlier operation failed"), std::string::npos);
    }
  }
  world().barrier();
  static float src[4] = {1, 2, 3, 4};
  if (c->rank() == 1) c->send(src, 4, DType::F32, 0, 99);  // completes the abandoned receive
  world().barrier();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Grid, CoordinatesAndGroupsAreSlicesOfTheWorld) {
  const int n = make_world_communicator()->size();
  // Every factorisation dp × tp of the job (pp = 1) and dp × pp.
  for (GridShape shape : {GridShape{n, 1, 1}, GridShape{1, 1, n}, GridShape{1, n, 1}}) {
    Grid g(make_world_communicator(), shape);
    EXPECT_EQ(g.rank_of(g.dp_rank(), g.pp_rank(), g.tp_rank()), g.rank());
    EXPECT_EQ(g.dp_group().size(), shape.dp);
    EXPECT_EQ(g.pp_group().size(), shape.pp);
    EXPECT_EQ(g.tp_group().size(), shape.tp);
    EXPECT_EQ(g.dp_group().rank(), g.dp_rank());
    EXPECT_EQ(g.tp_group().rank(), g.tp_rank());
    // The sum of world ranks over my dp group is that of the ranks sharing my pp and tp.
    double want = 0;
    for (int d = 0; d < shape.dp; d++) want += g.rank_of(d, g.pp_rank(), g.tp_rank());
    EXPECT_EQ(g.dp_group().all_reduce_scalar(g.rank()), want) << g.name();
  }
}

TEST(Grid, AShapeThatDoesNotFitTheJobSaysWhatWould) {
  const int n = make_world_communicator()->size();
  try {
    Grid g(make_world_communicator(), GridShape{n + 1, 1, 1});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("start " + std::to_string(n + 1) + " processes"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln
