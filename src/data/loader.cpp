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
  sequences_ = (shards.num_tokens() - 1) / T;
  const int64_t global = static_cast<int64_t>(B) * world;
  epoch_ = sequences_ / global * global;
  std::string first = shards.files().empty() ? "" : shards.files()[0];
  std::string more = shards.files().size() > 1 ? " and others" : "";
  if (sequences_ < B)
    fail(
        "the data ({} tokens in {}{}) is shorter than one micro-batch of batch_size = {} "
        "sequences of seq_len + 1 = {} tokens; use more data or a smaller batch",
        shards.num_tokens(), first, more, B, T + 1);
  if (epoch_ < global)
    fail(
        "the data ({} tokens in {}{}) holds {} sequences of {} tokens, fewer than one global "
        "batch of {} sequences ({} per rank, {} data-parallel ranks); use more data or a smaller "
        "batch",
        shards.num_tokens(), first, more, sequences_, T + 1, global, B, world);
  buf_.resize(static_cast<size_t>(B) * (T + 1));
  if (prefetch_) start_prefetch();
}

Loader::~Loader() {
  stop_prefetch();
}

int64_t Loader::sequence_start(uint64_t p) {
  const int64_t epoch = static_cast<int64_t>(p / epoch_);
  const int64_t idx = static_cast<int64_t>(p % epoch_);
  if (!shuffle_) return idx * T_;
  if (epoch != perm_epoch_) {
    perm_.resize(sequences_);
    for (int64_t i = 0; i < sequences_; i++) perm_[i] = i;
    Rng rng(mix_seed(seed_, static_cast<uint64_t>(epoch)));
    for (int64_t i = sequences_ - 1; i > 0; i--) std::swap(perm_[i], perm_[rng.below(i + 1)]);
    perm_epoch_ = epoch;
  }
  return perm_[idx] * T_;
}

void Loader::read(uint64_t k, std::vector<int32_t>& buf) {
  const int64_t row = T_ + 1;
  buf.resize(static_cast<size_t>(B_) * row);
  const uint64_t first = (k * static_cast<uint64_t>(world_) + static_cast<uint64_t>(rank_)) * B_;
  for (int b = 0; b < B_; b++)
    shards_.read(sequence_start(first + b), row, buf.data() + b * row, vocab_);
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
  for (int b = 0; b < B_; b++) {
    const int32_t* row = buf_.data() + static_cast<int64_t>(b) * (T_ + 1);
    std::copy(row, row + T_, inputs + static_cast<int64_t>(b) * T_);
    std::copy(row + 1, row + T_ + 1, targets + static_cast<int64_t>(b) * T_);
  }
  k_++;
}

}  // namespace kiln
