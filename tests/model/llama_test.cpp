// A tiny Llama against PyTorch: tests/fixtures/llama_tiny_ref.safetensors holds float64
// reference values made by tests/fixtures/make_llama_reference.py from Hugging Face's Llama math
// (grouped-query attention with 4 query and 2 key/value heads, Llama 3 rotary scaling, untied
// head, head size 6, SwiGLU width 40). Then the modes (bf16, recompute, flash attention), stages
// and KV-cache decoding against the plain fp32 model.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ckpt/safetensors.h"
#include "core/file.h"
#include "core/rng.h"
#include "model/kv_cache_decoder.h"
#include "model/llama.h"
#include "test_util.h"
#include "train/hf_weights.h"
#include "train/trainer.h"

namespace kiln {
namespace {

constexpr double kRelTol = 1e-5;

// The fixture's config (its metadata holds the Hugging Face config.json).
ModelConfig fixture_config(const SafeTensorsReader& ref, int vocab_multiple) {
  const auto j = nlohmann::json::parse(ref.metadata().at("config"));
  ModelConfig c;
  c.family = "llama";
  c.n_layer = j["num_hidden_layers"];
  c.n_head = j["num_attention_heads"];
  c.n_kv_head = j["num_key_value_heads"];
  c.n_embd = j["hidden_size"];
  c.ffn_hidden = j["intermediate_size"];
  c.block_size = j["max_position_embeddings"];
  c.vocab_size = j["vocab_size"];
  c.padded_vocab_size = pad_vocab(c.vocab_size, vocab_multiple);
  c.norm_eps = j["rms_norm_eps"];
  c.rope_theta = j["rope_theta"];
  const auto& r = j["rope_scaling"];
  c.rope_llama3 = true;
  c.rope_scaling.factor = r["factor"];
  c.rope_scaling.low_freq_factor = r["low_freq_factor"];
  c.rope_scaling.high_freq_factor = r["high_freq_factor"];
  c.rope_scaling.original_max_position_embeddings = r["original_max_position_embeddings"];
  c.tie_embeddings = j["tie_word_embeddings"];
  return c;
}

class LlamaVsTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = std::make_unique<SafeTensorsReader>(
        kiln::testing::source_path("tests/fixtures/llama_tiny_ref.safetensors"));
    cfg_ = fixture_config(*ref_, 64);  // 50 -> 64: the padding is exercised
    B_ = std::stoi(ref_->metadata().at("B"));
    T_ = std::stoi(ref_->metadata().at("T"));
    auto tokens = ref_->read_i32("tokens");
    for (int b = 0; b < B_; b++)
      for (int t = 0; t < T_; t++) {
        inputs_.push_back(tokens[b * (T_ + 1) + t]);
        targets_.push_back(tokens[b * (T_ + 1) + t + 1]);
      }
    layout_ = llama_param_layout(cfg_);
    params_.assign(layout_.total, 0.0f);
    for (const auto& t : layout_.tensors) {
      std::vector<int64_t> shape = t.shape;
      if (shape.size() == 2 && shape[0] == cfg_.padded_vocab_size) shape[0] = cfg_.vocab_size;
      ref_->read_f32(t.name, shape, params_.data() + t.offset);
    }
  }

  // max |a - ref| over max |ref|.
  static double rel_err(const float* a, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
      num = std::max(num, std::abs(a[i] - ref[i]));
      den = std::max(den, std::abs(ref[i]));
    }
    return num / den;
  }

  struct Step {
    double loss = 0;
    std::vector<float> grads;
  };
  Step run(const ModelOptions& o) {
    Llama model(cfg_, B_, T_, o);
    model.set_weights(params_.data());
    Step s;
    s.grads.assign(layout_.total, 0.0f);
    s.loss = model.forward(params_.data(), inputs_.data(), targets_.data(), 1.0f / (B_ * T_));
    model.backward(params_.data(), s.grads.data(), inputs_.data());
    return s;
  }
  static bool same_bits(const Step& a, const Step& b) {
    return std::memcmp(&a.loss, &b.loss, sizeof(double)) == 0 &&
           std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)) == 0;
  }
  // max |a - b| over max |b| over the whole gradient.
  static double grad_diff(const Step& a, const Step& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.grads.size(); i++) {
      num = std::max(num, static_cast<double>(std::abs(a.grads[i] - b.grads[i])));
      den = std::max(den, static_cast<double>(std::abs(b.grads[i])));
    }
    return num / den;
  }

  std::unique_ptr<SafeTensorsReader> ref_;
  ModelConfig cfg_;
  int B_ = 0, T_ = 0;
  std::vector<int32_t> inputs_, targets_;
  ParamLayout layout_;
  std::vector<float> params_;
};

