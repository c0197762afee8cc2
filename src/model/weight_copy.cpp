#include "model/weight_copy.h"

#include "kernels/kernels.h"

namespace kiln {

Bf16WeightCopy::Bf16WeightCopy(int64_t numel) : copy_(static_cast<size_t>(numel)) {}

void Bf16WeightCopy::refresh(const float* params) {
  to_bf16(copy_.data(), params, static_cast<int64_t>(copy_.size()));
  source_ = params;
}

bf16* Bf16WeightCopy::for_update(const float* params) {
  source_ = params;
  return copy_.data();
}

}  // namespace kiln
