// Shared buffers (docs/collectives.md, "Shared buffers: the all-reduce in place"): when every
// rank's buffer lies in alloc_shared memory that every rank maps, nothing is staged. All-reduce:
// a chunk of E elements of each slice at a time, the owner of slice q sums it from every rank's
// buffer, rank order, into its own buffer and counts the chunk (kChunk); one chunk behind, every
// rank copies the finished chunks of the other slices from their owners' buffers. A rank writes
// its slice's sums only (S/P bytes). Reduce-scatter: each rank sums its slice straight from
// every rank's input into its output, writing nothing for the peers. Both start with two steps
// that agree whether every buffer is shared; if not, the algorithm declines (the staged ones run)
// and end with every rank's done, so that nobody reads a buffer after its owner returns.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"
#include "comm/shm_shared.h"

namespace kiln::detail::shm {
namespace {

class Shared : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllReduce)
      return shared_all_reduce(e, const_cast<void*>(op.in), op.n, op.t);
    if (op.coll == Coll::kReduceScatter)
      return shared_reduce_scatter(e, op.in, op.out, *op.counts, op.t);
    return false;
  }

 private:
  // Two steps that decide, alike on every rank, whether every rank's [buf, buf + bytes) lies in
  // shared memory that every rank can read. On yes it returns the step to finish with (done,
  // then wait for every rank's done) and e.shared_src[q] is rank q's buffer; on no, 0.
  static uint64_t agree_shared(ShmEngine& e, const void* buf, int64_t bytes) {
    const int rank = e.rank(), size = e.size();
    SharedRegistry& reg = SharedRegistry::instance();
    uint32_t id = 0;
    int64_t offset = 0;
    const bool mine = reg.find_own(buf, bytes, &id, &offset) && offset < (int64_t{1} << 40);
    uint64_t g = e.begin_step();
    e.counter(rank, kShared)
        .store(mine ? (uint64_t{id} << 40) | static_cast<uint64_t>(offset) : 0,
               std::memory_order_relaxed);
    e.set(kPosted, g);
    e.wait_all(kPosted, g);
    std::vector<const void*>& base = e.shared_src;
    base.assign(size, nullptr);
    bool readable = mine;
    for (int q = 0; q < size && readable; q++) {
      const uint64_t v = e.counter(q, kShared).load(std::memory_order_relaxed);
      base[q] = q == rank ? buf
                : v == 0
                    ? nullptr
                    : reg.find_peer(
                          static_cast<pid_t>(e.counter(q, kPid).load(std::memory_order_relaxed)),
                          static_cast<uint32_t>(v >> 40),
                          static_cast<int64_t>(v & ((uint64_t{1} << 40) - 1)), bytes);
      readable = base[q] != nullptr;
    }
    e.set(kDone, g);
    g = e.begin_step();
    e.counter(rank, kSharedOk).store(readable ? 1 : 0, std::memory_order_relaxed);
    e.set(kPosted, g);
    e.wait_all(kPosted, g);
    bool all = true;
    for (int q = 0; q < size; q++)
      all = all && e.counter(q, kSharedOk).load(std::memory_order_relaxed) == 1;
    if (!all) {
      e.set(kDone, g);
      return 0;
    }
    return g;
  }

  static bool shared_reduce_scatter(ShmEngine& e, const void* in, void* out,
                                    const std::vector<int64_t>& counts, DType t) {
    const int rank = e.rank(), size = e.size();
    const int64_t es = dtype_bytes(t);
    const uint64_t g = agree_shared(e, in, ShmEngine::total(counts) * es);
    if (g == 0) return false;
    std::vector<const void*>& src = e.src;
    int64_t offset = 0;
    for (int q = 0; q < rank; q++) offset += counts[q];
    const int64_t E = e.chunk() / es;
    for (int64_t k = 0; k < counts[rank]; k += E) {
      for (int q = 0; q < size; q++)
        src[q] = static_cast<const char*>(e.shared_src[q]) + (offset + k) * es;
      reduce(t, at(out, k, es), nullptr, src.data(), size, std::min(E, counts[rank] - k));
    }
    e.set(kDone, g);
    e.wait_all(kDone, g);
    return true;
  }

  static bool shared_all_reduce(ShmEngine& e, void* buf, int64_t n, DType t) {
    const int64_t es = dtype_bytes(t);
    const uint64_t g = agree_shared(e, buf, n * es);
    if (g == 0) return false;
    const std::vector<const void*>& base = e.shared_src;
    std::vector<const void*>& src = e.src;
    const int64_t P = e.size(), r = e.rank();
    auto first = [&](int64_t q) { return q * (n / P) + std::min(q, n % P); };
    auto count = [&](int64_t q) { return n / P + (q < n % P ? 1 : 0); };
    const int64_t E = e.chunk() / es, rounds = (count(0) + E - 1) / E;
    const uint64_t seq = e.chunk_seq;
    auto gather = [&](int64_t k) {
      for (int64_t i = 1; i < P; i++) {
        const int q = static_cast<int>((r + i) % P);
        const int64_t m = piece(count(q), k, E);
        e.wait_all(kChunk, seq + k + 1, q);
        if (m > 0) {
          const int64_t f = first(q) + k * E;
          std::memcpy(at(buf, f, es), static_cast<const char*>(base[q]) + f * es, m * es);
        }
      }
    };
    for (int64_t k = 0; k < rounds; k++) {
      const int64_t m = piece(count(r), k, E);
      if (m > 0) {
        const int64_t f = first(r) + k * E;
        for (int q = 0; q < P; q++) src[q] = static_cast<const char*>(base[q]) + f * es;
        reduce(t, at(buf, f, es), nullptr, src.data(), static_cast<int>(P), m);
      }
      e.counter(static_cast<int>(r), kChunk).store(seq + k + 1, std::memory_order_release);
      if (k > 0) gather(k - 1);
    }
    gather(rounds - 1);
    e.chunk_seq += static_cast<uint64_t>(rounds);
    // Written for the peers: this slice's sums (they read their inputs where the user put them).
    e.sent(count(r) * es);
    e.set(kDone, g);
    e.wait_all(kDone, g);
    return true;
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_shared() {
  static const Shared a;
  return a;
}

}  // namespace kiln::detail::shm
