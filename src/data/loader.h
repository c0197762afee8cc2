// Micro-batches of (inputs, targets) from a ShardSet: deterministic, resumable, shardable across
// data-parallel ranks, prefetched on a background thread.
//
// The token stream is cut into W windows of B*T+1 tokens that start every B*T tokens. Rank r of
// R takes global window indices g = k*R + r for its micro-batches k = 0, 1, ...; epoch e = g / W.
// Without shuffling, g maps to window g mod W, so micro-batch k of rank r reads tokens starting at
// ((k*R + r) mod W) * B*T (llm.c's order). With shuffling, epoch e visits the windows in a
// permutation drawn from (seed, e), so every window is seen exactly once per epoch across ranks.
// The whole state is k, the count of micro-batches served.
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
  // Throws if the data is smaller than one global batch (R windows).
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
  int64_t windows_per_epoch() const { return windows_; }

 private:
  int64_t window_start(uint64_t k);  // token offset where micro-batch k of this rank starts
  void read(uint64_t k, std::vector<int32_t>& buf);
  void start_prefetch();
  void stop_prefetch();

  const ShardSet& shards_;
  int B_, T_, vocab_;
  bool shuffle_;
  uint64_t seed_;
  int rank_, world_;
  int64_t windows_;
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
