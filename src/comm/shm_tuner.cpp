// The shared-memory engine's tuner and its table of algorithms (shm_algorithm.h says how to add
// one). The thresholds are measured (ShmOptions, `kiln bench comm --algorithm all`), not derived
// from the cost formulas: through shared memory time follows hand-offs and memory traffic.
#include "comm/shm_tuner.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/shm_engine.h"
#include "core/error.h"

namespace kiln::detail::shm {

// Each algorithm's one instance (comm/shm_algo_<name>.cpp).
#define SHM_ALGORITHM(name, colls, configured) const ShmAlgorithm& shm_algo_##name();
#include "comm/shm_algorithms.inc"
#undef SHM_ALGORITHM

namespace {

constexpr unsigned kAR = 1u << static_cast<int>(Coll::kAllReduce);
constexpr unsigned kRS = 1u << static_cast<int>(Coll::kReduceScatter);
constexpr unsigned kAG = 1u << static_cast<int>(Coll::kAllGather);
constexpr unsigned kBC = 1u << static_cast<int>(Coll::kBroadcast);

struct Entry {
  const char* name;
  const ShmAlgorithm& (*get)();
  unsigned colls;   // the collectives it implements
  bool configured;  // comm.algorithm may name it
};

// Every algorithm of the engine (comm/shm_algorithms.inc).
const Entry kAlgorithms[] = {
#define SHM_ALGORITHM(name, colls, configured) {#name, shm_algo_##name, colls, configured},
#include "comm/shm_algorithms.inc"
#undef SHM_ALGORITHM
};

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kAllReduce:
      return "all_reduce";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllGather:
      return "all_gather";
    case Coll::kBroadcast:
      return "broadcast";
  }
  return "?";
}

const char* name_of(const ShmAlgorithm& a) {
  for (const Entry& x : kAlgorithms)
    if (&x.get() == &a) return x.name;
  return "?";
}

}  // namespace

ShmTuner::ShmTuner(const std::string& name) : debug_(std::getenv("KILN_SHM_DEBUG") != nullptr) {
  if (name == "auto") return;
  for (size_t i = 0; i < std::size(kAlgorithms); i++)
    if (name == kAlgorithms[i].name) forced_ = static_cast<int>(i);
  if (forced_ < 0) fail("comm.algorithm must be {}, got '{}'", kShmAlgorithmChoices, name);
}

const ShmAlgorithm* ShmTuner::forced(Coll c) const {
  if (forced_ < 0 || !(kAlgorithms[forced_].colls & (1u << static_cast<int>(c)))) return nullptr;
  return &kAlgorithms[forced_].get();
}

// All-reduce: one-shot for small buffers, the ring for large ones on the rank counts where it
// was measured faster (its larger steps need fewer synchronisations than direct's), direct
// between. Halving-doubling was never the fastest here, so auto does not choose it.
const ShmAlgorithm& ShmTuner::choose_all_reduce(const ShmEngine& e, int64_t bytes) const {
  if (const ShmAlgorithm* a = forced(Coll::kAllReduce); a && a != &shm_algo_shared()) return *a;
  const ShmOptions& o = e.options().shm;
  if (bytes <= std::min(o.one_shot_bytes, e.chunk())) return shm_algo_one_shot();
  // With more ranks than cores each of the ring's 2(P-1) hand-offs per round may wait for a
  // descheduled peer; for large buffers its timings then scattered 3-fold between runs, while
  // direct's (2 hand-offs) held.
  if (e.size() <= o.ring_max_ranks && bytes >= o.ring_bytes &&
      (!e.oversubscribed() || bytes < o.ring_oversubscribed_below))
    return shm_algo_ring();
  return shm_algo_direct();
}

