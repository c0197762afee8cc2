#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/llama_kernels.h"
#include "kernels/matmul.h"

namespace kiln {

namespace {

int64_t qkv_width(const ModelConfig& c) {
  return static_cast<int64_t>(c.n_head + 2 * c.kv_heads()) * c.head_dim();
}

}  // namespace

ParamLayout llama_param_layout(const ModelConfig& c) {
  ParamLayout L;
  const int64_t C = c.n_embd, KV = static_cast<int64_t>(c.kv_heads()) * c.head_dim(),
                F = c.ffn_hidden, Vp = c.padded_vocab_size;
  L.add("model.embed_tokens.weight", {Vp, C}, true);
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    L.blocks.push_back(L.total);
    L.add(p + "input_layernorm.weight", {C}, false);
    L.add(p + "self_attn.q_proj.weight", {C, C}, true);
    L.add(p + "self_attn.k_proj.weight", {KV, C}, true);
    L.add(p + "self_attn.v_proj.weight", {KV, C}, true);
    L.add(p + "self_attn.o_proj.weight", {C, C}, true);
    L.add(p + "post_attention_layernorm.weight", {C}, false);
    L.add(p + "mlp.gate_proj.weight", {F, C}, true);
    L.add(p + "mlp.up_proj.weight", {F, C}, true);
    L.add(p + "mlp.down_proj.weight", {C, F}, true);
  }
  L.blocks.push_back(L.total);
  L.add("model.norm.weight", {C}, false);
  if (!c.tie_embeddings) L.add("lm_head.weight", {Vp, C}, true);
  return L;
}

