// `kiln bench comm`: times one collective over a range of sizes on the shared-memory engine and
// on plain MPI (the blocking MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast
// on MPI_COMM_WORLD) in the same run, the way nccl-tests does, and counts wrong results.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace kiln {

struct CommBenchOptions {
  std::string op = "allreduce";  // allreduce, reduce_scatter, allgather, broadcast
  DType dtype = DType::F32;
  int64_t min_bytes = 4, max_bytes = 256ll << 20;
  int reps = 5;               // timed repetitions per size (the median is reported)
  double rep_seconds = 0.05;  // each repetition runs the operation this long, at least once
  CommOptions engine;         // the engine's options (backend "shm")
  // The engine's algorithms to time side by side (CommOptions::algorithm values), each in the
  // same run as MPI; empty: engine.algorithm alone.
  std::vector<std::string> algorithms;
  // Buffers from the engine's alloc_shared (its all-reduce then reads them in place) instead of
  // ordinary 64-byte aligned memory; MPI uses the same buffers either way.
  bool shared = false;
};

struct CommBenchTiming {
  double seconds = 0;  // per operation: median over repetitions of the slowest rank's mean
  int64_t wrong = 0;   // elements that differ from the expected result, over all ranks
};

struct CommBenchRow {
  int64_t bytes = 0, count = 0;         // the whole buffer (nccl-tests' "size") and its elements
  std::vector<CommBenchTiming> engine;  // one per algorithm, in the order asked for
  CommBenchTiming mpi;
};

// The rate (bytes copied per second) at which every rank copies a 64 MiB buffer, all at once:
// median of 5, the slowest rank each time.
double concurrent_copy_rate();

// The memory-traffic bound on algbw for the op, given that rate (docs/collectives.md).
double memory_bound_algbw(const std::string& op, int ranks, double copy_rate);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor, algbw = bytes / time.
double bus_factor(const std::string& op, int ranks);

// Runs on every rank of the job (launched by mpirun); every rank gets the same rows.
std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions& o);

}  // namespace kiln
