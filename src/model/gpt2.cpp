#include "model/gpt2.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace kiln {

void Gpt2Config::validate() const {
  auto positive = [](int v, const char* name) {
    if (v <= 0) fail("model.{} must be positive, got {}", name, v);
  };
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  if (n_embd % n_head != 0)
    fail("model.n_embd ({}) must be divisible by model.n_head ({})", n_embd, n_head);
  if (padded_vocab_size < vocab_size)
    fail("padded vocabulary {} is smaller than model.vocab_size {}", padded_vocab_size, vocab_size);
}

int pad_vocab(int vocab, int multiple) {
  if (multiple <= 1) return vocab;
  return (vocab + multiple - 1) / multiple * multiple;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  fail("no parameter named '{}'", name);
}

ParamLayout gpt2_param_layout(const Gpt2Config& c) {
  ParamLayout L;
  const int64_t C = c.n_embd;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    ParamTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.numel = 1;
    for (auto d : t.shape) t.numel *= d;
    t.offset = L.total;
    t.decay = decay;
    L.total += t.numel;
    L.tensors.push_back(std::move(t));
  };
  add("wte.weight", {c.padded_vocab_size, C}, true);
  add("wpe.weight", {c.block_size, C}, true);
  for (int l = 0; l < c.n_layer; l++) {
    std::string p = "h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, false);
    add(p + "ln_1.bias", {C}, false);
    add(p + "attn.c_attn.weight", {C, 3 * C}, true);
    add(p + "attn.c_attn.bias", {3 * C}, false);
    add(p + "attn.c_proj.weight", {C, C}, true);
    add(p + "attn.c_proj.bias", {C}, false);
    add(p + "ln_2.weight", {C}, false);
    add(p + "ln_2.bias", {C}, false);
    add(p + "mlp.c_fc.weight", {C, 4 * C}, true);
    add(p + "mlp.c_fc.bias", {4 * C}, false);
    add(p + "mlp.c_proj.weight", {4 * C, C}, true);
    add(p + "mlp.c_proj.bias", {C}, false);
  }
  add("ln_f.weight", {C}, false);
  add("ln_f.bias", {C}, false);
  return L;
}

ModelParams view_params(const ParamLayout& layout, const Gpt2Config& c, float* base) {
  ModelParams p;
  size_t i = 0;
  auto next = [&]() { return base + layout.tensors[i++].offset; };
  p.wte = next();
  p.wpe = next();
  p.h.resize(c.n_layer);
  for (auto& b : p.h) {
    b.ln1_w = next();
    b.ln1_b = next();
    b.qkv_w = next();
    b.qkv_b = next();
    b.attproj_w = next();
    b.attproj_b = next();
    b.ln2_w = next();
    b.ln2_b = next();
    b.fc_w = next();
    b.fc_b = next();
    b.fcproj_w = next();
    b.fcproj_b = next();
  }
  p.lnf_w = next();
  p.lnf_b = next();
  return p;
}

