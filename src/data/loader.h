// Micro-batches of (inputs, targets) from a ShardSet, deterministic and resumable.
//
// The token stream is cut into windows of B*T+1 tokens that start every B*T tokens. Without
// shuffling, micro-batch k reads tokens [k*B*T, k*B*T + B*T + 1) of the concatenated shards
// (llm.c's order) and wraps to the start after the last whole window. With shuffling, each
// epoch visits the windows in a permutation drawn from (seed, epoch). The whole state is the
// count of micro-batches served.
#pragma once
#include <cstdint>
#include <vector>

#include "data/shards.h"

namespace kiln {

class Loader {
 public:
  Loader(const ShardSet& shards, int B, int T, int vocab, bool shuffle, uint64_t seed);
  // Fills inputs and targets, each (B,T).
  void next(int32_t* inputs, int32_t* targets);
  uint64_t position() const { return k_; }
  void set_position(uint64_t k) { k_ = k; }
  int64_t windows_per_epoch() const { return windows_; }

 private:
  int64_t window_start(uint64_t k);
  const ShardSet& shards_;
  int B_, T_, vocab_;
  bool shuffle_;
  uint64_t seed_;
  int64_t windows_;
  uint64_t k_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
  std::vector<int32_t> buf_;
};

}  // namespace kiln
