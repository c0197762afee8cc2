#include "data/loader.h"

#include "core/error.h"
#include "core/rng.h"

namespace kiln {

Loader::Loader(const ShardSet& shards, int B, int T, int vocab, bool shuffle, uint64_t seed)
    : shards_(shards), B_(B), T_(T), vocab_(vocab), shuffle_(shuffle), seed_(seed) {
  const int64_t bt = static_cast<int64_t>(B) * T;
  windows_ = (shards.num_tokens() - 1) / bt;
  if (windows_ < 1)
    fail(
        "the data ({} tokens in {}) is shorter than one micro-batch of batch_size*seq_len+1 = "
        "{} tokens; use more data or a smaller batch",
        shards.num_tokens(), shards.files().empty() ? "" : shards.files()[0], bt + 1);
  buf_.resize(bt + 1);
}

int64_t Loader::window_start(uint64_t k) {
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  int64_t epoch = static_cast<int64_t>(k / windows_);
  int64_t idx = static_cast<int64_t>(k % windows_);
  if (!shuffle_) return idx * bt;
  if (epoch != perm_epoch_) {
    perm_.resize(windows_);
    for (int64_t i = 0; i < windows_; i++) perm_[i] = i;
    Rng rng(mix_seed(seed_, static_cast<uint64_t>(epoch)));
    for (int64_t i = windows_ - 1; i > 0; i--) std::swap(perm_[i], perm_[rng.below(i + 1)]);
    perm_epoch_ = epoch;
  }
  return perm_[idx] * bt;
}

void Loader::next(int32_t* inputs, int32_t* targets) {
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  shards_.read(window_start(k_), bt + 1, buf_.data(), vocab_);
  for (int64_t i = 0; i < bt; i++) {
    inputs[i] = buf_[i];
    targets[i] = buf_[i + 1];
  }
  k_++;
}

}  // namespace kiln
