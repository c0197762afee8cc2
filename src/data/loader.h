// Micro-batches of (inputs, targets) from a ShardSet: deterministic, resumable, shardable across
// data-parallel ranks, prefetched on a background thread.
//
// The token stream is cut into W sequences of T+1 tokens that start every T tokens. A global
// batch is R*B sequences (R ranks, B per micro-batch); an epoch is the largest whole number of
// global batches, E = floor(W / (R*B)) * R*B sequence positions. Micro-batch k of rank r takes
// the positions p = (k*R + r)*B + b, b < B; position p is sequence p mod E of epoch p div E, in
// order without shuffling, through a permutation of the W sequences drawn from (seed, epoch)
// with it. So without shuffling micro-batch k of rank r reads the tokens from (k*R + r)*B*T
// on, llm.c's order; and any layout with the same global batch sees the same sequences in the
// same steps. The whole state is k, the count of micro-batches served.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/shards.h"

namespace kiln {

class Loader {
 public:
  // Throws if the data is smaller than one global batch (R*B sequences).
  Loader(const ShardSet& shards, int B, int T, int vocab, bool shuffle, uint64_t seed, int rank = 0,
         int world = 1, bool prefetch = false);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Fills inputs and targets, each (B,T). Errors found while reading (a token outside the
  // vocabulary) are thrown here, also when the read happened on the prefetch thread.
  void next(int32_t* inputs, int32_t* targets);
  uint64_t position() const { return k_; }
  void set_position(uint64_t k);
  int64_t sequences_per_epoch() const { return epoch_; }

 private:
  int64_t sequence_start(uint64_t p);  // token offset of global sequence position p
  void read(uint64_t k, std::vector<int32_t>& buf);
  void start_prefetch();
  void stop_prefetch();

  const ShardSet& shards_;
  int B_, T_, vocab_;
  bool shuffle_;
  uint64_t seed_;
  int rank_, world_;
  int64_t sequences_;  // W
  int64_t epoch_;      // E
  uint64_t k_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
  std::vector<int32_t> buf_;

  // Prefetch: the thread reads micro-batch `ready_k_` into `ahead_` while training runs.
  bool prefetch_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> ahead_;
  uint64_t want_k_ = 0;  // the micro-batch the thread should read next
  bool have_ = false;    // ahead_ holds micro-batch want_k_
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace kiln
