// Direct (docs/collectives.md, "Direct reduce-scatter" and "Direct all-reduce"): in step k,
// owner r's piece is elements [k*E, (k+1)*E) of its slice. Every rank stages the pieces the
// others own; each owner sums its piece from every rank's staging (its own straight from `in`)
// in rank order into `out`. For an all-reduce (in == out, even counts) the owner also writes its
// sum to the step's result chunk and every rank copies the others' sums from there. Two
// hand-offs per step; a rank writes (P-1)/P of the buffer, plus its slice's sums when gathering.
// Any counts, including 0; the fallback of the others.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"
#include "core/error.h"

namespace kiln::detail::shm {
namespace {

class Direct : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllReduce) {
      void* buf = const_cast<void*>(op.in);
      reduce_scatter_chunks(e, buf, buf, e.even_counts(op.n), op.t, /*gather=*/true);
      return true;
    }
    if (op.coll == Coll::kReduceScatter) {
      reduce_scatter_chunks(e, op.in, op.out, *op.counts, op.t, /*gather=*/false);
      return true;
    }
    return false;
  }

 private:
  static void reduce_scatter_chunks(ShmEngine& e, const void* in, void* out,
                                    const std::vector<int64_t>& counts, DType t, bool gather) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const int64_t E = e.chunk() / (int64_t{size} * es) / 16 * 16;  // elements per owner per step
    KILN_CHECK(E > 0);
    const std::vector<int64_t>& offset = e.offsets_of(counts);
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    const int64_t steps = (longest + E - 1) / E;
    std::vector<const void*>& src = e.src;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = e.begin_step();
      char* mine = e.staging(rank, g);
      for (int r = 0; r < size; r++)
        if (r != rank) {
          std::memcpy(mine + r * E * es, at(const_cast<void*>(in), offset[r] + k * E, es),
                      piece(counts[r], k, E) * es);
          e.sent(piece(counts[r], k, E) * es);
        }
      e.set(kPosted, g);
      e.wait_all(kPosted, g);
      for (int q = 0; q < size; q++)
        src[q] = q == rank ? at(const_cast<void*>(in), offset[rank] + k * E, es)
                           : e.staging(q, g) + rank * E * es;
      const int64_t m = piece(counts[rank], k, E);
      if (gather) {
        reduce(t, at(out, offset[rank] + k * E, es), e.result(g) + rank * E * es, src.data(), size,
               m);
        e.sent(m * es);
        e.set(kReduced, g);
        e.wait_all(kReduced, g);
        for (int r = 0; r < size; r++)
          if (r != rank)
            std::memcpy(at(out, offset[r] + k * E, es), e.result(g) + r * E * es,
                        piece(counts[r], k, E) * es);
      } else {
        reduce(t, at(out, k * E, es), nullptr, src.data(), size, m);
      }
      e.set(kDone, g);
    }
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_direct() {
  static const Direct a;
  return a;
}

}  // namespace kiln::detail::shm
