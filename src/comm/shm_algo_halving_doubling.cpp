// Recursive halving-doubling (docs/collectives.md) over the largest power of two P2 <= P
// ranks; a rank e >= P2 first hands its data to rank e - P2 and at the end receives the result
// from it. Slices as in the direct reduce-scatter, E elements of each per round; rank b of the
// P2 "holds" slice q when q mod P2 agrees with b on the bits handled so far. Halving, distance
// d = 1, 2, ..., P2/2: b and b^d each keep the slices that agree with them on bit d and sum them
// with what the partner staged, the lower rank's partial first. Doubling (all-reduce),
// d = P2/2, ..., 1: each stages the finished slices it holds, its partner copies them. Slice q
// is summed as a balanced tree: ((x0 + x_P2) + x1) + ... pairwise, see docs. 2 log2(P2) hand-offs
// per round (plus 2 with extra ranks); never the fastest here, so "auto" does not choose it.
#include "comm/shm_algorithm.h"
#include "comm/shm_engine.h"
#include "comm/shm_kernels.h"
#include "core/error.h"

namespace kiln::detail::shm {
namespace {

// Elements of round k over all slices.
int64_t total(const std::vector<int64_t>& counts, int64_t k, int64_t E) {
  int64_t t = 0;
  for (auto c : counts) t += piece(c, k, E);
  return t;
}

class HalvingDoubling : public ShmAlgorithm {
 public:
  bool run(ShmEngine& e, const ShmOp& op) const override {
    if (op.coll == Coll::kAllReduce) {
      void* buf = const_cast<void*>(op.in);
      with_type(op.t, [&](auto* tag) {
        halving_doubling<std::remove_pointer_t<decltype(tag)>>(e, buf, buf, e.even_counts(op.n),
                                                               true);
      });
      return true;
    }
    if (op.coll == Coll::kReduceScatter) {
      with_type(op.t, [&](auto* tag) {
        halving_doubling<std::remove_pointer_t<decltype(tag)>>(e, op.in, op.out, *op.counts, false);
      });
      return true;
    }
    return false;
  }