TEST_F(LlamaVsTorch, LogitsAndLossMatchPyTorch) {
  Llama model(cfg_, B_, T_);
  const double loss =
      model.forward(params_.data(), inputs_.data(), targets_.data(), 0.0f) / (B_ * T_);
  const double ref_loss = ref_->read_f64("ref.loss")[0];
  EXPECT_NEAR(loss, ref_loss, kRelTol * std::abs(ref_loss));
  model.forward(params_.data(), inputs_.data(), nullptr, 0.0f);
  std::vector<float> logits;
  for (int m = 0; m < B_ * T_; m++)
    for (int v = 0; v < cfg_.vocab_size; v++)
      logits.push_back(model.logits()[m * cfg_.padded_vocab_size + v]);
  EXPECT_LT(rel_err(logits.data(), ref_->read_f64("ref.logits")), kRelTol);
}

TEST_F(LlamaVsTorch, EveryParameterGradientMatchesPyTorch) {
  const Step s = run({});
  for (const auto& t : layout_.tensors) {
    auto ref = ref_->read_f64("ref.grad." + t.name);
    EXPECT_LT(rel_err(s.grads.data() + t.offset, ref), kRelTol) << t.name;
  }
  for (const char* name : {"model.embed_tokens.weight", "lm_head.weight"}) {
    const auto& t = layout_.find(name);
    for (int64_t i = static_cast<int64_t>(cfg_.vocab_size) * cfg_.n_embd; i < t.numel; i++)
      ASSERT_EQ(s.grads[t.offset + i], 0.0f) << name << ": a padded row has a gradient";
  }
}

TEST_F(LlamaVsTorch, RecomputeGivesTheSameBitsAndFlashAndBf16AgreeClosely) {
  const Step plain = run({});
  for (Recompute r : {Recompute::attention, Recompute::full}) {
    ModelOptions o;
    o.recompute = r;
    EXPECT_TRUE(same_bits(run(o), plain)) << recompute_name(r);
    o.flash_attention = true;
    ModelOptions f;
    f.flash_attention = true;
    EXPECT_TRUE(same_bits(run(o), run(f))) << recompute_name(r) << " with flash attention";
  }
  ModelOptions flash;
  flash.flash_attention = true;
  const Step fl = run(flash);
  EXPECT_NEAR(fl.loss, plain.loss, 1e-5 * plain.loss);
  EXPECT_LT(grad_diff(fl, plain), 1e-4);
  ModelOptions bf;
  bf.bf16 = true;
  const Step b = run(bf);
  EXPECT_NEAR(b.loss, plain.loss, 1e-2 * plain.loss);
  EXPECT_LT(grad_diff(b, plain), 5e-2);
  bf.recompute = Recompute::full;
  EXPECT_TRUE(same_bits(run(bf), b)) << "bf16 with full recompute";
}

TEST_F(LlamaVsTorch, StagesGiveTheWholeModelsBits) {
  const Step whole = run({});
  // Two stages: [0,1) with the embedding, [1,2) with the head, each with its own gradients.
  ModelOptions o1, o2;
  o1.stage = {0, 1, true, false};
  o2.stage = {1, 2, false, true};
  Llama first(cfg_, B_, T_, o1), last(cfg_, B_, T_, o2);
  std::vector<float> g1(layout_.total, 0.0f), g2(layout_.total, 0.0f);
  first.forward_stage(params_.data(), inputs_.data(), nullptr, nullptr, 0.0f);
  const double loss = last.forward_stage(params_.data(), nullptr, first.stage_output(),
                                         targets_.data(), 1.0f / (B_ * T_));
  last.backward_stage(params_.data(), g2.data(), nullptr, nullptr);
  first.backward_stage(params_.data(), g1.data(), inputs_.data(), last.input_grad());
  EXPECT_EQ(loss, whole.loss);
  for (size_t i = 0; i < g1.size(); i++) ASSERT_EQ(g1[i] + g2[i], whole.grads[i]) << i;
}

