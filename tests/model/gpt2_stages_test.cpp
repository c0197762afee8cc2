// Model stages: a GPT-2 cut into two and into three stages, run in one process stage by stage
// (forward in order, backward in reverse, each stage handing its output or its input's gradient
// to the next), gives the same bits as the whole model: the loss, every gradient, in fp32 and
// bf16, with recompute and flash attention, and with two micro-batches in flight (activation
// slots) accumulating as the whole model does one after the other. This is the seam pipeline
// parallelism runs on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/error.h"
#include "model/gpt2.h"

namespace kiln {
namespace {

struct Result {
  double loss[2] = {0, 0};
  std::vector<float> grads;
};

constexpr int B = 2, T = 16;

Gpt2Config config() {
  Gpt2Config c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 32;
  c.vocab_size = 100;
  c.padded_vocab_size = pad_vocab(100, 64);
  return c;
}

struct Batches {
  std::vector<int32_t> in[2], tg[2];
  Batches() {
    for (int m = 0; m < 2; m++) {
      in[m].resize(B * T);
      tg[m].resize(B * T);
      for (int i = 0; i < B * T; i++) {
        in[m][i] = (i * 3 + m * 11) % 100;
        tg[m][i] = (i * 7 + m * 5) % 100;
      }
    }
  }
};

// Two micro-batches through the whole model, one after the other.
Result whole(const ModelOptions& o, const float* params, int64_t n) {
  const Batches b;
  Gpt2 model(config(), B, T, o);
  model.set_weights(params);
  Result r;
  r.grads.assign(n, -1.0f);
  for (int m = 0; m < 2; m++) {
    r.loss[m] = model.forward(params, b.in[m].data(), b.tg[m].data(), 1.0f / (2 * B * T));
    model.backward(params, r.grads.data(), b.in[m].data(), {}, {}, /*accumulate=*/m > 0);
  }
  return r;
}

// The same through stages cut at `cuts` (layer indices), both micro-batches' forwards first (slots
// 0 and 1), then both backwards.
Result staged(ModelOptions o, const float* params, int64_t n, const std::vector<int>& cuts) {
  const Batches b;
  const Gpt2Config c = config();
  std::vector<std::unique_ptr<Gpt2>> stages;
  for (size_t s = 0; s + 1 < cuts.size(); s++) {
    o.stage = StageSpec{cuts[s], cuts[s + 1], s == 0, s + 2 == cuts.size()};
    o.slots = 2;
    stages.push_back(std::make_unique<Gpt2>(c, B, T, o));
    stages.back()->set_weights(params);
  }
  Result r;
  r.grads.assign(n, -1.0f);
  for (int m = 0; m < 2; m++) {
    const float* x = nullptr;
    for (auto& st : stages) {
      const bool last = st.get() == stages.back().get();
      double loss = st->forward_stage(params, b.in[m].data(), x, last ? b.tg[m].data() : nullptr,
                                      1.0f / (2 * B * T), {}, m);
      if (last) r.loss[m] = loss;
      x = st->stage_output(m);
    }
  }
  for (int m = 0; m < 2; m++) {
    const float* dy = nullptr;
    for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
      (*it)->backward_stage(params, r.grads.data(), b.in[m].data(), dy, {}, {}, m > 0, m);
      dy = (*it)->input_grad();
    }
  }
  return r;
}

struct Mode {
  const char* name;
  bool bf16;
  Recompute recompute;
  bool flash;
};

TEST(Gpt2Stages, TwoAndThreeStagesGiveTheWholeModelsBits) {
  const Gpt2Config c = config();
  const ParamLayout layout = gpt2_param_layout(c);
  Buffer<float> params(layout.total);
  gpt2_init(layout, c, params.data(), 7);
  const Mode modes[] = {{"fp32", false, Recompute::none, false},
                        {"bf16", true, Recompute::none, false},
                        {"fp32 recompute=attention", false, Recompute::attention, false},
                        {"bf16 recompute=full", true, Recompute::full, false},
                        {"fp32 flash", false, Recompute::none, true},
                        {"bf16 flash recompute=full", true, Recompute::full, true}};
  for (const Mode& mode : modes) {
    ModelOptions o;
    o.bf16 = mode.bf16;
    o.recompute = mode.recompute;
    o.flash_attention = mode.flash;
    const Result ref = whole(o, params.data(), layout.total);
    for (const std::vector<int>& cuts :
         {std::vector<int>{0, 2, 4}, std::vector<int>{0, 1, 3, 4}, std::vector<int>{0, 0, 4}}) {
      std::string where = std::string(mode.name) + ", cut at";
      for (int k : cuts) where += fmt::format(" {}", k);
      SCOPED_TRACE(where);
      const Result got = staged(o, params.data(), layout.total, cuts);
      EXPECT_EQ(got.loss[0], ref.loss[0]);
      EXPECT_EQ(got.loss[1], ref.loss[1]);
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < layout.total; i++)
        if (std::memcmp(&got.grads[i], &ref.grads[i], sizeof(float)) != 0) {
          differ++;
          if (first < 0) first = i;
        }
      EXPECT_EQ(differ, 0) << "first at flat index " << first;
    }
  }
}

TEST(Gpt2Stages, AStageOutsideTheModelIsAnError) {
  ModelOptions o;
  o.stage = StageSpec{2, 6, false, true};
  EXPECT_THROW(Gpt2 m(config(), B, T, o), Error);
  o.stage = StageSpec{0, 4, true, true};
  o.slots = 0;
  EXPECT_THROW(Gpt2 m(config(), B, T, o), Error);
}

TEST(Gpt2Stages, AStageHoldsOnlyItsLayersActivations) {
  ModelOptions o;
  const int64_t whole_bytes = Gpt2(config(), B, T, o).activation_breakdown().kept;
  o.stage = StageSpec{0, 2, true, false};
  const int64_t half = Gpt2(config(), B, T, o).activation_breakdown().kept;
  EXPECT_LT(half, whole_bytes);
  EXPECT_EQ(Gpt2(config(), B, T, o).activation_breakdown().head, 0);
}

}  // namespace
}  // namespace kiln
