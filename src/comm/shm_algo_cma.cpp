// Direct copies between processes, "cross-memory attach" as MPI calls it (docs/collectives.md,
// "All-gather" and "Broadcast", large): each rank reads what it needs straight from the peers'
// buffers with process_vm_readv, one copy instead of the staged two, in one step. Needs the
// right to trace the peers, found out once at start-up (ShmEngine::direct_ok); without it the
// algorithm declines and the staged copies run. A rank writes nothing for its peers.
#include <unistd.h>

#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"

namespace kiln::detail::shm {
namespace {

class Cma : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (!e.direct_ok()) return false;
    if (op.coll == Coll::kAllGather) {
      all_gather(e, const_cast<void*>(op.in), *op.counts, op.t);
      return true;
    }
    if (op.coll == Coll::kBroadcast) {
      broadcast(e, const_cast<void*>(op.in), op.n, op.t, op.root);
      return true;
    }
    return false;
  }

 private:
  // Every rank publishes its buffer's address, then reads the others' slices straight from
  // their buffers into its own, then waits until nobody reads its buffer any more.
  static void all_gather(ShmEngine& e, void* buf, const std::vector<int64_t>& counts, DType t) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const uint64_t g = e.begin_step();
    e.counter(rank, kAddr).store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
    e.counter(rank, kPid).store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
    e.set(kPosted, g);
    e.wait_all(kPosted, g);
    const std::vector<int64_t>& offset = e.offsets_of(counts);
    // Rank q reads q+1, q+2, ...: at any time each buffer has one reader, so the readers do
    // not contend for the same process's page tables.
    for (int i = 1; i < size; i++) {
      const int r = (rank + i) % size;
      if (counts[r] > 0)
        e.direct_read(r, at(buf, offset[r], es),
                      e.counter(r, kAddr).load(std::memory_order_relaxed) + offset[r] * es,
                      counts[r] * es);
    }
    e.set(kDone, g);
    e.wait_all(kDone, g);
  }

  // Every other rank reads the root's buffer directly.
  static void broadcast(ShmEngine& e, void* buf, int64_t n, DType t, int root) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const uint64_t g = e.begin_step();
    if (rank == root) {
      e.counter(rank, kAddr).store(reinterpret_cast<uint64_t>(buf), std::memory_order_relaxed);
      e.counter(rank, kPid).store(static_cast<uint64_t>(getpid()), std::memory_order_relaxed);
      e.set(kPosted, g);
    } else {
      e.wait_all(kPosted, g, root);
      // Reader j of the P-1 starts at part j and wraps around: at any time they read different
      // parts of the root's buffer (as the all-gather's rotated order). Parts of at least
      // 256 KiB: each is a system call.
      const uint64_t from = e.counter(root, kAddr).load(std::memory_order_relaxed);
      const int parts = static_cast<int>(
          std::clamp<int64_t>(n * es / (256 << 10), 1, static_cast<int64_t>(size - 1)));
      const int j = (rank - root + size) % size - 1;
      for (int i = 0; i < parts; i++) {
        const int part = (j + i) % parts;
        const int64_t lo = n * part / parts, hi = n * (part + 1) / parts;
        if (hi > lo) e.direct_read(root, at(buf, lo, es), from + lo * es, (hi - lo) * es);
      }
    }
    e.set(kDone, g);
    if (rank == root) e.wait_all(kDone, g);
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_cma() {
  static const Cma a;
  return a;
}

}  // namespace kiln::detail::shm
