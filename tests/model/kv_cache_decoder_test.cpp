#include "model/kv_cache_decoder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "model/gpt2.h"
#include "model/sampler.h"

namespace kiln {
namespace {

TEST(KvCacheDecoder, LogitsAtEveryPositionMatchTheFullForward) {
  ModelConfig c{2, 2, 32, 16, 70, 128};
  const int T = 12;
  ParamLayout layout = gpt2_param_layout(c);
  Buffer<float> params(layout.total);
  gpt2_init(layout, c, params.data(), 3);
  // Larger weights than the initialisation, so attention is far from uniform.
  Rng rng(9);
  for (size_t i = 0; i < params.size(); i++) params[i] += static_cast<float>(rng.normal() * 0.05);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(c.vocab_size));
  Gpt2 model(c, 1, T);
  model.forward(params.data(), tokens.data(), nullptr, 0.0f);
  KvCacheDecoder dec(c, params.data());
  for (int t = 0; t < T; t++) {
    const float* got = dec.step(tokens[t]);
    const float* want = model.logits() + static_cast<int64_t>(t) * c.padded_vocab_size;
    double num = 0, den = 0;
    for (int v = 0; v < c.vocab_size; v++) {
      num = std::max(num, static_cast<double>(std::abs(got[v] - want[v])));
      den = std::max(den, static_cast<double>(std::abs(want[v])));
    }
    EXPECT_LT(num / den, 1e-5) << "position " << t;
  }
}

TEST(Sampler, GreedyTopKAndSeededSampling) {
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  Rng rng(1);
  EXPECT_EQ(sample_token(logits.data(), 5, 0.0f, 0, rng), 1);
  // top-2 only ever returns the two largest
  for (int i = 0; i < 200; i++) {
    int t = sample_token(logits.data(), 5, 1.0f, 2, rng);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
  // a fixed seed gives a fixed sequence; frequencies follow the softmax
  Rng a(7), b(7);
  int count1 = 0;
  for (int i = 0; i < 4000; i++) {
    int x = sample_token(logits.data(), 5, 1.0f, 0, a);
    ASSERT_EQ(x, sample_token(logits.data(), 5, 1.0f, 0, b));
    count1 += x == 1;
  }
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(count1 / 4000.0, std::exp(2.0) / z, 0.03);
}

}  // namespace
}  // namespace kiln