TEST_F(LlamaVsTorch, KvCacheDecodingMatchesTheFullForward) {
  Llama model(cfg_, 1, T_);
  model.forward(params_.data(), inputs_.data(), nullptr, 0.0f);
  KvCacheDecoder dec(cfg_, params_.data());
  for (int t = 0; t < T_; t++) {
    const float* got = dec.step(inputs_[t]);
    const float* want = model.logits() + static_cast<int64_t>(t) * cfg_.padded_vocab_size;
    double num = 0, den = 0;
    for (int v = 0; v < cfg_.vocab_size; v++) {
      num = std::max(num, static_cast<double>(std::abs(got[v] - want[v])));
      den = std::max(den, static_cast<double>(std::abs(want[v])));
    }
    EXPECT_LT(num / den, 1e-5) << "position " << t;
  }
}

// The trainer, started from the Hugging Face directory the script wrote (--init-from DIR), takes
// the same ten AdamW steps as PyTorch.
TEST_F(LlamaVsTorch, TenAdamWStepsFromTheHuggingFaceDirectoryMatchPyTorch) {
  const auto& md = ref_->metadata();
  kiln::testing::TempDir dir;
  const std::string toml = fmt::format(
      "[model]\nfamily=\"llama\"\nn_layer={}\nn_head={}\nn_kv_head={}\nn_embd={}\n"
      "ffn_hidden={}\nblock_size={}\nvocab_size={}\nvocab_multiple=64\nnorm_eps={}\n"
      "rope_theta={}\nrope_scaling=\"llama3\"\nrope_factor={}\nrope_low_freq_factor={}\n"
      "rope_high_freq_factor={}\nrope_original_max_position={}\n"
      "[train]\nbatch_size={}\nseq_len={}\nsteps={}\nlr={}\nmin_lr={}\nwarmup_steps={}\n"
      "weight_decay={}\nbeta1={}\nbeta2={}\neps={}\ngrad_clip={}\nout_dir=\"{}\"\n"
      "init_from=\"{}\"\n[hardware]\npeak_gflops=100.0\n",
      cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head, cfg_.n_embd, cfg_.ffn_hidden, cfg_.block_size,
      cfg_.vocab_size, cfg_.norm_eps, cfg_.rope_theta, cfg_.rope_scaling.factor,
      cfg_.rope_scaling.low_freq_factor, cfg_.rope_scaling.high_freq_factor,
      cfg_.rope_scaling.original_max_position_embeddings, B_, T_, md.at("steps"), md.at("max_lr"),
      md.at("min_lr"), md.at("warmup"), md.at("weight_decay"), md.at("beta1"), md.at("beta2"),
      md.at("eps"), md.at("grad_clip"), dir / "run",
      kiln::testing::source_path("tests/fixtures/llama_tiny_hf"));
  TrainConfig cfg = parse_train_config(toml, "test", {});
  TrainerOptions opts;
  opts.quiet = true;
  opts.batches = [&](int32_t* in, int32_t* tg) {
    std::copy(inputs_.begin(), inputs_.end(), in);
    std::copy(targets_.begin(), targets_.end(), tg);
  };
  Trainer trainer(cfg, opts);
  const auto losses = ref_->read_f64("adamw.losses");
  const auto norms = ref_->read_f64("adamw.grad_norms");
  for (size_t s = 0; s < losses.size(); s++) {
    StepResult r = trainer.step();
    EXPECT_NEAR(r.loss, losses[s], kRelTol * losses[s]) << "step " << s;
    EXPECT_NEAR(r.grad_norm, norms[s], kRelTol * norms[s]) << "step " << s;
  }
  for (const auto& t : layout_.tensors) {
    const auto ref = ref_->read_f64("adamw.final." + t.name);
    EXPECT_LT(rel_err(trainer.params() + t.offset, ref), 1e-3) << t.name;
  }
  // A config that does not match the directory's config.json is refused, naming the key.
  TrainConfig other =
      parse_train_config(toml, "test", {"model.ffn_hidden=48", "train.out_dir=" + (dir / "other")});
  const std::string err = kiln::testing::error_of([&] { Trainer t(other, opts); });
  EXPECT_NE(err.find("model.ffn_hidden"), std::string::npos) << err;
}

