// One model description for the trainer and the planner: the GPT-2 config maps to a ModelSpec
// whose parameter count is the trainer's flat layout's, and the planner's GPT-2 preset is the
// spec of the trainer's gpt2-124m config.
#include "model/spec.h"

#include <gtest/gtest.h>

#include "model/gpt2.h"
#include "model/model.h"
#include "plan/model_spec.h"
#include "test_util.h"
#include "train/config.h"

namespace kiln {
namespace {

TEST(ModelSpec, TheGpt2LayoutHasTheSpecsParameters) {
  for (auto [L, C, NH, V, ctx] : {std::tuple{2, 32, 2, 100, 32}, std::tuple{4, 64, 4, 257, 64},
                                  std::tuple{12, 768, 12, 50257, 1024}}) {
    const ModelConfig c = gpt2_config(L, NH, C, ctx, V, 128);
    EXPECT_EQ(gpt2_param_layout(c).total, count_params(gpt2_spec(c, /*padded=*/true)).total);
    // Parameters with the real vocabulary: the layout of an unpadded config.
    ModelConfig u = c;
    u.padded_vocab_size = V;
    EXPECT_EQ(gpt2_num_params(c), gpt2_param_layout(u).total);
    const ModelSpec m = gpt2_spec(c);
    EXPECT_EQ(m.family, "gpt2");
    EXPECT_EQ(m.n_kv_head, NH);
    EXPECT_EQ(m.ffn_hidden, 4 * C);
    EXPECT_TRUE(m.learned_positions && m.bias && m.tied_embeddings);
    EXPECT_EQ(m.norm, NormKind::layernorm);
    EXPECT_EQ(m.ffn, FfnKind::gelu);
  }
}

TEST(ModelSpec, ThePlannersGpt2PresetIsTheTrainersModelConfig) {
  TrainConfig cfg = load_train_config(kiln::testing::source_path("configs/gpt2-124m.toml"), {});
  const ModelSpec trainer = gpt2_spec(cfg.model, /*padded=*/false);
  const ModelSpec& preset = plan::find_preset("gpt2-124m").model;
  EXPECT_EQ(preset.family, trainer.family);
  EXPECT_EQ(preset.n_layer, trainer.n_layer);
  EXPECT_EQ(preset.hidden, trainer.hidden);
  EXPECT_EQ(preset.n_head, trainer.n_head);
  EXPECT_EQ(preset.n_kv_head, trainer.n_kv_head);
  EXPECT_EQ(preset.ffn_hidden, trainer.ffn_hidden);
  EXPECT_EQ(preset.vocab, trainer.vocab);
  EXPECT_EQ(preset.max_seq, trainer.max_seq);
  EXPECT_EQ(count_params(preset).total, gpt2_num_params(cfg.model));
  EXPECT_EQ(plan::find_preset("llama2-7b").model.family, "llama");
}

// configs/llama-1b.toml is Llama 3.2 1B's shape: its 1,235,814,400 parameters (tied head).
TEST(ModelSpec, TheLlama1bConfigHasLlama32OneBsParameters) {
  TrainConfig cfg = load_train_config(kiln::testing::source_path("configs/llama-1b.toml"), {});
  EXPECT_TRUE(cfg.model.llama());
  EXPECT_TRUE(cfg.model.tie_embeddings);
  EXPECT_EQ(cfg.model.kv_heads(), 8);
  EXPECT_EQ(num_params(cfg.model), 1235814400);
  EXPECT_EQ(model_spec(cfg.model, /*padded=*/false).family, "llama");
}

// configs/llama-small.toml: the Llama 3 vocabulary's tied embedding is 32.8M of its 36M.
TEST(ModelSpec, TheLlamaSmallConfigIsMostlyItsEmbedding) {
  TrainConfig cfg = load_train_config(kiln::testing::source_path("configs/llama-small.toml"), {});
  EXPECT_TRUE(cfg.model.llama());
  EXPECT_EQ(cfg.tokenizer, "llama3");
  EXPECT_EQ(num_params(cfg.model),
            128256 * 256 + 4 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 768 + 2 * 256) + 256);
}

}  // namespace
}  // namespace kiln