namespace {

Llama::Params view(const ParamLayout& layout, const ModelConfig& c, float* base) {
  Llama::Params p;
  size_t i = 0;
  auto next = [&]() { return base + layout.tensors.at(i++).offset; };
  p.embed = next();
  p.h.resize(c.n_layer);
  for (auto& b : p.h) {
    b.ln1 = next();
    b.qkv = next();  // q_proj; k_proj and v_proj follow it
    i += 2;
    b.o = next();
    b.ln2 = next();
    b.gate = next();  // gate_proj; up_proj follows it
    i += 1;
    b.down = next();
  }
  p.norm = next();
  p.lm_head = c.tie_embeddings ? p.embed : next();
  KILN_CHECK(i == layout.tensors.size());
  return p;
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

}  // namespace

void llama_init(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  for (size_t i = 0; i < layout.tensors.size(); i++) {
    const ParamTensor& t = layout.tensors[i];
    float* p = params + t.offset;
    if (t.shape.size() == 2) {
      const bool residual =
          ends_with(t.name, "o_proj.weight") || ends_with(t.name, "down_proj.weight");
      int64_t n = t.numel;
      if (t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight")
        n = static_cast<int64_t>(c.vocab_size) * c.n_embd;  // padded rows stay zero
      init_normal(p, n, residual ? residual_std : 0.02, mix_seed(seed, i));
      std::fill(p + n, p + t.numel, 0.0f);
    } else {
      std::fill(p, p + t.numel, 1.0f);  // RMSNorm weights
    }
  }
}

ModelSpec llama_spec(const ModelConfig& c, bool padded, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.family = "llama";
  m.n_layer = c.n_layer;
  m.hidden = c.n_embd;
  m.n_head = c.n_head;
  m.n_kv_head = c.kv_heads();
  m.ffn_hidden = c.ffn_hidden;
  m.vocab = padded ? c.padded_vocab_size : c.vocab_size;
  m.max_seq = c.block_size;
  m.ffn = FfnKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.learned_positions = false;
  m.bias = false;
  m.tied_embeddings = c.tie_embeddings;
  return m;
}

// ---- activations ------------------------------------------------------------------------------

ActivationBytes llama_plan_activations(const ModelConfig& c, int B, int T, const ModelOptions& opts,
                                       Llama::Activations* A) {
  using Activations = Llama::Activations;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head,
                Vp = c.padded_vocab_size, F = c.ffn_hidden, QKV = qkv_width(c);
  const bool bf = opts.bf16, full = opts.recompute == Recompute::full;
  const bool flash = opts.flash_attention;
  // With flash attention a block keeps the row log-sum-exps (B,NH,T), too small to recompute.
  const bool att_shared = full || (opts.recompute == Recompute::attention && !flash);
  Activations dummy;
  const bool fill = A != nullptr;
  if (!fill) A = &dummy;
  // A tensor is kept per block, or shared by all blocks (by field number).
  ActivationPlanner p(fill ? A->mem.data() : nullptr, fill ? A->mem_bf16.data() : nullptr);
  const StageSpec& st = opts.stage;
  const int last = st.last < 0 ? c.n_layer : st.last;
  A->encoded = p.take(BT * C);
  A->h.assign(c.n_layer, Activations::Block{});
  for (int l = st.first; l < last; l++) {
    Activations::Block& b = A->h[l];
    b.ln1 = bf ? nullptr : p.field(full, 0, BT * C);
    b.ln1_bf = bf ? p.field_bf(full, 0, BT * C) : nullptr;
    b.rstd1 = p.field(full, 1, BT);
    b.qkv = p.field(full || bf, 2, BT * QKV);
    b.qkv_bf = bf ? p.field_bf(full, 2, BT * QKV) : nullptr;
    b.atty = p.field(full || (bf && !flash), 3, BT * C);  // flash backward reads it
    b.atty_bf = bf ? p.field_bf(full, 3, BT * C) : nullptr;
    b.att = p.field(att_shared, 4, flash ? NH * BT : NH * BT * T);
    b.residual2 = p.field(full, 5, BT * C);
    b.ln2 = bf ? nullptr : p.field(full, 6, BT * C);
    b.ln2_bf = bf ? p.field_bf(full, 6, BT * C) : nullptr;
    b.rstd2 = p.field(full, 7, BT);
    b.gu = p.field(full || bf, 8, BT * 2 * F);
    b.gu_bf = bf ? p.field_bf(full, 8, BT * 2 * F) : nullptr;
    b.act = bf ? nullptr : p.field(full, 9, BT * F);
    b.act_bf = bf ? p.field_bf(full, 9, BT * F) : nullptr;
    b.residual3 = p.take(BT * C);  // the next block's input: always kept
  }
  p.head();
  A->lnf = A->rstdf = A->logits = A->losses = nullptr;
  A->lnf_bf = A->dlogits_bf = nullptr;
  if (st.head) {
    A->lnf = bf ? nullptr : p.take(BT * C);
    A->lnf_bf = bf ? p.take_bf(BT * C) : nullptr;
    A->rstdf = p.take(BT);
    A->logits = p.take((bf ? head_chunk_rows(BT) : BT) * Vp);
    A->dlogits_bf = bf ? p.take_bf(BT * Vp) : nullptr;
    A->losses = p.take(BT);
  }
  ActivationBytes bytes =
      p.finish(static_cast<int64_t>(A->mem.size()), static_cast<int64_t>(A->mem_bf16.size()));
  const int64_t datt = flash ? attention_flash_scratch_floats(B, T, c.n_head) : NH * BT * T;
  bytes.scratch = (BT * C * 4 + BT * QKV + datt + (bf ? 0 : BT * 2 * F) + BT * F) * 4;
  if (bf) bytes.scratch += BT * std::max({2 * F, QKV, C}) * 2;
  return bytes;
}

Llama::Llama(const ModelConfig& c, int B, int T, ModelOptions opts)
    : Model(c, B, T, opts, llama_param_layout(c)) {
  if (!c.llama()) fail("model.family = \"{}\" is not a Llama", c.family);
  NKV_ = c.kv_heads();
  hs_ = c.head_dim();
  QKV_ = static_cast<int>(qkv_width(c));
  F_ = c.ffn_hidden;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head, F = F_, QKV = QKV_;
  const bool bf = opts_.bf16;
  ActivationBytes sizes = llama_plan_activations(c, B, T, opts_, nullptr);
  slots_.resize(opts_.slots);
  for (Activations& a : slots_) {
    a.mem.resize(sizes.fp32_floats);
    a.mem_bf16.resize(sizes.bf16_values);
    act_bytes_ = llama_plan_activations(c, B, T, opts_, &a);
  }
  cur_ = &slots_[0];

  const int64_t datt =
      opts_.flash_attention ? attention_flash_scratch_floats(B, T, c.n_head) : NH * BT * T;
  scratch_.mem.resize(BT * C * 4 + BT * QKV + datt + (bf ? 0 : BT * 2 * F) + BT * F);
  float* p = scratch_.mem.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  scratch_.proj = take(BT * C);
  scratch_.dresidual = take(BT * C);
  scratch_.dln = take(BT * C);
  scratch_.datty = take(BT * C);
  scratch_.dqkv = take(BT * QKV);
  scratch_.datt = take(datt);
  scratch_.dgu = bf ? nullptr : take(BT * 2 * F);  // bf16: made straight into dout_bf
  scratch_.dact = take(BT * F);
  KILN_CHECK(p == scratch_.mem.data() + scratch_.mem.size());
  scratch_.dout_bf = nullptr;
  if (bf) {
    scratch_.mem_bf16.resize(BT * std::max({2 * F, QKV, C}));
    scratch_.dout_bf = scratch_.mem_bf16.data();
  }
  KILN_CHECK(act_bytes_.scratch ==
             static_cast<int64_t>(scratch_.mem.bytes() + scratch_.mem_bf16.bytes()));

  rope_cos_.resize(static_cast<int64_t>(c.block_size) * hs_ / 2);
  rope_sin_.resize(static_cast<int64_t>(c.block_size) * hs_ / 2);
  rope_table(rope_cos_.data(), rope_sin_.data(), c.block_size, hs_,
             static_cast<float>(c.rope_theta), c.rope_llama3 ? &c.rope_scaling : nullptr);
  if (opts_.kv_cache) {
    for (int l = 0; l < c.n_layer; l++) {
      k_cache_.emplace_back(static_cast<int64_t>(c.block_size) * NKV_ * hs_);
      v_cache_.emplace_back(static_cast<int64_t>(c.block_size) * NKV_ * hs_);
    }
    decode_scores_.resize(c.block_size);
  }
}

void Llama::set_params(const float* params) {
  // bf16: a copy of exactly these parameters (set_weights or the lent copy, after each update).
  if (opts_.bf16) KILN_CHECK(weights_ && weights_->source() == params);
  if (params != params_) {
    P_ = view(layout_, cfg_, const_cast<float*>(params));
    params_ = params;
  }
}

const float* Llama::logits() const {
  return head_logits(slots_[0].logits);
}

const float* Llama::stage_output(int slot) const {
  const Activations& A = slots_.at(slot);
  return opts_.stage.last > opts_.stage.first ? A.h[opts_.stage.last - 1].residual3 : A.encoded;
}

// ---- forward ----------------------------------------------------------------------------------

// One block's forward from its input `residual` into the current slot's h[l].
void Llama::block_forward(int l, const float* residual) {
  const ModelConfig& c = cfg_;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head, NKV = NKV_, hs = hs_;
  const int64_t BT = static_cast<int64_t>(B) * T, F = F_, QKV = QKV_;
  const bool bf = opts_.bf16;
  const BlockParams& W = P_.h[l];
  Activations::Block& a = cur_->h[l];
  // y (+)= x @ w^T, from the fp32 x or its bf16 copy; w is (N,K).
  auto linear = [&](float* y, const float* x, const bf16* x_bf, const float* w, int64_t K,
                    int64_t N, bool accumulate) {
    ProfileTimer t(profile_, &Profile::matmul);
    const MatmulShape s{BT, N, K, false, true, accumulate, false};
    if (bf)
      matmul_bf16(s, x_bf, wbf(w), y);
    else
      matmul(s, x, w, y);
  };
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_forward_fused(nullptr, a.ln1, a.ln1_bf, a.rstd1, residual, nullptr, W.ln1, BT, C,
                          static_cast<float>(c.norm_eps));
  }
  linear(a.qkv, a.ln1, a.ln1_bf, W.qkv, C, QKV, false);
  {
    ProfileTimer t(profile_, &Profile::attention);
    if (opts_.kv_cache) {  // decoding one position: its key and value join the cache
      rope_forward_row(a.qkv, rope_cos_.data(), rope_sin_.data(), decode_pos_, NH, NKV, hs);
      const int64_t kv = static_cast<int64_t>(NKV) * hs, at = decode_pos_ * kv;
      copy(k_cache_[l].data() + at, a.qkv + C, kv);
      copy(v_cache_[l].data() + at, a.qkv + C + kv, kv);
      attention_decode_gqa(a.atty, decode_scores_.data(), a.qkv, k_cache_[l].data(),
                           v_cache_[l].data(), decode_pos_ + 1, NH, NKV, hs);
    } else {
      rope_forward(a.qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, hs);
      if (bf) round_to_bf16(a.qkv, a.qkv_bf, BT * QKV);
      if (opts_.flash_attention)
        attention_forward_flash_gqa(a.atty, a.att, scratch_.datt, a.qkv, B, T, NH, NKV, hs);
      else
        attention_forward_gqa(a.atty, a.att, a.qkv, B, T, NH, NKV, hs);
    }
    if (bf) to_bf16(a.atty_bf, a.atty, BT * C);
  }
  // residual2 = residual + proj, added in the RMSNorm's pass over the rows.
  linear(scratch_.proj, a.atty, a.atty_bf, W.o, C, C, false);
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_forward_fused(a.residual2, a.ln2, a.ln2_bf, a.rstd2, residual, scratch_.proj, W.ln2, BT,
                          C, static_cast<float>(c.norm_eps));
  }
  linear(a.gu, a.ln2, a.ln2_bf, W.gate, C, 2 * F, false);
  {
    ProfileTimer t(profile_, &Profile::activation);
    if (bf) {
      round_to_bf16(a.gu, a.gu_bf, BT * 2 * F);
      swiglu_forward_bf16(a.act_bf, a.gu, BT, static_cast<int>(F));
    } else {
      swiglu_forward(a.act, a.gu, BT, static_cast<int>(F));
    }
  }
  {
    ProfileTimer t(profile_, &Profile::residual);
    copy(a.residual3, a.residual2, BT * C);
  }
  linear(a.residual3, a.act, a.act_bf, W.down, F, C, true);
}

