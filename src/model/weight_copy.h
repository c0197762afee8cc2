// Mixed precision's copy of the weights: the fp32 parameters in bf16, in the same flat layout,
// which the model's matmuls read in bf16 mode. It belongs to the code that owns precision (the
// trainer makes it once per step, or has AdamW write it as it updates) and is lent to the model,
// which checks that it is the copy of the parameters it is given. One copy per rank's layout:
// a pipeline stage or a tensor-parallel slice holds only its own.
#pragma once
#include <cstdint>

#include "core/buffer.h"
#include "kernels/bf16.h"

namespace kiln {

class Bf16WeightCopy {
 public:
  explicit Bf16WeightCopy(int64_t numel);
  // The copy made from `params` (numel floats).
  void refresh(const float* params);
  // The buffer for the caller to write as the copy of `params` (AdamW writes each weight's bf16
  // as it updates it); every element must be written before the model next reads it.
  bf16* for_update(const float* params);
  const bf16* data() const { return copy_.data(); }
  // The parameters this is the copy of (null before the first refresh or for_update).
  const float* source() const { return source_; }
  int64_t bytes() const { return static_cast<int64_t>(copy_.bytes()); }

 private:
  Buffer<bf16> copy_;
  const float* source_ = nullptr;
};

}  // namespace kiln
