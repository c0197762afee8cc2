// Picks the next token from logits: temperature 0 takes the argmax; otherwise softmax over the
// top_k largest logits (all of the vocabulary when top_k <= 0) divided by the temperature.
#pragma once
#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace kiln {

int32_t sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng);

struct ModelConfig;

struct SampleOptions {
  int max_new_tokens = 64;
  float temperature = 1.0f;
  int top_k = 0;
  uint64_t seed = 1337;
};

// Continues `prompt` (at least one token) with KV-cached decoding; returns only the new tokens.
// Stops early at the model's block_size.
std::vector<int32_t> generate_tokens(const ModelConfig& c, const float* params,
                                     const std::vector<int32_t>& prompt, const SampleOptions& o);

}  // namespace kiln
