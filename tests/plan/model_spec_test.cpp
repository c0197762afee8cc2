#include "plan/model_spec.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace kiln::plan {
namespace {

// Parameter counts against the released checkpoints (Hugging Face model cards/configs).
TEST(PlanModelSpec, ParameterCountsMatchReleasedModels) {
  EXPECT_EQ(count_params(find_preset("gpt2-124m").model).total, 124439808);  // GPT-2 small
  EXPECT_EQ(count_params(find_preset("llama2-7b").model).total, 6738415616);
  EXPECT_EQ(count_params(find_preset("llama2-70b").model).total, 68976648192);
  EXPECT_EQ(count_params(find_preset("llama3-8b").model).total, 8030261248);
  EXPECT_EQ(count_params(find_preset("llama3-405b").model).total, 405853388800);
}

// Gemma 7B's heads are wider than its model (16 × 256 = 4096 against d_model 3072). The Gemma
// report (arXiv:2403.08295), table 2: 786,825,216 embedding and 7,751,248,896 non-embedding
// parameters; without the head size kiln would count 3072-wide attention and miss by 403M.
TEST(PlanModelSpec, AHeadSizeSetApartFromTheWidthCountsAsGemmaReports) {
  const ModelSpec m = find_preset("gemma-7b").model;
  EXPECT_EQ(m.head_dim(), 256);
  const ParamCounts c = count_params(m);
  EXPECT_EQ(c.embedding, 786825216);
  EXPECT_EQ(c.total - c.embedding, 7751248896);
  EXPECT_EQ(c.head, 0);  // tied
  // The score and value products run over 16 heads of 256, not over d_model.
  EXPECT_DOUBLE_EQ(attention_core_forward_flops_per_token(m, 8192), 4.0 * 28 * 16 * 256 * 8192);
  ModelSpec odd = m;
  odd.head_size = 0;  // 3072 / 16 = 192: a different model, and a valid one
  EXPECT_EQ(odd.head_dim(), 192);
  odd.n_head = odd.n_kv_head = 7;
  try {
    odd.validate("gemma.toml");
    FAIL();
  } catch (const Error& e) {  // 3072 / 7 with no head size given
    EXPECT_NE(std::string(e.what()).find("not a multiple of n_head 7 (give the head size"),
              std::string::npos)
        << e.what();
  }
  odd.head_size = 256;
  EXPECT_NO_THROW(odd.validate("gemma.toml"));
}

// Narayanan et al. 2021, table 1: the 1T model has 1008.0B parameters, P = 12·l·h²·(1 +
// 13/(12h) + (V + s)/(12·l·h)); the formula leaves out the final LayerNorm's 2h.
TEST(PlanModelSpec, MegatronParameterFormula) {
  const ModelSpec m = find_preset("megatron-1t").model;
  const double l = m.n_layer, h = m.hidden, V = double(m.vocab), s = m.max_seq;
  const double formula = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
  EXPECT_NEAR(double(count_params(m).total), formula + 2 * h, 1e-3);
  EXPECT_NEAR(count_params(m).total / 1e9, 1008.0, 0.05);
}

// Megatron-LM's FLOPs per iteration with full recomputation, 96·B·s·l·h²·(1 + s/(6h) +
// V/(16·l·h)) (Narayanan et al. 2021, section 5.1), equals kiln's model FLOPs plus one more
// forward through the blocks; without recomputation it is 72·B·s·l·h²·(...) + 6·B·s·h·V.
TEST(PlanModelSpec, FlopsMatchMegatronFormula) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const double l = m.n_layer, h = m.hidden, V = double(m.vocab), s = 2048;
  const double megatron = 96 * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  const double kiln = model_flops_per_token(m, 2048) + block_forward_flops_per_token(m, 2048);
  EXPECT_NEAR(kiln, megatron, 1e-12 * megatron);
  const double model = 72 * l * h * h * (1 + s / (6 * h)) + 6 * h * V;
  EXPECT_NEAR(model_flops_per_token(m, 2048), model, 1e-12 * model);
}

TEST(PlanModelSpec, GroupedQueryAttentionShrinksKeyValueWeights) {
  ModelSpec m = find_preset("llama2-70b").model;
  const int64_t gqa = count_params(m).per_layer_matmul;
  m.n_kv_head = m.n_head;
  const int64_t mha = count_params(m).per_layer_matmul;
  // K and V go from h×h each to h×(8·128) each.
  EXPECT_EQ(mha - gqa, 2 * int64_t(8192) * (8192 - 8 * 128));
}

TEST(PlanModelSpec, UnknownPresetSuggestsTheClosest) {
  try {
    find_preset("llama2-7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'llama2-7b'"), std::string::npos)
        << e.what();
  }
  try {
    find_preset("bert");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama3-405b"), std::string::npos) << e.what();
  }
}

TEST(PlanModelSpec, ValidateNamesTheField) {
  ModelSpec m = find_preset("gpt2-124m").model;
  m.n_head = 7;
  try {
    m.validate("my.toml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("my.toml: hidden size 768 is not a multiple of n_head 7"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln::plan