void Llama::begin_pass(const float* params, float* grads, int slot) {
  set_params(params);
  if (grads && grads != grads_) {
    G_ = view(layout_, cfg_, grads);
    grads_ = grads;
  }
  cur_ = &slots_.at(slot);
}

void Llama::embed(const int32_t* inputs) {
  ProfileTimer t(profile_, &Profile::embedding);
  encoder_forward(cur_->encoded, inputs, P_.embed, nullptr, B_, T_, cfg_.n_embd);
}

// The final RMSNorm, the LM head and, with targets, the loss (returned as a sum) of the current
// slot, from the last block's output `residual`.
double Llama::head_forward(const float* residual, const int32_t* targets, float dloss) {
  Activations& A = *cur_;
  const ModelConfig& c = cfg_;
  const int C = c.n_embd;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_forward_fused(nullptr, A.lnf, A.lnf_bf, A.rstdf, residual, nullptr, P_.norm, BT, C,
                          static_cast<float>(c.norm_eps));
  }
  return lm_head_forward({A.lnf, A.lnf_bf, A.logits, A.dlogits_bf, A.losses}, P_.lm_head, targets,
                         dloss);
}

const float* Llama::decode(const float* params, int32_t token, int pos) {
  const ModelConfig& c = cfg_;
  begin_decode(token, pos);
  set_params(params);
  cur_ = &slots_[0];
  Activations& A = *cur_;
  encoder_forward(A.encoded, &token, P_.embed, nullptr, 1, 1, c.n_embd);
  const float* residual = A.encoded;
  for (int l = 0; l < c.n_layer; l++) {
    block_forward(l, residual);
    residual = A.h[l].residual3;
  }
  head_forward(residual, nullptr, 0.0f);
  return logits();
}

