#include "model/weight_copy.h"

#include "kernels/kernels.h"

namespace kiln {

static_assert(sizeof(bf16) * 2 == sizeof(float));

Bf16WeightCopy::Bf16WeightCopy(int64_t numel)
    : numel_(numel), mem_(static_cast<size_t>((numel + 1) / 2)) {}

void Bf16WeightCopy::refresh(const float* params) {
  to_bf16(mutable_data(), params, numel_);
  source_ = params;
}

void Bf16WeightCopy::refresh_range(const float* params, int64_t begin, int64_t end) {
  to_bf16(mutable_data() + begin, params + begin, end - begin);
  source_ = params;
}

void Bf16WeightCopy::release(int64_t begin, int64_t end) {
  // Only the floats wholly inside the range: a float at either edge also holds a neighbour's
  // element.
  const int64_t b = (begin + 1) / 2, e = end / 2;
  if (b < e) mem_.release(static_cast<size_t>(b), static_cast<size_t>(e));
}

bf16* Bf16WeightCopy::for_update(const float* params) {
  source_ = params;
  return mutable_data();
}

}  // namespace kiln
