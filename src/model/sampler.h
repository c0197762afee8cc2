// Picks the next token from logits: temperature 0 takes the argmax; otherwise softmax over the
// top_k largest logits (all of the vocabulary when top_k <= 0) divided by the temperature.
#pragma once
#include <cstdint>

#include "core/rng.h"

namespace kiln {

int32_t sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng);

}  // namespace kiln