// The same weights split into two files with a model.safetensors.index.json, as Hugging Face
// writes large models, read the same.
TEST_F(LlamaVsTorch, ShardedHuggingFaceDirectoryReadsLikeOneFile) {
  kiln::testing::TempDir dir;
  std::vector<SafeTensorOut> a, b;
  nlohmann::json map;
  const auto all = named_tensors(layout_, cfg_, params_.data());
  for (size_t i = 0; i < all.size(); i++) {
    const std::string f = i < all.size() / 2 ? "model-00001-of-00002.safetensors"
                                             : "model-00002-of-00002.safetensors";
    (i < all.size() / 2 ? a : b).push_back(all[i]);
    map[all[i].name] = f;
  }
  write_safetensors(dir / "model-00001-of-00002.safetensors", a, {{"format", "pt"}});
  write_safetensors(dir / "model-00002-of-00002.safetensors", b, {{"format", "pt"}});
  write_file_atomic(dir / "model.safetensors.index.json",
                    nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump());
  std::vector<float> got(layout_.total, -1.0f);
  load_tensors(TensorFiles(dir.path()), layout_, cfg_, got.data());
  EXPECT_EQ(got, params_);
  // A tensor missing from every shard is named.
  map.erase("model.norm.weight");
  write_file_atomic(dir / "model.safetensors.index.json",
                    nlohmann::json{{"metadata", {}}, {"weight_map", map}}.dump());
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    std::vector<SafeTensorOut>(b.begin(), b.end() - 2), {{"format", "pt"}});
  const std::string err = kiln::testing::error_of(
      [&] { load_tensors(TensorFiles(dir.path()), layout_, cfg_, got.data()); });
  EXPECT_NE(err.find("model.norm.weight"), std::string::npos) << err;
}

TEST(Llama, ConfigErrorsNameTheField) {
  ModelConfig c{2, 4, 24, 16, 50, 64};
  c.family = "llama";
  c.ffn_hidden = 40;
  c.n_kv_head = 3;
  EXPECT_THROW(
      {
        try {
          Llama m(c, 1, 4);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("model.n_kv_head"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  c.n_kv_head = 2;
  c.ffn_hidden = 0;
  EXPECT_THROW(Llama m(c, 1, 4), Error);
  c.ffn_hidden = 40;
  c.n_embd = 20;  // head size 5: odd, no rotary pairs
  EXPECT_THROW(Llama m(c, 1, 4), Error);
}

TEST(Llama, LayoutCountsMatchTheSpecAndTiedHeadSharesTheEmbedding) {
  ModelConfig c{3, 4, 32, 16, 100, 128};
  c.family = "llama";
  c.n_kv_head = 2;
  c.ffn_hidden = 88;
  ModelConfig u = c;
  u.padded_vocab_size = u.vocab_size;
  EXPECT_EQ(llama_param_layout(u).total, num_params(c));
  EXPECT_EQ(llama_param_layout(c).total, count_params(model_spec(c)).total);
  c.tie_embeddings = true;
  const ParamLayout tied = llama_param_layout(c);
  EXPECT_EQ(tied.total, count_params(model_spec(c)).total);
  EXPECT_THROW(tied.find("lm_head.weight"), Error);
  // Tied: the gradient of the embedding sums the head's and the lookup's, and matches two
  // untied copies' gradients summed.
  std::vector<float> p(tied.total);
  init_params(tied, c, p.data(), 5);
  Rng rng(3);
  for (auto& x : p) x += static_cast<float>(rng.normal() * 0.05);
  std::vector<int32_t> in(2 * 8), tg(2 * 8);
  for (auto& t : in) t = static_cast<int32_t>(rng.below(c.vocab_size));
  for (auto& t : tg) t = static_cast<int32_t>(rng.below(c.vocab_size));
  Llama m(c, 2, 8);
  std::vector<float> g(tied.total);
  const double loss = m.forward(p.data(), in.data(), tg.data(), 1.0f / 16);
  m.backward(p.data(), g.data(), in.data(), {}, {}, /*accumulate=*/false);
  ModelConfig cu = c;
  cu.tie_embeddings = false;
  const ParamLayout untied = llama_param_layout(cu);
  std::vector<float> pu(untied.total);
  std::copy(p.begin(), p.end(), pu.begin());  // the same tensors, then lm_head = embed
  const auto& head = untied.find("lm_head.weight");
  std::copy(p.begin(), p.begin() + head.numel, pu.begin() + head.offset);
  Llama mu(cu, 2, 8);
  std::vector<float> gu(untied.total);
  EXPECT_EQ(mu.forward(pu.data(), in.data(), tg.data(), 1.0f / 16), loss);
  mu.backward(pu.data(), gu.data(), in.data(), {}, {}, /*accumulate=*/false);
  double num = 0, den = 0;
  for (int64_t i = 0; i < head.numel; i++) {
    const double want = static_cast<double>(gu[i]) + gu[head.offset + i];
    num = std::max(num, std::abs(g[i] - want));
    den = std::max(den, std::abs(want));
  }
  EXPECT_LT(num / den, 1e-6);
}

}  // namespace
}  // namespace kiln
