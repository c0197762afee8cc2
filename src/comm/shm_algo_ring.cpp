// Ring (docs/collectives.md, "Ring all-reduce and reduce-scatter"): slices as in the direct
// reduce-scatter, in rounds of E elements per slice. Reduce-scatter, P-1 steps: in step s rank r
// adds its piece of slice r-1-s to the partial sum its left neighbour staged in step s-1 and
// stages the result (in the accumulation type); the last addition, of slice r, is rank r's.
// All-gather (all-reduce only), P-1 steps: each rank stages the finished piece it received last,
// its right neighbour copies it. Slice j is summed in the order j+1, j+2, ..., P-1, 0, ..., j.
// 2(P-1) hand-offs per round, each with one neighbour; a rank writes 2(P-1)/P of the buffer.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"

namespace kiln::detail::shm {
namespace {

class Ring : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllReduce) {
      void* buf = const_cast<void*>(op.in);
      with_type(op.t, [&](auto* tag) {
        ring<std::remove_pointer_t<decltype(tag)>>(e, buf, buf, e.even_counts(op.n), true);
      });
      return true;
    }
    if (op.coll == Coll::kReduceScatter) {
      with_type(op.t, [&](auto* tag) {
        ring<std::remove_pointer_t<decltype(tag)>>(e, op.in, op.out, *op.counts, false);
      });
      return true;
    }
    return false;
  }

 private:
  template <class T>
  static void ring(ShmEngine& e, const void* in_, void* out_, const std::vector<int64_t>& counts,
                   bool all_reduce) {
    using A = typename Num<T>::A;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    const int P = e.size(), r = e.rank(), left = (r + P - 1) % P;
    const int64_t E = e.chunk() / static_cast<int64_t>(sizeof(A)) / 16 * 16;
    const std::vector<int64_t>& offset = e.offsets_of(counts);
    const int64_t rounds = (*std::max_element(counts.begin(), counts.end()) + E - 1) / E;
    auto slice = [&](int s) { return ((r - s) % P + P) % P; };
    for (int64_t k = 0; k < rounds; k++) {
      auto first = [&](int j) { return offset[j] + k * E; };
      auto len = [&](int j) { return piece(counts[j], k, E); };
      uint64_t g = 0;
      for (int s = 0; s < P - 1; s++) {
        const int j = slice(s + 1);
        g = e.begin_step();
        const A* partial = nullptr;
        if (s > 0) {
          e.wait_all(kPosted, g - 1, left);
          partial = reinterpret_cast<const A*>(e.staging(left, g - 1));
        }
        accumulate<T>(reinterpret_cast<A*>(e.staging(r, g)), partial, in + first(j), len(j));
        e.sent(len(j) * sizeof(A));
        e.set(kPosted, g);
        if (s > 0) e.set(kDone, g - 1);
      }
      e.wait_all(kPosted, g, left);
      const A* partial = reinterpret_cast<const A*>(e.staging(left, g));
      if (!all_reduce) {
        finish<T>(out + k * E, nullptr, partial, in + first(r), len(r));
        e.set(kDone, g);
        continue;
      }
      uint64_t h = e.begin_step();
      finish<T>(out + first(r), reinterpret_cast<T*>(e.staging(r, h)), partial, in + first(r),
                len(r));
      e.sent(len(r) * sizeof(T));
      e.set(kPosted, h);
      e.set(kDone, g);
      for (int s = 1; s < P; s++) {
        const int j = slice(s);
        e.wait_all(kPosted, h, left);
        const T* got = reinterpret_cast<const T*>(e.staging(left, h));
        std::memcpy(out + first(j), got, len(j) * sizeof(T));
        if (s < P - 1) {  // pass it on
          const uint64_t next = e.begin_step();
          std::memcpy(e.staging(r, next), got, len(j) * sizeof(T));
          e.sent(len(j) * sizeof(T));
          e.set(kPosted, next);
          e.set(kDone, h);
          h = next;
        } else {
          e.set(kDone, h);
        }
      }
    }
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_ring() {
  static const Ring a;
  return a;
}

}  // namespace kiln::detail::shm
