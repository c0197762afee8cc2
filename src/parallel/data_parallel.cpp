#include "parallel/data_parallel.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"

namespace kiln {

DataParallel::DataParallel(Communicator& comm, int64_t numel,
                           const std::vector<int64_t>& tensor_offsets, int zero,
                           int64_t bucket_bytes, int64_t base)
    : comm_(comm), base_(base), numel_(numel), zero_(zero) {
  if (zero < 0 || zero > 3) fail("train.zero = {}: ZeRO stages are 0, 1, 2 and 3", zero);
  const int R = comm.size();
  shard_ = (numel + R - 1) / R;
  shard_begin_ = zero == 0 ? 0 : std::min(numel, shard_ * comm.rank());
  shard_end_ = zero == 0 ? numel : std::min(numel, shard_begin_ + shard_);
  if (zero >= 1) shard_grads_.resize(std::max<int64_t>(1, shard_end_ - shard_begin_));
  // Buckets from the end, closed at the first tensor edge past the size limit.
  const int64_t limit = std::max<int64_t>(1, bucket_bytes / 4);
  int64_t end = numel;
  for (auto it = tensor_offsets.rbegin(); it != tensor_offsets.rend(); ++it) {
    const int64_t at = *it - base;
    if (at < 0 || at >= numel) continue;  // outside the reduced part
    if (end - at >= limit || at == 0) {
      buckets_.push_back({at, end});
      end = at;
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

void DataParallel::begin(PageBuffer& grads, bool first) {
  pages_ = &grads;
  first_ = first;
  into_ = shard_grads_.data();
  if (zero_ >= 2 && !first) {  // later micro-batches: reduce aside, then add
    if (shard_tmp_.size() != shard_grads_.size()) shard_tmp_.resize(shard_grads_.size());
    into_ = shard_tmp_.data();
  }
  ready_from_ = numel_;
  next_bucket_ = 0;
  pending_.clear();
}

void DataParallel::launch(size_t bucket) {
  const Bucket& b = buckets_[bucket];
  if (zero_ == 0 && comm_.size() == 1) return;  // one replica: its gradient is the sum
  if (zero_ == 0) {
    pending_.emplace_back(bucket, comm_.all_reduce_async(pages_->data() + base_ + b.begin,
                                                         b.end - b.begin, DType::F32));
    return;
  }
  // This rank's part of the bucket lands at its place in the shard buffer.
  int64_t mine = std::max(b.begin, shard_begin_);
  float* out = into_ + std::max<int64_t>(0, mine - shard_begin_);
  pending_.emplace_back(bucket, comm_.reduce_scatter_async(pages_->data() + base_ + b.begin, out,
                                                           counts_in(b.begin, b.end), DType::F32));
}

// zero 2: the pages of buckets whose reduction is done are no longer needed this step.
void DataParallel::release_finished() {
  if (zero_ < 2) return;
  while (!pending_.empty() && pending_.front().second->test()) {
    pending_.front().second->wait();  // rethrows a failure
    const Bucket& b = buckets_[pending_.front().first];
    pages_->release(base_ + b.begin, base_ + b.end);
    pending_.erase(pending_.begin());
  }
}

void DataParallel::ready(int64_t begin, int64_t end) {
  begin = std::max<int64_t>(0, begin - base_);
  end -= base_;
  KILN_CHECK(pages_ && end <= numel_);
  // Ranges arrive from the end of the buffer backwards; a range that starts below the final
  // region but does not reach it (not expected from GPT-2's backward) is an internal error.
  KILN_CHECK(end >= ready_from_);
  ready_from_ = std::min(ready_from_, begin);
  release_finished();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].begin >= ready_from_)
    launch(next_bucket_++);
}

double DataParallel::finish() {
  KILN_CHECK(next_bucket_ == buckets_.size());
  if (zero_ >= 2) peak_resident_ = std::max<int64_t>(peak_resident_, pages_->resident_bytes());
  double t0 = now_seconds();
  for (auto& [bucket, w] : pending_) {
    w->wait();
    if (zero_ >= 2) pages_->release(base_ + buckets_[bucket].begin, base_ + buckets_[bucket].end);
  }
  const double waited = now_seconds() - t0;
  pending_.clear();
  if (zero_ >= 2 && !first_) {
    float* acc = shard_grads_.data();
    const float* add = shard_tmp_.data();
    const int64_t n = shard_end_ - shard_begin_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) acc[i] += add[i];
  }
  pages_ = nullptr;
  return waited;
}

void DataParallel::fetch(PageBuffer& params, const float* master, int64_t begin, int64_t end) {
  KILN_CHECK(zero_ == 3 && base_ == 0);  // ZeRO-3 shards the whole model (no pipeline)
  const int64_t lo = std::max(begin, shard_begin_), hi = std::min(end, shard_end_);
  if (lo < hi)
    std::copy(master + (lo - shard_begin_), master + (hi - shard_begin_), params.data() + lo);
  fetches_.emplace_back(
      begin, comm_.all_gather_async(params.data() + begin, counts_in(begin, end), DType::F32));
}

void DataParallel::await(int64_t begin) {
  for (size_t i = 0; i < fetches_.size(); i++) {
    if (fetches_[i].first != begin) continue;
    auto w = fetches_[i].second;
    fetches_.erase(fetches_.begin() + static_cast<std::ptrdiff_t>(i));
    w->wait();
    return;
  }
}

void DataParallel::gather(float* params) {
  if (zero_ == 1 || zero_ == 2) all_gather_shards(params + base_);  // zero 3: where it uses them
}

void DataParallel::all_gather_shards(float* full) {
  std::vector<int64_t> counts(comm_.size());
  for (int r = 0; r < comm_.size(); r++) counts[r] = shard_size(r);
  comm_.all_gather(full, counts, DType::F32);
}

void DataParallel::gather_into(float* full, const float* shard) {
  std::copy(shard, shard + (shard_end_ - shard_begin_), full + base_ + shard_begin_);
  if (zero_ > 0) all_gather_shards(full + base_);
}

}  // namespace kiln