// ---- backward ---------------------------------------------------------------------------------

// The head's backward for the current slot: the LM head (its gradient begun, dlnf) and the final
// RMSNorm, leaving the gradient of the last block's output in scratch_.dresidual.
void Llama::head_backward(bool accumulate) {
  Activations& A = *cur_;
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const int C = c.n_embd;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  const bool bf = opts_.bf16;
  Scratch& S = scratch_;
  // dW(Vp,C) += dlogits^T @ lnf;  dlnf(BT,C) = dlogits @ W
  lm_head_backward({A.lnf, A.lnf_bf, A.logits, A.dlogits_bf, A.losses}, P_.lm_head, G_.lm_head,
                   S.dln, accumulate, /*tied_here=*/st.embedding && c.tie_embeddings);
  ProfileTimer t(profile_, &Profile::norm);
  std::fill(S.dresidual, S.dresidual + BT * C, 0.0f);
  const bool blocks = st.last > st.first;
  const float* last = blocks ? A.h[st.last - 1].residual3 : A.encoded;
  rmsnorm_backward(S.dresidual, G_.norm, S.dln, last, P_.norm, A.rstdf, BT, C,
                   bf && blocks ? S.dout_bf : nullptr, accumulate);
}

// Block l's backward for the current slot, from the gradient of its output in
// scratch_.dresidual to the gradient of its input there (and its parameters' gradients).
void Llama::block_backward(int l, bool accumulate) {
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head, NKV = NKV_, hs = hs_;
  const int64_t BT = static_cast<int64_t>(B) * T, F = F_, QKV = QKV_;
  const bool bf = opts_.bf16;
  const Params& P = P_;
  Params& G = G_;
  Activations& A = *cur_;
  Scratch& S = scratch_;
  const BlockParams& W = P.h[l];
  BlockParams& D = G.h[l];
  Activations::Block& a = A.h[l];
  const float* residual = l == st.first ? A.encoded : A.h[l - 1].residual3;
  if (opts_.recompute == Recompute::full) block_forward(l, residual);
  // bf16: the shared fp32 forms of qkv and the MLP input are filled again from the block's
  // bf16 copies (a full recompute has just made them).
  const bool widen = bf && opts_.recompute != Recompute::full;
  // A linear layer y = x @ w^T (w is (N,K)): dw += dy^T @ x and dx = dy @ w, in the model's
  // precision. In bf16, dy_bf is dy rounded, made by the kernel that produced dy.
  auto products = [&](float* dx, float* dw, const float* dy, const bf16* dy_bf, const float* x,
                      const bf16* x_bf, const float* w, int64_t K, int64_t N) {
    ProfileTimer t(profile_, &Profile::matmul);
    const MatmulShape sw{N, K, BT, true, false, accumulate, false};
    const MatmulShape sx{BT, K, N, false, false, false, false};
    // dy is backward's scratch (kept aside when the weight part waits: split_backward).
    weight_grad(sw, dy, dy_bf, x, x_bf, dw, 1);
    if (bf)
      matmul_bf16(sx, dy_bf, wbf(w), dx);
    else
      matmul(sx, dy, w, dx);
  };
  // The MLP's down projection; dresidual's bf16 copy came with the RMSNorm backward that last
  // added to it.
  products(S.dact, D.down, S.dresidual, S.dout_bf, a.act, a.act_bf, W.down, F, C);
  {
    ProfileTimer t(profile_, &Profile::activation);
    if (widen) from_bf16(a.gu, a.gu_bf, BT * 2 * F);
    swiglu_backward(S.dgu, a.gu, S.dact, BT, static_cast<int>(F), bf ? S.dout_bf : nullptr);
  }
  products(S.dln, D.gate, S.dgu, S.dout_bf, a.ln2, a.ln2_bf, W.gate, C, 2 * F);
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_backward(S.dresidual, D.ln2, S.dln, a.residual2, W.ln2, a.rstd2, BT, C,
                     bf ? S.dout_bf : nullptr, accumulate);
  }
  products(S.datty, D.o, S.dresidual, S.dout_bf, a.atty, a.atty_bf, W.o, C, C);
  {
    ProfileTimer t(profile_, &Profile::attention);
    if (widen) from_bf16(a.qkv, a.qkv_bf, BT * QKV);
    if (opts_.flash_attention) {
      attention_backward_flash_gqa(S.dqkv, S.datt, S.datty, a.qkv, a.atty, a.att, B, T, NH, NKV,
                                   hs);
    } else {
      // The probabilities again from the rotated q and k (same kernel, same bits); atty is
      // rewritten with the values it already holds.
      if (opts_.recompute == Recompute::attention)
        attention_forward_gqa(a.atty, a.att, a.qkv, B, T, NH, NKV, hs);
      attention_backward_gqa(S.dqkv, S.datt, S.datty, a.qkv, a.att, B, T, NH, NKV, hs);
    }
    rope_backward(S.dqkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, NKV, hs);
  }
  if (bf) {
    ProfileTimer t(profile_, &Profile::matmul);
    to_bf16(S.dout_bf, S.dqkv, BT * QKV);
  }
  products(S.dln, D.qkv, S.dqkv, S.dout_bf, a.ln1, a.ln1_bf, W.qkv, C, QKV);
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_backward(S.dresidual, D.ln1, S.dln, residual, W.ln1, a.rstd1, BT, C,
                     bf && l > st.first ? S.dout_bf : nullptr, accumulate);
  }
}

// The embedding's backward for the current slot, from the first block's input gradient.
void Llama::embedding_backward(const int32_t* inputs, bool accumulate) {
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const int C = c.n_embd;
  ProfileTimer t(profile_, &Profile::embedding);
  // A tied embedding's gradient was begun by the LM head when this stage has it.
  if (!accumulate && !(st.head && c.tie_embeddings))
    std::fill(G_.embed, G_.embed + static_cast<int64_t>(c.padded_vocab_size) * C, 0.0f);
  encoder_backward(G_.embed, nullptr, scratch_.dresidual, inputs, B_, T_, C);
}

}  // namespace kiln
