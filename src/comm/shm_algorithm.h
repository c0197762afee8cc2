// One collective algorithm of the shared-memory engine, behind a small interface (gloo's shape:
// an algorithm only moves data; the engine core, comm/shm_engine.h, holds the window, the steps
// and the waiting, and comm/shm_tuner.cpp decides which algorithm runs an operation).
//
// Each algorithm lives in its own file, comm/shm_algo_<name>.cpp, with its cost (steps, bytes
// written for the peers, summation order) in the comment at its top and in docs/collectives.md.
//
// Adding an algorithm:
//   1. src/comm/shm_algo_<name>.cpp: a class deriving from ShmAlgorithm (run() moves the data
//      of the collectives it supports, with the engine's steps: begin_step, staging, set,
//      wait_all; it sums with comm/shm_kernels.h in a fixed order) and a function
//      `const ShmAlgorithm& shm_algo_<name>()` returning its one instance.
//   2. Its line in the tuner's table, comm/shm_algorithms.inc (the collectives it implements,
//      whether comm.algorithm may name it); and, if "auto" should choose it, its rule in
//      ShmTuner::run (comm/shm_tuner.cpp).
//   3. Its test: tests/comm/shm_algo_<name>_mpitest.cpp, which forces it by name
//      (CommOptions::algorithm) and checks it against the serial reference summed in its order
//      on awkward sizes and counts (tests/comm/shm_algorithm_check.h does the work).
// (The planner prices algorithms it knows by their bytes and hand-offs, plan/collectives.cpp;
// an algorithm the planner should price needs its formula there too.)
#pragma once
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace kiln::detail::shm {

class ShmEngine;

enum class Coll { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

// One collective as the communicator received it.
struct ShmOp {
  Coll coll;
  const void* in;  // all-reduce, all-gather, broadcast: the buffer itself (in place)
  void* out;       // reduce-scatter: this rank's slice of the sum
  int64_t n;       // elements in the whole buffer (a reduce-scatter's input, the gathered buffer)
  // Reduce-scatter and all-gather: each rank's slice, in rank order (null otherwise).
  const std::vector<int64_t>* counts = nullptr;
  DType t = DType::F32;
  int root = -1;  // broadcast
  // alloc_shared had succeeded on this communicator when the operation was issued (decided in
  // issue order, so alike on every rank).
  bool shared = false;

  int64_t bytes() const { return n * static_cast<int64_t>(dtype_bytes(t)); }
};

class ShmAlgorithm {
 public:
  virtual ~ShmAlgorithm() = default;
  // Runs op on this rank; every rank runs the same algorithm on the same operation. Returns
  // false, having moved nothing, when the algorithm cannot take this operation (it does not fit
  // the lines; a buffer is not in shared memory): every rank then returns false alike, and the
  // tuner runs its fallback.
  virtual bool run(ShmEngine& e, const ShmOp& op) const = 0;
};

}  // namespace kiln::detail::shm
