// Staged copies (docs/collectives.md, "All-gather" and "Broadcast"): a chunk per step through
// the staging slots. All-gather in place: every rank stages a chunk of its slice, every rank
// copies the others' chunks into place (one hand-off per step; a rank writes its slice).
// Broadcast: the root stages a chunk, the others copy it (a rank that is not the root writes
// nothing). Any size; the fallback of the direct copies (shm_algo_cma.cpp).
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"

namespace kiln::detail::shm {
namespace {

class Staged : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllGather) {
      all_gather_chunks(e, const_cast<void*>(op.in), *op.counts, op.t);
      return true;
    }
    if (op.coll == Coll::kBroadcast) {
      broadcast_chunks(e, const_cast<void*>(op.in), op.n, op.t, op.root);
      return true;
    }
    return false;
  }

 private:
  static void all_gather_chunks(ShmEngine& e, void* buf, const std::vector<int64_t>& counts,
                                DType t) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const int64_t E = e.chunk() / es;
    const std::vector<int64_t>& offset = e.offsets_of(counts);
    const int64_t longest = *std::max_element(counts.begin(), counts.end());
    const int64_t steps = (longest + E - 1) / E;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = e.begin_step();
      std::memcpy(e.staging(rank, g), at(buf, offset[rank] + k * E, es),
                  piece(counts[rank], k, E) * es);
      e.sent(piece(counts[rank], k, E) * es);
      e.set(kPosted, g);
      e.wait_all(kPosted, g);
      for (int r = 0; r < size; r++)
        if (r != rank)
          std::memcpy(at(buf, offset[r] + k * E, es), e.staging(r, g), piece(counts[r], k, E) * es);
      e.set(kDone, g);
    }
  }

  static void broadcast_chunks(ShmEngine& e, void* buf, int64_t n, DType t, int root) {
    const int64_t es = dtype_bytes(t);
    const int64_t E = e.chunk() / es;
    const int64_t steps = (n + E - 1) / E;
    for (int64_t k = 0; k < steps; k++) {
      const uint64_t g = e.begin_step();
      const int64_t m = piece(n, k, E);
      if (e.rank() == root) {
        std::memcpy(e.staging(root, g), at(buf, k * E, es), m * es);
        e.sent(m * es);
        e.set(kPosted, g);
      } else {
        e.wait_all(kPosted, g, root);
        std::memcpy(at(buf, k * E, es), e.staging(root, g), m * es);
      }
      e.set(kDone, g);
    }
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_staged() {
  static const Staged a;
  return a;
}

}  // namespace kiln::detail::shm
