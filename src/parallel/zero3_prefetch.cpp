#include "parallel/zero3_prefetch.h"

#include <algorithm>

#include "core/error.h"

namespace kiln {

Zero3Prefetch::Zero3Prefetch(DataParallel& dp, PageBuffer& params, const float* master,
                             std::vector<std::pair<int64_t, int64_t>> blocks)
    : dp_(dp), params_(params), master_(master), blocks_(std::move(blocks)) {
  KILN_CHECK(!blocks_.empty());
}

void Zero3Prefetch::fetch(int l) {
  dp_.fetch(params_, master_, blocks_[l].first, blocks_[l].second);
}

void Zero3Prefetch::begin_forward() {
  const int64_t embed_end = blocks_.front().first, lnf_begin = blocks_.back().second;
  dp_.fetch(params_, master_, 0, embed_end);
  dp_.fetch(params_, master_, lnf_begin, static_cast<int64_t>(params_.size()));
  fetch(0);
  dp_.await(0);
  dp_.await(lnf_begin);
  present(0, embed_end);
  present(lnf_begin, static_cast<int64_t>(params_.size()));
}

void Zero3Prefetch::before_forward(int l) {
  dp_.await(blocks_[l].first);
  present(blocks_[l].first, blocks_[l].second);
  if (l + 1 < static_cast<int>(blocks_.size())) fetch(l + 1);
}

void Zero3Prefetch::begin_backward() {
  fetch(static_cast<int>(blocks_.size()) - 1);
}

void Zero3Prefetch::before_backward(int l) {
  dp_.await(blocks_[l].first);
  present(blocks_[l].first, blocks_[l].second);
  if (l > 0) fetch(l - 1);
}

void Zero3Prefetch::after_block(int l) {
  peak_resident_ = std::max<int64_t>(peak_resident_, params_.resident_bytes());
  dp_.drop(params_, blocks_[l].first, blocks_[l].second);
  dropped(blocks_[l].first, blocks_[l].second);
}

void Zero3Prefetch::fetch_all() {
  dp_.fetch(params_, master_, 0, static_cast<int64_t>(params_.size()));
  dp_.await(0);
  present(0, static_cast<int64_t>(params_.size()));
}

void Zero3Prefetch::drop_all() {
  dp_.drop(params_, 0, static_cast<int64_t>(params_.size()));
  dropped(0, static_cast<int64_t>(params_.size()));
}

}  // namespace kiln