 private:
  template <class T>
  static void halving_doubling(ShmEngine& e, const void* in_, void* out_,
                               const std::vector<int64_t>& counts, bool all_reduce) {
    using A = typename Num<T>::A;
    const T* in = static_cast<const T*>(in_);
    T* out = static_cast<T*>(out_);
    const int P = e.size(), r = e.rank();
    int P2 = 1;
    while (P2 * 2 <= P) P2 *= 2;
    const bool extra = r >= P2;
    const int b = extra ? r - P2 : r;             // rank in the power-of-two group
    const int helper = r + P2 < P ? r + P2 : -1;  // the extra rank this one stands in for
    const int64_t E = e.chunk() / (int64_t{P} * static_cast<int64_t>(sizeof(A))) / 16 * 16;
    KILN_CHECK(E > 0);
    const std::vector<int64_t>& offset = e.offsets_of(counts);
    const int64_t rounds = (*std::max_element(counts.begin(), counts.end()) + E - 1) / E;
    A* W = reinterpret_cast<A*>(e.scratch.data());  // slice q's partial at W + q * E
    for (int64_t k = 0; k < rounds; k++) {
      auto first = [&](int q) { return offset[q] + k * E; };
      auto len = [&](int q) { return piece(counts[q], k, E); };
      auto holds = [&](int q, int who, int mask) { return ((q % P2) & mask) == (who & mask); };
      if (P != P2) {  // fold the extra ranks in
        const uint64_t g = e.begin_step();
        if (extra) {
          A* st = reinterpret_cast<A*>(e.staging(r, g));
          for (int q = 0; q < P; q++) accumulate<T>(st + q * E, nullptr, in + first(q), len(q));
          e.sent(total(counts, k, E) * sizeof(A));
          e.set(kPosted, g);
        } else {
          e.set(kPosted, g);
          for (int q = 0; q < P; q++) accumulate<T>(W + q * E, nullptr, in + first(q), len(q));
          if (helper >= 0) {
            e.wait_all(kPosted, g, helper);
            const A* got = reinterpret_cast<const A*>(e.staging(helper, g));
            for (int q = 0; q < P; q++) combine(W + q * E, W + q * E, got + q * E, len(q));
          }
        }
        e.set(kDone, g);
      } else {
        for (int q = 0; q < P; q++) accumulate<T>(W + q * E, nullptr, in + first(q), len(q));
      }
      int mask = 0;
      for (int d = 1; d < P2; d *= 2) {  // halving
        const uint64_t g = e.begin_step();
        if (!extra) {
          const int partner = b ^ d;
          A* st = reinterpret_cast<A*>(e.staging(r, g));
          int64_t staged = 0;
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask) && holds(q, partner, mask | d)) {
              std::memcpy(st + q * E, W + q * E, len(q) * sizeof(A));
              staged += len(q);
            }
          e.sent(staged * sizeof(A));
          e.set(kPosted, g);
          e.wait_all(kPosted, g, partner);
          const A* got = reinterpret_cast<const A*>(e.staging(partner, g));
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask | d)) {
              if (b < partner)
                combine(W + q * E, W + q * E, got + q * E, len(q));
              else
                combine(W + q * E, got + q * E, W + q * E, len(q));
            }
        } else {
          e.set(kPosted, g);
        }
        e.set(kDone, g);
        mask |= d;
      }
      // Rank b now holds the sums of slices b and b + P2.
      if (!all_reduce) {
        if (!extra) round_copy<T>(out + k * E, W + b * E, len(b));
        if (P != P2) {
          const uint64_t g = e.begin_step();
          if (helper >= 0) {
            round_copy<T>(reinterpret_cast<T*>(e.staging(r, g)), W + helper * E, len(helper));
            e.sent(len(helper) * sizeof(T));
          }
          e.set(kPosted, g);
          if (extra) {
            e.wait_all(kPosted, g, b);
            std::memcpy(out + k * E, e.staging(b, g), len(r) * sizeof(T));
          }
          e.set(kDone, g);
        }
        continue;
      }
      if (!extra)
        for (int q = 0; q < P; q++)
          if (holds(q, b, mask)) round_copy<T>(out + first(q), W + q * E, len(q));
      for (int d = P2 / 2; d >= 1; d /= 2) {  // doubling
        const uint64_t g = e.begin_step();
        if (!extra) {
          const int partner = b ^ d;
          T* st = reinterpret_cast<T*>(e.staging(r, g));
          int64_t staged = 0;
          for (int q = 0; q < P; q++)
            if (holds(q, b, mask)) {
              std::memcpy(st + q * E, out + first(q), len(q) * sizeof(T));
              staged += len(q);
            }
          e.sent(staged * sizeof(T));
          e.set(kPosted, g);
          e.wait_all(kPosted, g, partner);
          const T* got = reinterpret_cast<const T*>(e.staging(partner, g));
          for (int q = 0; q < P; q++)
            if (holds(q, partner, mask))
              std::memcpy(out + first(q), got + q * E, len(q) * sizeof(T));
        } else {
          e.set(kPosted, g);
        }
        e.set(kDone, g);
        mask &= ~d;
      }
      if (P != P2) {  // hand the result to the extra ranks
        const uint64_t g = e.begin_step();
        if (helper >= 0) {
          T* st = reinterpret_cast<T*>(e.staging(r, g));
          for (int q = 0; q < P; q++) std::memcpy(st + q * E, out + first(q), len(q) * sizeof(T));
          e.sent(total(counts, k, E) * sizeof(T));
        }
        e.set(kPosted, g);
        if (extra) {
          e.wait_all(kPosted, g, b);
          const T* got = reinterpret_cast<const T*>(e.staging(b, g));
          for (int q = 0; q < P; q++) std::memcpy(out + first(q), got + q * E, len(q) * sizeof(T));
        }
        e.set(kDone, g);
      }
    }
  }
};

}  // namespace

const ShmAlgorithm& shm_algo_halving_doubling() {
  static const HalvingDoubling a;
  return a;
}

}  // namespace kiln::detail::shm
