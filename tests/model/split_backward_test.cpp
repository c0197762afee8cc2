// A backward split in two (zero-bubble pipelines: ModelOptions::split_backward): the input part
// (backward_stage) for two micro-batches, then the weight parts (backward_weight) in the same
// order, gives the very bits of two whole backwards, for GPT-2 and Llama, fp32 and bf16, with
// attention recompute and flash attention; the input gradient a stage sends is there before any
// weight part runs. A full recompute cannot keep what the weight part reads: refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "model/gpt2.h"
#include "model/model.h"
#include "test_util.h"

namespace kiln {
namespace {

constexpr int B = 2, T = 16;

ModelConfig family(const std::string& name) {
  ModelConfig c = gpt2_config(4, 4, 32, 32, 100, 64);
  if (name != "gpt2") {
    c.family = "llama";
    c.n_kv_head = 2;
    c.ffn_hidden = 64;
  }
  return c;
}

struct Grads {
  std::vector<float> g, dx;
  double loss = 0;
};

// Two micro-batches: whole backwards one after the other, or both input parts then both
// weight parts. `stage` is the model's (the input gradient is compared when it has no
// embedding).
Grads run(const ModelConfig& c, ModelOptions o, bool split, const float* params,
          const std::vector<float>& x_in) {
  o.split_backward = split;
  o.slots = 2;
  auto m = make_model(c, B, T, o);
  m->set_weights(params);
  const ParamLayout& L = m->layout();
  std::vector<int32_t> in[2], tg[2];
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < B * T; i++) {
      in[k].push_back((i * 3 + k * 11) % 100);
      tg[k].push_back((i * 7 + k * 5) % 100);
    }
  Grads r;
  r.g.assign(L.total, 0.0f);
  const bool embed = o.stage.embedding;
  const float dloss = 1.0f / (2 * B * T);
  for (int k = 0; k < 2; k++) {
    r.loss += m->forward_stage(params, in[k].data(), embed ? nullptr : x_in.data(), tg[k].data(),
                               dloss, {}, split ? k : 0);
    if (split) continue;
    m->backward_stage(params, r.g.data(), in[k].data(), nullptr, {}, {}, k > 0, 0);
    if (!embed) r.dx.insert(r.dx.end(), m->input_grad(), m->input_grad() + B * T * c.n_embd);
  }
  if (!split) return r;
  for (int k = 0; k < 2; k++) {
    m->backward_stage(params, r.g.data(), in[k].data(), nullptr, {}, {}, k > 0, k);
    if (!embed) r.dx.insert(r.dx.end(), m->input_grad(), m->input_grad() + B * T * c.n_embd);
  }
  EXPECT_GT(m->deferred_bytes(), 0);
  for (int k = 0; k < 2; k++) m->backward_weight(k, k > 0);
  return r;
}

TEST(SplitBackward, InputThenWeightPartsGiveTheWholeBackwardsBits) {
  struct Mode {
    const char* name;
    bool bf16;
    Recompute recompute;
    bool flash;
  };
  const Mode modes[] = {{"fp32", false, Recompute::none, false},
                        {"bf16", true, Recompute::none, false},
                        {"fp32 recompute=attention", false, Recompute::attention, false},
                        {"bf16 flash", true, Recompute::none, true}};
  for (const char* fam : {"gpt2", "llama", "llama tied"}) {
    ModelConfig c = family(fam);
    c.tie_embeddings = std::string(fam) == "llama tied";
    const ParamLayout L = param_layout(c);
    Buffer<float> params(L.total);
    init_params(L, c, params.data(), 7);
    std::vector<float> x_in(B * T * c.n_embd);
    for (size_t i = 0; i < x_in.size(); i++) x_in[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    for (const Mode& mode : modes)
      for (StageSpec stage : {StageSpec{}, StageSpec{2, 4, false, true}}) {
        SCOPED_TRACE(std::string(fam) + " " + mode.name + (stage.embedding ? "" : " last stage"));
        ModelOptions o;
        o.bf16 = mode.bf16;
        o.recompute = mode.recompute;
        o.flash_attention = mode.flash;
        o.stage = stage;
        const Grads whole = run(c, o, false, params.data(), x_in);
        const Grads split = run(c, o, true, params.data(), x_in);
        EXPECT_EQ(whole.loss, split.loss);
        ASSERT_EQ(whole.g.size(), split.g.size());
        EXPECT_EQ(std::memcmp(whole.g.data(), split.g.data(), whole.g.size() * sizeof(float)), 0);
        ASSERT_EQ(whole.dx.size(), split.dx.size());
        EXPECT_EQ(std::memcmp(whole.dx.data(), split.dx.data(), whole.dx.size() * sizeof(float)),
                  0);
      }
  }
}

TEST(SplitBackward, AFullRecomputeIsRefusedByName) {
  ModelOptions o;
  o.split_backward = true;
  o.recompute = Recompute::full;
  const std::string e = kiln::testing::error_of([&] { make_model(family("gpt2"), B, T, o); });
  EXPECT_NE(e.find("train.recompute = \"full\""), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