// Reduce-scatter (bytes: the whole input): one-shot in the lines up to shm.inline_bytes,
// direct, or the ring from its own threshold.
const ShmAlgorithm& ShmTuner::choose_reduce_scatter(const ShmEngine& e, int64_t bytes) const {
  if (const ShmAlgorithm* a = forced(Coll::kReduceScatter); a && a != &shm_algo_shared()) return *a;
  const ShmOptions& o = e.options().shm;
  if (bytes <= e.inline_max()) return shm_algo_one_shot();
  return e.size() <= o.ring_max_ranks && bytes >= o.ring_scatter_bytes ? shm_algo_ring()
                                                                       : shm_algo_direct();
}

// Buffers in alloc_shared memory are read in place (from shm.shared_bytes, below
// shm.shared_below) when alloc_shared had succeeded as the operation was issued.
bool ShmTuner::shared_first(const ShmEngine& e, const ShmOp& op) const {
  if (e.size() <= 1 || !op.shared) return false;
  if (const ShmAlgorithm* a = forced(op.coll)) return a == &shm_algo_shared();
  const ShmOptions& o = e.options().shm;
  return op.bytes() >= o.shared_bytes && op.bytes() < o.shared_below;
}

bool ShmTuner::try_run(const ShmAlgorithm& a, ShmEngine& e, const ShmOp& op) {
  const bool ran = a.run(e, op);
  if (debug_ && reported_.insert({static_cast<int>(op.coll), op.bytes(), &a, ran}).second)
    std::fprintf(stderr, "shm: rank %d: %s of %lld bytes: %s%s\n", e.rank(), coll_name(op.coll),
                 static_cast<long long>(op.bytes()), name_of(a), ran ? "" : " declined");
  return ran;
}

void ShmTuner::run(ShmEngine& e, const ShmOp& op) {
  const int64_t bytes = op.bytes();
  switch (op.coll) {
    case Coll::kAllReduce:
      if (op.n == 0) return;
      if (shared_first(e, op) && try_run(shm_algo_shared(), e, op)) return;
      try_run(e.size() == 1 ? shm_algo_direct() : choose_all_reduce(e, bytes), e, op);
      return;
    case Coll::kReduceScatter:
      if (shared_first(e, op) && try_run(shm_algo_shared(), e, op)) return;
      // One-shot declines above the lines: the direct reduce-scatter runs.
      if (!try_run(e.size() == 1 ? shm_algo_direct() : choose_reduce_scatter(e, bytes), e, op))
        try_run(shm_algo_direct(), e, op);
      return;
    case Coll::kAllGather:
    case Coll::kBroadcast: {
      if (const ShmAlgorithm* a = forced(op.coll); a && try_run(*a, e, op)) return;
      const ShmOptions& o = e.options().shm;
      // Where direct copies start: with every rank on a core of its own one copy through the
      // kernel wins from shm.direct_cores_bytes; with more ranks than cores the staged copies
      // win up to shm.direct_bytes (measured, docs/collectives.md).
      const int64_t direct_from =
          e.oversubscribed() ? o.direct_bytes : std::min(o.direct_bytes, o.direct_cores_bytes);
      if (op.coll == Coll::kAllGather) {
        const int64_t es = dtype_bytes(op.t);
        const int64_t largest = *std::max_element(op.counts->begin(), op.counts->end()) * es;
        if (largest <= e.inline_max() && try_run(shm_algo_lines(), e, op)) return;
        if (e.direct_ok() && bytes >= direct_from && try_run(shm_algo_cma(), e, op)) return;
      } else {
        // Small: the root's lines. With more ranks than cores up to their 448 bytes, so that
        // the root can run ahead of peers that are not running; otherwise as the other ops.
        if (bytes <= (e.oversubscribed() ? kInlineBytes : e.inline_max()) &&
            try_run(shm_algo_lines(), e, op))
          return;
        if (e.direct_ok() && bytes >= std::min(direct_from, o.direct_broadcast_bytes) &&
            try_run(shm_algo_cma(), e, op))
          return;
      }
      try_run(shm_algo_staged(), e, op);
      return;
    }
  }
}

}  // namespace kiln::detail::shm
