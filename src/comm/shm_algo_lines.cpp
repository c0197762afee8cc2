// Lines (docs/collectives.md, "All-gather" and "Broadcast", small): the data travels in the
// ranks' 64-byte lines with its step tag (at most 448 bytes a rank), so a peer that sees the tag
// has the data in the same cache-line transfer. All-gather: every rank posts its slice, every
// rank reads the others'; broadcast: the root posts, the others read. One step, on the lines'
// own ring of 32 (a root can run that far ahead). Larger operations are declined.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"

namespace kiln::detail::shm {
namespace {

class Lines : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    const int64_t es = dtype_bytes(op.t);
    if (op.coll == Coll::kAllGather &&
        *std::max_element(op.counts->begin(), op.counts->end()) * es <= kInlineBytes) {
      all_gather(e, const_cast<void*>(op.in), *op.counts, op.t);
      return true;
    }
    if (op.coll == Coll::kBroadcast && op.bytes() <= kInlineBytes) {
      broadcast(e, const_cast<void*>(op.in), op.n, op.t, op.root);
      return true;
    }
    return false;
  }

 private:
  static void all_gather(ShmEngine& e, void* buf, const std::vector<int64_t>& counts, DType t) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const uint64_t g = e.begin_step(kInlineSlots);
    int64_t offset = 0;
    for (int r = 0; r < rank; r++) offset += counts[r];
    e.post_inline(g, at(buf, offset, es), counts[rank] * es);
    offset = 0;
    for (int r = 0; r < size; r++) {
      if (r != rank) {
        e.wait_inline(g, counts[r] * es, r);
        e.read_inline(r, g, at(buf, offset, es), counts[r] * es);
      }
      offset += counts[r];
    }
    e.set(kDone, g);
  }

  static void broadcast(ShmEngine& e, void* buf, int64_t n, DType t, int root) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = e.begin_step(kInlineSlots);
    if (e.rank() == root) {
      e.post_inline(g, buf, n * es);
    } else {
      e.wait_inline(g, n * es, root);
      e.read_inline(root, g, buf, n * es);
    }
    e.set(kDone, g);
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_lines() {
  static const Lines a;
  return a;
}

}  // namespace kiln::detail::shm
