#include "model/sampler.h"

#include "core/error.h"
#include "model/kv_cache_decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kiln {

int32_t sample_token(const float* logits, int V, float temperature, int top_k, Rng& rng) {
  if (temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  int k = (top_k > 0 && top_k < V) ? top_k : V;
  // Ties broken by the lower id, so the choice does not depend on the sort's stability.
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  double maxv = logits[idx[0]];
  std::vector<double> p(k);
  double sum = 0;
  for (int i = 0; i < k; i++) sum += p[i] = std::exp((logits[idx[i]] - maxv) / temperature);
  double u = rng.uniform() * sum;
  for (int i = 0; i < k; i++) {
    u -= p[i];
    if (u < 0) return idx[i];
  }
  return idx[k - 1];
}

std::vector<int32_t> generate_tokens(const ModelConfig& c, const float* params,
                                     const std::vector<int32_t>& prompt, const SampleOptions& o) {
  if (prompt.empty()) fail("generation needs a prompt of at least one token");
  if (static_cast<int>(prompt.size()) >= c.block_size)
    fail("the prompt ({} tokens) fills the model's {} positions", prompt.size(), c.block_size);
  KvCacheDecoder dec(c, params);
  Rng rng(o.seed);
  const float* logits = nullptr;
  for (int32_t t : prompt) logits = dec.step(t);
  std::vector<int32_t> out;
  for (int i = 0; i < o.max_new_tokens; i++) {
    int32_t next = sample_token(logits, c.vocab_size, o.temperature, o.top_k, rng);
    out.push_back(next);
    if (i + 1 == o.max_new_tokens || dec.position() >= c.block_size) break;
    logits = dec.step(next);
  }
  return out;
}

}  // namespace kiln
