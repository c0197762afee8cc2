// Model stages: a GPT-2 cut into two and into three stages, run in one process stage by stage
// (forward in order, backward in reverse, each stage handing its output or its input's gradient
// to the next, each with its own gradient buffer), gives the same bits as the whole model: the
// loss and every gradient (the tied wte's, summed from its two stages, to 1e-5), in fp32 and
// bf16, with recompute and flash attention, and with two micro-batches in flight (activation
// slots) accumulating as the whole model does one after the other. This is the seam pipeline
// parallelism runs on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
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

ModelConfig config() {
  return gpt2_config(4, 2, 32, 32, 100, 64);
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
  const ModelConfig c = config();
  std::vector<std::unique_ptr<Gpt2>> stages;
  for (size_t s = 0; s + 1 < cuts.size(); s++) {
    o.stage = StageSpec{cuts[s], cuts[s + 1], s == 0, s + 2 == cuts.size()};
    o.slots = 2;
    stages.push_back(std::make_unique<Gpt2>(c, B, T, o));
    stages.back()->set_weights(params);
  }
  Result r;
  // Each stage its own gradient buffer, as pipeline ranks hold them; NaN where it writes nothing.
  std::vector<std::vector<float>> grads(stages.size(), std::vector<float>(n, std::nanf("")));
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
    for (size_t s = stages.size(); s-- > 0;) {
      stages[s]->backward_stage(params, grads[s].data(), b.in[m].data(), dy, {}, {}, m > 0, m);
      dy = stages[s]->input_grad();
    }
  }
  // Every parameter's gradient comes from the one stage that holds it; the tied wte's from the
  // last stage (the head) and the first (the embedding) added, as pipeline parallelism sums them.
  r.grads.assign(n, 0.0f);
  for (int64_t i = 0; i < n; i++) {
    int writers = 0;
    for (size_t s = stages.size(); s-- > 0;)
      if (!std::isnan(grads[s][i])) {
        r.grads[i] = writers++ ? r.grads[i] + grads[s][i] : grads[s][i];
      }
    if (writers == 0) r.grads[i] = std::nanf("");
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
  const ModelConfig c = config();
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
      // Every gradient the same bits, but the tied wte's: its two parts are summed in another
      // order than the whole model adds the embedding's onto the head's.
      const ParamTensor& wte = layout.find("wte.weight");
      int64_t differ = 0, first = -1;
      for (int64_t i = 0; i < layout.total; i++) {
        if (i >= wte.offset && i < wte.offset + wte.numel) {
          ASSERT_NEAR(got.grads[i], ref.grads[i], 1e-7f + 1e-5f * std::abs(ref.grads[i]))
              << "wte element " << i - wte.offset;
          continue;
        }
        if (std::memcmp(&got.grads[i], &ref.grads[i], sizeof(float)) != 0) {
          differ++;
          if (first < 0) first = i;
        }
      }
      EXPECT_EQ(differ, 0) << "first at flat index " << first;
    }
  }
}

// As pipeline ranks hold them: each stage its own gradient buffer, which the first micro-batch
// writes (accumulate = false) over whatever it held. The tied wte's two parts (the head's, the
// embedding's) then add up to the whole model's gradient.
TEST(Gpt2Stages, EachStagesOwnGradientsAreWrittenNotAddedToOnTheFirstMicroBatch) {
  const ModelConfig c = config();
  const ParamLayout layout = gpt2_param_layout(c);
  Buffer<float> params(layout.total);
  gpt2_init(layout, c, params.data(), 7);
  const Batches b;
  ModelOptions o;
  Gpt2 whole_model(c, B, T, o);
  std::vector<float> ref(layout.total);
  whole_model.forward(params.data(), b.in[0].data(), b.tg[0].data(), 1.0f / (B * T));
  whole_model.backward(params.data(), ref.data(), b.in[0].data(), {}, {}, false);
  o.stage = StageSpec{0, 2, true, false};
  Gpt2 first(c, B, T, o);
  o.stage = StageSpec{2, 4, false, true};
  Gpt2 last(c, B, T, o);
  std::vector<float> g0(layout.total, 1e30f), g1(layout.total, 1e30f);  // last step's leftovers
  first.forward_stage(params.data(), b.in[0].data(), nullptr, nullptr, 0.0f);
  last.forward_stage(params.data(), nullptr, first.stage_output(), b.tg[0].data(), 1.0f / (B * T));
  last.backward_stage(params.data(), g1.data(), nullptr, nullptr, {}, {}, false);
  first.backward_stage(params.data(), g0.data(), b.in[0].data(), last.input_grad(), {}, {}, false);
  const ParamTensor& wte = layout.find("wte.weight");
  for (int64_t i = wte.offset; i < wte.offset + wte.numel; i++) {
    const float sum = g0[i] + g1[i];
    ASSERT_NEAR(sum, ref[i], 1e-6f + 1e-5f * std::abs(ref[i])) << "wte element " << i - wte.offset;
  }
  const ParamTensor& wpe = layout.find("wpe.weight");
  for (int64_t i = wpe.offset; i < wpe.offset + wpe.numel; i++) ASSERT_EQ(g0[i], ref[i]);
}

TEST(Gpt2Stages, AStageOutsideTheModelIsAnError) {
  ModelOptions o;
  o.stage = StageSpec{2, 6, false, true};
  EXPECT_THROW(Gpt2 m(config(), B, T, o), Error);
  o.stage = StageSpec{0, 2, true, true};  // the head after layer 2 of 4
  EXPECT_THROW(Gpt2 m(config(), B, T, o), Error);
  o.stage = StageSpec{1, 4, true, true};  // the embedding before layer 1
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
