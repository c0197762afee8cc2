#include "model/kv_cache_decoder.h"

namespace kiln {

KvCacheDecoder::KvCacheDecoder(const ModelConfig& c, const float* params) : params_(params) {
  ModelOptions o;
  o.kv_cache = true;
  model_ = make_model(c, 1, 1, o);
}

}  // namespace kiln
