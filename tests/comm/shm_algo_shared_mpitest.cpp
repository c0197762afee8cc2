// The shared-buffer algorithm of the shared-memory engine (src/comm/shm_algo_shared.cpp),
// forced by name: all-reduces and reduce-scatters of alloc_shared buffers read the peers'
// buffers in place at every size (rank order, fp32; a rank writes only its slice's sums), and
// with a plain buffer it declines on every rank alike and the tuner's staged choice runs.
// (shm_algorithms_mpitest.cpp's ShmShared tests reach it through "auto".)
#include <gtest/gtest.h>

#include "comm/shm_algorithm_check.h"

namespace kiln {
namespace {

using namespace test;

Communicator& forced_shared() {
  static std::unique_ptr<Communicator> c = [] {
    CommOptions o;
    o.timeout_seconds = 60;
    o.backend = "shm";
    o.algorithm = "shared";
    o.shm.chunk_bytes = 4096;  // many chunks per slice
    o.shm.slots = 2;
    return make_world_communicator(o);
  }();
  return *c;
}

TEST(ShmAlgorithms, SharedReadsSharedBuffersInPlaceAtEverySize) {
  Communicator& c = forced_shared();
  const int P = c.size(), me = c.rank();
  std::vector<int64_t> ns = sizes();
  ns.push_back(300007);
  auto mem = c.alloc_shared((300007 + 64) * sizeof(float));
  float* f = static_cast<float*>(mem->data()) + 3 * me;
  int salt = 0;
  for (int64_t n : ns) {
    const std::vector<int> owner = owners(even_counts(n, P));
    for (int64_t i = 0; i < n; i++) f[i] = value(me, i);
    f[n] = -5.0f;
    const int64_t before = c.bytes_sent();
    c.all_reduce(f, n, DType::F32);
    EXPECT_EQ(c.bytes_sent() - before, even_counts(n, P)[me] * 4) << "n=" << n;
    for (int64_t i = 0; i < n; i++)
      ASSERT_EQ(f[i], reference("direct", P, owner[i], i)) << "n=" << n << " i=" << i;
    ASSERT_EQ(f[n], -5.0f) << "wrote past the buffer, n=" << n;

    const std::vector<int64_t> counts = uneven_counts(n, P, salt++);
    const int64_t off = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
    for (int64_t i = 0; i < n; i++) f[i] = value(me, i);
    std::vector<float> out(counts[me] + 1, -7.0f);
    const int64_t before_rs = c.bytes_sent();
    c.reduce_scatter(f, out.data(), counts, DType::F32);
    EXPECT_EQ(c.bytes_sent(), before_rs) << "n=" << n;  // nothing staged
    for (int64_t i = 0; i < counts[me]; i++)
      ASSERT_EQ(out[i], reference("direct", P, me, off + i)) << "n=" << n << " i=" << i;
    ASSERT_EQ(out[counts[me]], -7.0f) << "wrote past its slice, n=" << n;
  }
}

TEST(ShmAlgorithms, SharedDeclinesAPlainBufferAndTheStagedChoiceRuns) {
  Communicator& c = forced_shared();
  (void)c.alloc_shared(4096);  // shared buffers are in play, but this one is not among them
  const int P = c.size(), me = c.rank();
  const int64_t n = 5000;  // direct (rank order) when staged
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; i++) x[i] = value(me, i);
  const int64_t before = c.bytes_sent();
  c.all_reduce(x.data(), n, DType::F32);
  EXPECT_EQ(c.bytes_sent() - before, n * 4);  // direct: (P-1)/P n staged, n/P result
  const std::vector<int> owner = owners(even_counts(n, P));
  for (int64_t i = 0; i < n; i++) ASSERT_EQ(x[i], reference("direct", P, owner[i], i)) << i;
}

}  // namespace
}  // namespace kiln
