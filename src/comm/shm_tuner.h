// The shared-memory engine's tuner (docs/collectives.md, "The tuner"): which algorithm runs an
// operation, by the operation, its size, the rank count and what the engine found at start-up
// (cores, the right to read peers' memory), or the one comm.algorithm names. The table of every
// algorithm, by name, is comm/shm_algorithms.inc.
#pragma once
#include <set>
#include <string>
#include <tuple>

#include "comm/shm_algorithm.h"

namespace kiln::detail::shm {

class ShmTuner {
 public:
  // name: "auto" or an algorithm of the table (comm.algorithm; tests may also
  // name the ones comm.algorithm does not list: "shared", "lines", "staged", "cma"). An
  // algorithm named for an operation it does not implement leaves that operation to "auto".
  explicit ShmTuner(const std::string& name);
  // Runs op with the algorithm chosen for it (and its fallback if that one declines).
  void run(ShmEngine& e, const ShmOp& op);

 private:
  const ShmAlgorithm* forced(Coll c) const;  // the named algorithm, if it implements c
  const ShmAlgorithm& choose_all_reduce(const ShmEngine& e, int64_t bytes) const;
  const ShmAlgorithm& choose_reduce_scatter(const ShmEngine& e, int64_t bytes) const;
  bool shared_first(const ShmEngine& e, const ShmOp& op) const;
  bool try_run(const ShmAlgorithm& a, ShmEngine& e, const ShmOp& op);

  int forced_ = -1;     // index in the table; -1: auto
  bool debug_ = false;  // KILN_SHM_DEBUG: report each distinct choice on stderr
  std::set<std::tuple<int, int64_t, const ShmAlgorithm*, bool>> reported_;
};

}  // namespace kiln::detail::shm
