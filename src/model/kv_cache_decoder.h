// Incremental decoding with a KV cache, for any model family: each new token costs one
// position's work, the keys and values of earlier positions are kept per layer. The family's own
// block code runs (Model::decode); this class keeps the position.
#pragma once
#include <cstdint>
#include <memory>

#include "model/model.h"

namespace kiln {

class KvCacheDecoder {
 public:
  // params: the flat parameter buffer of a model with config c (not owned, must outlive this).
  KvCacheDecoder(const ModelConfig& c, const float* params);
  // Feeds the token at the next position and returns the logits (Vp) for the position after it.
  const float* step(int32_t token) { return model_->decode(params_, token, pos_++); }
  int position() const { return pos_; }
  void reset() { pos_ = 0; }

 private:
  std::unique_ptr<Model> model_;
  const float* params_;
  int pos_ = 0;
};

}  // namespace kiln
