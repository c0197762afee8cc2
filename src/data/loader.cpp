#include "data/loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace kiln {

Loader::Loader(const ShardSet& shards, int B, int T, int vocab, bool shuffle, uint64_t seed,
               int rank, int world, bool prefetch)
    : shards_(shards),
      B_(B),
      T_(T),
      vocab_(vocab),
      shuffle_(shuffle),
      seed_(seed),
      rank_(rank),
      world_(world),
      prefetch_(prefetch) {
  KILN_CHECK(world >= 1 && rank >= 0 && rank < world);
  const int64_t bt = static_cast<int64_t>(B) * T;
  windows_ = (shards.num_tokens() - 1) / bt;
  std::string first = shards.files().empty() ? "" : shards.files()[0];
  if (windows_ < 1)
    fail(
        "the data ({} tokens in {}{}) is shorter than one micro-batch of batch_size*seq_len+1 = "
        "{} tokens; use more data or a smaller batch",
        shards.num_tokens(), first, shards.files().size() > 1 ? " and others" : "", bt + 1);
  if (windows_ < world)
    fail(
        "the data ({} tokens in {}{}) holds {} micro-batches of {} tokens, fewer than one global "
        "batch across {} data-parallel ranks; use more data or a smaller batch",
        shards.num_tokens(), first, shards.files().size() > 1 ? " and others" : "", windows_,
        bt + 1, world);
  buf_.resize(bt + 1);
  if (prefetch_) start_prefetch();
}

Loader::~Loader() {
  stop_prefetch();
}

int64_t Loader::window_start(uint64_t k) {
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  const uint64_t g = k * static_cast<uint64_t>(world_) + static_cast<uint64_t>(rank_);
  const int64_t epoch = static_cast<int64_t>(g / windows_);
  const int64_t idx = static_cast<int64_t>(g % windows_);
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

void Loader::read(uint64_t k, std::vector<int32_t>& buf) {
  buf.resize(static_cast<size_t>(B_) * T_ + 1);
  shards_.read(window_start(k), static_cast<int64_t>(buf.size()), buf.data(), vocab_);
}

void Loader::start_prefetch() {
  stop_ = false;
  have_ = false;
  error_ = nullptr;
  want_k_ = k_;
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !have_; });
      if (stop_) return;
      uint64_t k = want_k_;
      lock.unlock();
      std::vector<int32_t> buf;
      std::exception_ptr err;
      try {
        read(k, buf);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (want_k_ != k) continue;  // repositioned meanwhile
      ahead_.swap(buf);
      error_ = err;
      have_ = true;
      cv_.notify_all();
      if (err) {  // wait to be repositioned or stopped
        cv_.wait(lock, [&] { return stop_ || !have_; });
        if (stop_) return;
      }
    }
  });
}

void Loader::stop_prefetch() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Loader::set_position(uint64_t k) {
  if (!prefetch_) {
    k_ = k;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  k_ = k;
  want_k_ = k;
  have_ = false;
  error_ = nullptr;
  cv_.notify_all();
}

void Loader::next(int32_t* inputs, int32_t* targets) {
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  if (prefetch_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return have_; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      have_ = false;
      cv_.notify_all();
      std::rethrow_exception(e);
    }
    buf_.swap(ahead_);
    want_k_ = k_ + 1;
    have_ = false;
    cv_.notify_all();
  } else {
    read(k_, buf_);
  }
  for (int64_t i = 0; i < bt; i++) {
    inputs[i] = buf_[i];
    targets[i] = buf_[i + 1];
  }
  k_++;
}

}  // namespace kiln
