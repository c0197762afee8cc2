// Mixed precision's copy of the weights: the fp32 parameters in bf16, in the same flat layout,
// which the model's matmuls read in bf16 mode. It belongs to the code that owns precision (the
// trainer makes it once per step, or has AdamW write it as it updates; under ZeRO-3 it converts
// each range as the range's parameters arrive and hands the pages back with them) and is lent to
// the model, which checks that it is the copy of the parameters it is given. One copy per rank's
// layout: a pipeline stage or a tensor-parallel slice holds only its own.
#pragma once
#include <cstdint>

#include "core/page_buffer.h"
#include "kernels/bf16.h"

namespace kiln {

class Bf16WeightCopy {
 public:
  explicit Bf16WeightCopy(int64_t numel);
  // The copy made from `params` (numel floats).
  void refresh(const float* params);
  // Elements [begin, end) made from params[begin, end); the rest is left as it is.
  void refresh_range(const float* params, int64_t begin, int64_t end);
  // Hands back the whole pages of elements [begin, end) (they read as zero until refreshed).
  void release(int64_t begin, int64_t end);
  // The buffer for the caller to write as the copy of `params` (AdamW writes each weight's bf16
  // as it updates it); every element must be written before the model next reads it.
  bf16* for_update(const float* params);
  const bf16* data() const { return reinterpret_cast<const bf16*>(mem_.data()); }
  // The parameters this is the copy of (null before the first refresh or for_update).
  const float* source() const { return source_; }
  int64_t bytes() const { return numel_ * static_cast<int64_t>(sizeof(bf16)); }
  int64_t resident_bytes() const { return static_cast<int64_t>(mem_.resident_bytes()); }

 private:
  bf16* mutable_data() { return reinterpret_cast<bf16*>(mem_.data()); }
  int64_t numel_;
  PageBuffer mem_;  // (numel + 1) / 2 floats' room, read as bf16
  const float* source_ = nullptr;
};

}  // namespace kiln
