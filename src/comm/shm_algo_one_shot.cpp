// One-shot (docs/collectives.md, "One-shot all-reduce"): every rank stages its whole buffer (a
// chunk at a time when it is larger; up to shm.inline_bytes in its lines), then every rank sums
// all of them in rank order. One hand-off per chunk; each rank writes the whole buffer, S bytes.
// Its reduce-scatter is the same in the lines (each rank sums only its slice); above the lines
// it declines and the direct one runs.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"

namespace kiln::detail::shm {
namespace {

class OneShot : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllReduce) {
      all_reduce(e, const_cast<void*>(op.in), op.n, op.t);
      return true;
    }
    if (op.coll == Coll::kReduceScatter && e.inline_fits(op.n, op.t)) {
      inline_reduce_scatter(e, op.in, op.out, *op.counts, op.t);
      return true;
    }
    return false;
  }

 private:
  static void all_reduce(ShmEngine& e, void* buf, int64_t n, DType t) {
    const int64_t es = dtype_bytes(t);
    const int rank = e.rank(), size = e.size();
    std::vector<const void*>& src = e.src;
    if (e.inline_fits(n, t)) {
      const uint64_t g = e.begin_step(kInlineSlots);
      e.post_inline(g, buf, n * es);
      e.wait_inline(g, n * es);
      char* copies = reinterpret_cast<char*>(e.scratch.data());
      for (int q = 0; q < size; q++) {
        if (q != rank) e.read_inline(q, g, copies + q * kInlineBytes, n * es);
        src[q] = q == rank ? buf : copies + q * kInlineBytes;
      }
      reduce(t, buf, nullptr, src.data(), size, n);
      e.set(kDone, g);
      return;
    }
    const int64_t E = e.chunk() / es;
    for (int64_t k = 0; k * E < n; k++) {
      const int64_t m = std::min(E, n - k * E);
      const uint64_t g = e.begin_step();
      std::memcpy(e.staging(rank, g), at(buf, k * E, es), m * es);
      e.sent(m * es);
      e.set(kPosted, g);
      e.wait_all(kPosted, g);
      for (int q = 0; q < size; q++) src[q] = e.staging(q, g);
      reduce(t, at(buf, k * E, es), nullptr, src.data(), size, m);
      e.set(kDone, g);
    }
  }

  // A small reduce-scatter: every rank posts its whole input in its lines, each sums its slice
  // from all of them in rank order (the direct algorithm's order).
  static void inline_reduce_scatter(ShmEngine& e, const void* in, void* out,
                                    const std::vector<int64_t>& counts, DType t) {
    const int64_t es = dtype_bytes(t), n = ShmEngine::total(counts);
    const int rank = e.rank(), size = e.size();
    std::vector<const void*>& src = e.src;
    int64_t offset = 0;
    for (int r = 0; r < rank; r++) offset += counts[r];
    const uint64_t g = e.begin_step(kInlineSlots);
    e.post_inline(g, in, n * es);
    e.wait_inline(g, n * es);
    char* copies = reinterpret_cast<char*>(e.scratch.data());
    for (int q = 0; q < size; q++) {
      if (q != rank) e.read_inline(q, g, copies + q * kInlineBytes, n * es);
      src[q] = q == rank ? static_cast<const char*>(in) + offset * es
                         : copies + q * kInlineBytes + offset * es;
    }
    reduce(t, out, nullptr, src.data(), size, counts[rank]);
    e.set(kDone, g);
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_one_shot() {
  static const OneShot a;
  return a;
}

}  // namespace kiln::detail::shm