void gpt2_init(const ParamLayout& layout, const Gpt2Config& c, float* params, uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (size_t i = 0; i < layout.tensors.size(); i++) {
    const ParamTensor& t = layout.tensors[i];
    float* p = params + t.offset;
    auto ends_with = [&](const char* s) {
      std::string suffix(s);
      return t.name.size() >= suffix.size() &&
             t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (t.shape.size() == 2) {
      double std =
          (ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight")) ? residual_std : 0.02;
      int64_t n = t.numel;
      if (t.name == "wte.weight") n = static_cast<int64_t>(c.vocab_size) * c.n_embd;
      Rng rng(mix_seed(seed, i));
      for (int64_t j = 0; j < n; j++) p[j] = static_cast<float>(rng.normal() * std);
      for (int64_t j = n; j < t.numel; j++) p[j] = 0.0f;
    } else {
      float v = ends_with(".weight") ? 1.0f : 0.0f;  // LayerNorm weights; biases are zero
      for (int64_t j = 0; j < t.numel; j++) p[j] = v;
    }
  }
}

int64_t gpt2_activation_floats(const Gpt2Config& c, int B, int T) {
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head;
  int64_t per_block = BT * C * 5 + BT * 4 + BT * 3 * C + NH * BT * T + BT * 4 * C * 2;
  return BT * C + c.n_layer * per_block + BT * C + BT * 2 + BT * c.padded_vocab_size + BT;
}

int64_t gpt2_scratch_floats(const Gpt2Config& c, int B, int T) {
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head;
  return BT * C * 3 + BT * 3 * C + NH * BT * T + BT * 4 * C * 2;
}

Gpt2::Gpt2(const Gpt2Config& c, int B, int T) : cfg_(c), B_(B), T_(T) {
  c.validate();
  if (T > c.block_size) fail("sequence length {} exceeds model.block_size {}", T, c.block_size);
  layout_ = gpt2_param_layout(c);
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head;

  acts_.B = B;
  acts_.T = T;
  acts_.mem.resize(gpt2_activation_floats(c, B, T));
  float* p = acts_.mem.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  acts_.encoded = take(BT * C);
  acts_.h.resize(c.n_layer);
  for (auto& b : acts_.h) {
    b.ln1 = take(BT * C);
    b.ln1_mean = take(BT);
    b.ln1_rstd = take(BT);
    b.qkv = take(BT * 3 * C);
    b.atty = take(BT * C);
    b.att = take(NH * BT * T);
    b.residual2 = take(BT * C);
    b.ln2 = take(BT * C);
    b.ln2_mean = take(BT);
    b.ln2_rstd = take(BT);
    b.fch = take(BT * 4 * C);
    b.fch_gelu = take(BT * 4 * C);
    b.residual3 = take(BT * C);
  }
  acts_.lnf = take(BT * C);
  acts_.lnf_mean = take(BT);
  acts_.lnf_rstd = take(BT);
  acts_.logits = take(BT * c.padded_vocab_size);
  acts_.losses = take(BT);
  KILN_CHECK(p == acts_.mem.data() + acts_.mem.size());

  scratch_.mem.resize(gpt2_scratch_floats(c, B, T));
  p = scratch_.mem.data();
  scratch_.dresidual = take(BT * C);
  scratch_.dln = take(BT * C);
  scratch_.datty = take(BT * C);
  scratch_.dqkv = take(BT * 3 * C);
  scratch_.datt = take(NH * BT * T);
  scratch_.dfch = take(BT * 4 * C);
  scratch_.dfch_gelu = take(BT * 4 * C);
  KILN_CHECK(p == scratch_.mem.data() + scratch_.mem.size());
}

namespace {

// Times a region into one of the profile's counters when profiling is on.
class Timed {
 public:
  Timed(Profile& p, double Profile::*field)
      : p_(p), field_(field), t0_(p.enabled ? now_seconds() : 0) {}
  ~Timed() {
    if (p_.enabled) p_.*field_ += now_seconds() - t0_;
  }

 private:
  Profile& p_;
  double Profile::*field_;
  double t0_;
};

// y(M,N) = x(M,K) @ W(K,N) + b
void linear_forward(float* y, const float* x, const float* w, const float* b, int64_t M, int64_t K,
                    int64_t N, bool accumulate = false) {
  matmul(MatmulShape{M, N, K, false, false, accumulate, true}, x, w, y, b);
}

// dx(M,K) = dy @ W^T (written, or accumulated); dW(K,N) += x^T @ dy; db(N) += colsum(dy).
void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* w, int64_t M, int64_t K, int64_t N) {
  matmul(MatmulShape{K, N, M, true, false, true, false}, x, dy, dw);
  bias_backward(db, dy, M, static_cast<int>(N));
  matmul(MatmulShape{M, K, N, false, true, false, false}, dy, w, dx);
}

}  // namespace

double Gpt2::forward(const float* params, const int32_t* inputs, const int32_t* targets,
                     float dloss, const BlockHooks& hooks) {
  const Gpt2Config& c = cfg_;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head;
  const int64_t BT = static_cast<int64_t>(B) * T;
  ModelParams P = view_params(layout_, c, const_cast<float*>(params));
  Activations& A = acts_;

  {
    Timed t(profile_, &Profile::embedding);
    encoder_forward(A.encoded, inputs, P.wte, P.wpe, B, T, C);
  }
  const float* residual = A.encoded;
  for (int l = 0; l < c.n_layer; l++) {
    if (hooks.before) hooks.before(l);
    const BlockParams& W = P.h[l];
    Activations::Block& a = A.h[l];
    {
      Timed t(profile_, &Profile::layernorm);
      layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, W.ln1_w, W.ln1_b, BT, C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_forward(a.qkv, a.ln1, W.qkv_w, W.qkv_b, BT, C, 3 * C);
    }
    {
      Timed t(profile_, &Profile::attention);
      attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    }
    {
      Timed t(profile_, &Profile::residual);
      copy(a.residual2, residual, BT * C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_forward(a.residual2, a.atty, W.attproj_w, W.attproj_b, BT, C, C, true);
    }
    {
      Timed t(profile_, &Profile::layernorm);
      layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, W.ln2_w, W.ln2_b, BT, C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_forward(a.fch, a.ln2, W.fc_w, W.fc_b, BT, C, 4 * C);
    }
    {
      Timed t(profile_, &Profile::gelu);
      gelu_forward(a.fch_gelu, a.fch, BT * 4 * C);
    }
    {
      Timed t(profile_, &Profile::residual);
      copy(a.residual3, a.residual2, BT * C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_forward(a.residual3, a.fch_gelu, W.fcproj_w, W.fcproj_b, BT, 4 * C, C, true);
    }
    residual = a.residual3;
    if (hooks.after) hooks.after(l);
  }
  {
    Timed t(profile_, &Profile::layernorm);
    layernorm_forward(A.lnf, A.lnf_mean, A.lnf_rstd, residual, P.lnf_w, P.lnf_b, BT, C);
  }
  {
    Timed t(profile_, &Profile::lm_head);
    // logits(BT,Vp) = lnf(BT,C) @ wte^T
    matmul(MatmulShape{BT, c.padded_vocab_size, C, false, true, false, false}, A.lnf, P.wte,
           A.logits);
  }
  if (!targets) return 0.0;
  Timed t(profile_, &Profile::loss);
  softmax_cross_entropy(A.logits, A.losses, targets, BT, c.vocab_size, c.padded_vocab_size, dloss);
  double sum = 0;
  for (int64_t i = 0; i < BT; i++) sum += A.losses[i];
  return sum;
}

void Gpt2::backward(const float* params, float* grads, const int32_t* inputs,
                    const GradsReady& ready, const BlockHooks& hooks) {
  const Gpt2Config& c = cfg_;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head;
  const int64_t BT = static_cast<int64_t>(B) * T;
  ModelParams P = view_params(layout_, c, const_cast<float*>(params));
  ModelParams G = view_params(layout_, c, grads);
  Activations& A = acts_;
  GradScratch& S = scratch_;

  {
    Timed t(profile_, &Profile::lm_head);
    // dwte(Vp,C) += dlogits^T @ lnf;  dlnf(BT,C) = dlogits @ wte
    matmul(MatmulShape{c.padded_vocab_size, C, BT, true, false, true, false}, A.logits, A.lnf,
           G.wte);
    matmul(MatmulShape{BT, C, c.padded_vocab_size, false, false, false, false}, A.logits, P.wte,
           S.dln);
  }
  {
    Timed t(profile_, &Profile::layernorm);
    std::fill(S.dresidual, S.dresidual + BT * C, 0.0f);
    const float* last = c.n_layer > 0 ? A.h[c.n_layer - 1].residual3 : A.encoded;
    layernorm_backward(S.dresidual, G.lnf_w, G.lnf_b, S.dln, last, P.lnf_w, A.lnf_mean, A.lnf_rstd,
                       BT, C);
  }
  // Block l's parameters are the range [block_begin(l), block_begin(l+1)); ln_f follows the last.
  auto block_begin = [&](int l) {
    return static_cast<int64_t>(P.h.empty() || l >= c.n_layer ? P.lnf_w - params
                                                              : P.h[l].ln1_w - params);
  };
  if (ready) ready(block_begin(c.n_layer), layout_.total);
  for (int l = c.n_layer - 1; l >= 0; l--) {
    if (hooks.before) hooks.before(l);
    const BlockParams& W = P.h[l];
    BlockParams& D = G.h[l];
    Activations::Block& a = A.h[l];
    const float* residual = l == 0 ? A.encoded : A.h[l - 1].residual3;
    {
      Timed t(profile_, &Profile::matmul);
      linear_backward(S.dfch_gelu, D.fcproj_w, D.fcproj_b, S.dresidual, a.fch_gelu, W.fcproj_w, BT,
                      4 * C, C);
    }
    {
      Timed t(profile_, &Profile::gelu);
      gelu_backward(S.dfch, a.fch, S.dfch_gelu, BT * 4 * C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_backward(S.dln, D.fc_w, D.fc_b, S.dfch, a.ln2, W.fc_w, BT, C, 4 * C);
    }
    {
      Timed t(profile_, &Profile::layernorm);
      layernorm_backward(S.dresidual, D.ln2_w, D.ln2_b, S.dln, a.residual2, W.ln2_w, a.ln2_mean,
                         a.ln2_rstd, BT, C);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_backward(S.datty, D.attproj_w, D.attproj_b, S.dresidual, a.atty, W.attproj_w, BT, C,
                      C);
    }
    {
      Timed t(profile_, &Profile::attention);
      attention_backward(S.dqkv, S.datt, S.datty, a.qkv, a.att, B, T, C, NH);
    }
    {
      Timed t(profile_, &Profile::matmul);
      linear_backward(S.dln, D.qkv_w, D.qkv_b, S.dqkv, a.ln1, W.qkv_w, BT, C, 3 * C);
    }
    {
      Timed t(profile_, &Profile::layernorm);
      layernorm_backward(S.dresidual, D.ln1_w, D.ln1_b, S.dln, residual, W.ln1_w, a.ln1_mean,
                         a.ln1_rstd, BT, C);
    }
    if (hooks.after) hooks.after(l);
    if (ready) ready(block_begin(l), block_begin(l + 1));
  }
  {
    Timed t(profile_, &Profile::embedding);
    encoder_backward(G.wte, G.wpe, S.dresidual, inputs, B, T, C);
  }
  if (ready) ready(0, block_begin(0));
}

int64_t gpt2_num_params(const Gpt2Config& c) {
  Gpt2Config u = c;
  u.padded_vocab_size = c.vocab_size;
  return gpt2_param_layout(u).total;
}

double gpt2_flops_per_token(const Gpt2Config& c, int T) {
  return 6.0 * static_cast<double>(gpt2_num_params(c)) +
         12.0 * c.n_layer * static_cast<double>(c.n_embd) * T;
}

}  // namespace kiln
