#include "parallel/data_parallel.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace kiln {

DataParallel::DataParallel(Communicator& comm, int64_t numel,
                           const std::vector<int64_t>& tensor_offsets, int zero,
                           int64_t bucket_bytes)
    : comm_(comm), numel_(numel), zero_(zero) {
  if (zero < 0 || zero > 1)
    fail("train.zero = {} is not available: this build has ZeRO stages 0 and 1", zero);
  const int R = comm.size();
  shard_ = (numel + R - 1) / R;
  shard_begin_ = zero == 0 ? 0 : std::min(numel, shard_ * comm.rank());
  shard_end_ = zero == 0 ? numel : std::min(numel, shard_begin_ + shard_);
  if (zero == 1) shard_grads_.resize(std::max<int64_t>(1, shard_end_ - shard_begin_));
  // Buckets from the end, closed at the first tensor edge past the size limit.
  const int64_t limit = std::max<int64_t>(1, bucket_bytes / 4);
  int64_t end = numel;
  for (auto it = tensor_offsets.rbegin(); it != tensor_offsets.rend(); ++it) {
    if (end - *it >= limit || *it == 0) {
      buckets_.push_back({*it, end});
      end = *it;
    }
  }
  if (end > 0) buckets_.push_back({0, end});
}

int64_t DataParallel::shard_size(int rank) const {
  int64_t b = std::min(numel_, shard_ * rank);
  return std::min(numel_, b + shard_) - b;
}

std::vector<int64_t> DataParallel::counts_in(int64_t begin, int64_t end) const {
  std::vector<int64_t> c(comm_.size());
  for (int r = 0; r < comm_.size(); r++) {
    int64_t sb = std::min(numel_, shard_ * r), se = std::min(numel_, sb + shard_);
    c[r] = std::max<int64_t>(0, std::min(end, se) - std::max(begin, sb));
  }
  return c;
}

void DataParallel::begin(float* grads) {
  grads_ = grads;
  ready_from_ = numel_;
  next_bucket_ = 0;
  pending_.clear();
}

void DataParallel::launch(const Bucket& b) {
  if (zero_ == 0) {
    pending_.push_back(comm_.all_reduce_async(grads_ + b.begin, b.end - b.begin, DType::F32));
    return;
  }
  // This rank's part of the bucket lands at its place in the shard buffer.
  int64_t mine = std::max(b.begin, shard_begin_);
  float* out = shard_grads_.data() + std::max<int64_t>(0, mine - shard_begin_);
  pending_.push_back(
      comm_.reduce_scatter_async(grads_ + b.begin, out, counts_in(b.begin, b.end), DType::F32));
}

void DataParallel::ready(int64_t begin, int64_t end) {
  KILN_CHECK(grads_ && end <= numel_);
  // Ranges arrive from the end of the buffer backwards; a range that starts below the final
  // region but does not reach it (not expected from GPT-2's backward) is an internal error.
  KILN_CHECK(end >= ready_from_);
  ready_from_ = std::min(ready_from_, begin);
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from_)
    launch(buckets_[next_bucket_++]);
}

double DataParallel::finish() {
  KILN_CHECK(next_bucket_ == buckets_.size());
  double t0 = now_seconds();
  for (auto& w : pending_) w->wait();
  pending_.clear();
  grads_ = nullptr;
  return now_seconds() - t0;
}

void DataParallel::gather(float* params) {
  if (zero_ == 0) return;
  std::vector<int64_t> counts(comm_.size());
  for (int r = 0; r < comm_.size(); r++) counts[r] = shard_size(r);
  comm_.all_gather(params, counts, DType::F32);
}

void DataParallel::gather_into(float* full, const float* shard) {
  std::copy(shard, shard + (shard_end_ - shard_begin_), full + shard_begin_);
  gather(full);
}

}  // namespace kiln
