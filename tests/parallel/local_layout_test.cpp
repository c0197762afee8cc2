// The local layout: every tensor whole on one part, placed back to back as the model's own flat
// layout; cut along a dimension into parts that together hold every logical element exactly once.
#include "parallel/local_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "core/split_index.h"
#include "model/gpt2.h"
#include "model/model.h"
#include "test_util.h"

namespace kiln {
namespace {

std::vector<LogicalTensor> gpt2_logical(const ModelConfig& c) {
  std::vector<LogicalTensor> out;
  for (const auto& t : gpt2_param_layout(c).tensors) out.push_back({t.name, t.shape});
  return out;
}

ModelConfig small() {
  return gpt2_config(2, 4, 32, 16, 100, 128);
}

TEST(LocalLayout, OnePartIsTheModelsOwnFlatLayout) {
  const ModelConfig c = small();
  const ParamLayout flat = gpt2_param_layout(c);
  const LocalLayout local = local_layout(gpt2_logical(c), 1, 0);
  ASSERT_EQ(local.tensors.size(), flat.tensors.size());
  EXPECT_EQ(local.total, flat.total);
  for (size_t i = 0; i < flat.tensors.size(); i++) {
    EXPECT_EQ(local.tensors[i].offset, flat.tensors[i].offset) << flat.tensors[i].name;
    EXPECT_EQ(local.tensors[i].local_shape, flat.tensors[i].shape);
    EXPECT_EQ(local.tensors[i].split_dim, -1);
    EXPECT_EQ(local.tensors[i].logical_index(5), 5);
  }
}

TEST(LocalLayout, PartsAlongADimensionCoverEveryElementOnce) {
  // Columns of the (C, 3C) QKV weight and rows of the (Vp, C) embedding, in 4 parts.
  const std::vector<LogicalTensor> logical = {
      {"h.0.attn.c_attn.weight", {32, 96}}, {"wte.weight", {128, 32}}, {"ln_f.weight", {32}}};
  auto dim = [](const std::string& name) {
    if (name == "h.0.attn.c_attn.weight") return 1;
    if (name == "wte.weight") return 0;
    return -1;
  };
  for (const auto& t : logical) {
    int64_t numel = 1;
    for (auto d : t.shape) numel *= d;
    std::vector<int> hits(numel, 0);
    for (int part = 0; part < 4; part++) {
      const LocalLayout l = local_layout(logical, 4, part, dim);
      const LocalTensor& lt = l.find(t.name);
      for (int64_t i = 0; i < lt.numel(); i++) hits[lt.logical_index(i)]++;
      if (t.name == "h.0.attn.c_attn.weight") {
        EXPECT_EQ(lt.local_shape, (std::vector<int64_t>{32, 24}));
        EXPECT_EQ(lt.split_begin, 24 * part);
        EXPECT_EQ(lt.logical_index(0), 24 * part);        // row 0, first column of the part
        EXPECT_EQ(lt.logical_index(24), 96 + 24 * part);  // row 1
      }
    }
    const int expected = dim(t.name) < 0 ? 4 : 1;  // a whole tensor is on every part
    for (int64_t i = 0; i < numel; i++) ASSERT_EQ(hits[i], expected) << t.name << " " << i;
  }
}

// GPT-2's split: the fused QKV weight cut as (C, 3, C) along its last dimension, so that each of
// the parts holds q, k and v columns of its own heads; every element once, and the inverse map
// (core/split_index.h) finds each element's part and place.
TEST(LocalLayout, TheFusedQkvSplitsByHeadsAndTheInverseFindsEveryElement) {
  const ModelConfig c = small();  // C = 32, 4 heads
  for (int parts : {1, 2, 4}) {
    std::vector<int> hits(32 * 96, 0);
    for (int part = 0; part < parts; part++) {
      const LocalLayout l = tp_local_layout(c, parts, part);
      EXPECT_EQ(l.total, gpt2_param_layout(c, parts).total);
      const LocalTensor& t = l.find("h.1.attn.c_attn.weight");
      EXPECT_EQ(t.logical_shape, (std::vector<int64_t>{32, 96}));
      const int64_t width = 32 / parts;             // columns of q (and of k, and of v) per part
      EXPECT_EQ(t.logical_index(0), part * width);  // q of its first head
      EXPECT_EQ(t.logical_index(width), 32 + part * width);      // k
      EXPECT_EQ(t.logical_index(3 * width), 96 + part * width);  // row 1
      for (int64_t i = 0; i < t.numel(); i++) {
        const int64_t whole = t.logical_index(i);
        hits[whole]++;
        ASSERT_EQ(split_local_index(t.split_shape, t.split_dim, t.parts, t.part, whole), i);
        if (parts > 1) {
          const int other = (part + 1) % parts;
          ASSERT_EQ(split_local_index(t.split_shape, t.split_dim, t.parts, other, whole), -1);
        }
      }
    }
    for (int h : hits) ASSERT_EQ(h, 1) << parts;
  }
}

TEST(LocalLayout, ADimensionThatDoesNotDivideIsAnErrorNamingTheTensor) {
  std::string e = kiln::testing::error_of([] {
    local_layout({{"h.0.mlp.c_fc.weight", {32, 100}}}, 3, 0, [](const std::string&) { return 1; });
  });
  EXPECT_NE(e.find("h.0.mlp.c_fc.weight: dimension 1 of size 100 does not divide into 3 parts"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kiln
