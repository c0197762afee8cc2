// Incremental GPT-2 decoding with a KV cache: each new token costs one position's work, the
// keys and values of earlier positions are kept per layer.
#pragma once
#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/gpt2.h"

namespace kiln {

class KvCacheDecoder {
 public:
  // params: the flat parameter buffer of a Gpt2 with config c (not owned, must outlive this).
  KvCacheDecoder(const Gpt2Config& c, const float* params);
  // Feeds the token at the next position and returns the logits (Vp) for the position after it.
  const float* step(int32_t token);
  int position() const { return pos_; }
  void reset() { pos_ = 0; }

 private:
  Gpt2Config cfg_;
  ParamLayout layout_;
  ModelParams P_;
  int pos_ = 0;
  std::vector<Buffer<float>> k_cache_, v_cache_;  // per layer (block_size, C)
  Buffer<float> x_, ln_, qkv_, atty_, fch_, fch_gelu_, logits_, scores_;
  float mean_ = 0, rstd_ = 0;
};

}  // namespace kiln
