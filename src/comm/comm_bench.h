// `kiln bench comm`: times one collective (or a ring of point-to-point messages) over a range of
// sizes on the shared-memory engine and on plain MPI (the blocking MPI_Allreduce,
// MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Sendrecv on MPI_COMM_WORLD) in the same
// run, the way nccl-tests does, and counts wrong results.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace kiln {

struct CommBenchOptions {
  std::string op = "allreduce";  // allreduce, reduce_scatter, allgather, broadcast, sendrecv
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

// Memory traffic per second and rank while every rank adds one 64 MiB array into another at
// once (read 2, write 1: an in-place reduction's pattern): median of 5, the slowest rank each time.
double concurrent_stream_rate();

// The time of one barrier of a shared-memory engine over every rank (a counter each rank sets
// and every other reads: about one cache-line transfer between cores each way), the median of
// 5 repetitions of 2000: how far apart the ranks' cores are in this launch.
double shm_barrier_seconds();

// Bytes of memory traffic per byte of buffer and rank that the op needs at least, for large
// buffers (docs/collectives.md, "The memory-traffic bound"); `shared`: an all-reduce of
// alloc_shared buffers, read in place. The bound on algbw is the stream rate divided by this.
double memory_traffic(const std::string& op, int ranks, bool shared);

// nccl-tests' bus-bandwidth factor: busbw = algbw * factor, algbw = bytes / time.
double bus_factor(const std::string& op, int ranks);

// Runs on every rank of the job (launched by mpirun); every rank gets the same rows.
std::vector<CommBenchRow> run_comm_bench(const CommBenchOptions& o);

}  // namespace kiln
