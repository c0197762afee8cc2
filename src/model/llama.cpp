#include "model/llama.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/llama_kernels.h"
#include "kernels/matmul.h"

namespace kiln {

ParamLayout llama_param_layout(const ModelConfig& c, int tp) {
  // With tp > 1, one tensor-parallel rank's slices: its query heads' and key/value heads' rows
  // of q, k and v, its columns of o, its rows of gate and up, its columns of down, its rows of
  // the vocabulary (llama_split_dim).
  ParamLayout L;
  const int64_t C = c.n_embd, KV = static_cast<int64_t>(c.kv_heads()) * c.head_dim() / tp,
                F = c.ffn_hidden / tp, Vp = c.padded_vocab_size / tp, Cl = C / tp;
  L.add("model.embed_tokens.weight", {Vp, C}, true);
  for (int l = 0; l < c.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    L.blocks.push_back(L.total);
    L.add(p + "input_layernorm.weight", {C}, false);
    L.add(p + "self_attn.q_proj.weight", {Cl, C}, true);
    L.add(p + "self_attn.k_proj.weight", {KV, C}, true);
    L.add(p + "self_attn.v_proj.weight", {KV, C}, true);
    L.add(p + "self_attn.o_proj.weight", {C, Cl}, true);
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

int llama_split_dim(const std::string& name) {
  // Column-parallel (rows of the (out, in) weights): q, k, v, gate, up, and the vocabulary's
  // rows of the embedding and the LM head; row-parallel (columns): o and down; norms whole.
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return 0;
  for (const char* s :
       {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight"})
    if (name.ends_with(s)) return 0;
  if (name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight")) return 1;
  return -1;
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

namespace {

// One tensor-parallel rank's sizes (the whole model's at tp = 1): query heads, key/value heads,
// the q/k/v width, MLP units, vocabulary rows, and the rows of the residual stream (R).
struct LocalSizes {
  int64_t BT, C, NH, NKV, hs, QKV, F, Vl, Cl, R;
  LocalSizes(const ModelConfig& c, int B, int T, const TensorParallel& tp)
      : BT(static_cast<int64_t>(B) * T),
        C(c.n_embd),
        NH(c.n_head / tp.size),
        NKV(c.kv_heads() / tp.size),
        hs(c.head_dim()),
        QKV((NH + 2 * NKV) * hs),
        F(c.ffn_hidden / tp.size),
        Vl(c.padded_vocab_size / tp.size),
        Cl(NH * hs),
        R(tp.local_rows(BT)) {}
};

// Backward's scratch in the order the constructor hands it out: fp32 floats and bf16 values.
int64_t scratch_floats(const LocalSizes& z, int B, int T, const ModelOptions& opts) {
  const int64_t datt =
      opts.flash_attention ? attention_flash_scratch_floats(B, T, z.NH) : z.NH * z.BT * T;
  // proj, dresidual, dln, datty, dqkv, datt, dgu (fp32 only), dact; sequence parallelism:
  // gathered, rows, norm_grads.
  int64_t n = z.BT * z.C + z.R * z.C + z.BT * z.C + z.BT * z.Cl + z.BT * z.QKV + datt +
              (opts.bf16 ? 0 : z.BT * 2 * z.F) + z.BT * z.F;
  if (opts.tp.on() && opts.tp.sp) n += z.BT * z.C + z.R * z.C + z.C;
  return n;
}

int64_t scratch_bf16(const LocalSizes& z, const ModelOptions& opts) {
  if (!opts.bf16) return 0;
  return z.BT * std::max({2 * z.F, z.QKV, z.C}) + (opts.tp.on() && opts.tp.sp ? z.BT * z.C : 0);
}

}  // namespace

ActivationBytes llama_plan_activations(const ModelConfig& c, int B, int T, const ModelOptions& opts,
                                       Llama::Activations* A) {
  using Activations = Llama::Activations;
  const LocalSizes z(c, B, T, opts.tp);
  const int64_t BT = z.BT, C = z.C, NH = z.NH, Vl = z.Vl, F = z.F, QKV = z.QKV, Cl = z.Cl, R = z.R;
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
  A->encoded = p.take(R * C);
  A->h.assign(c.n_layer, Activations::Block{});
  for (int l = st.first; l < last; l++) {
    Activations::Block& b = A->h[l];
    b.ln1 = bf ? nullptr : p.field(full, 0, R * C);
    b.ln1_bf = bf ? p.field_bf(full, 0, R * C) : nullptr;
    b.rstd1 = p.field(full, 1, R);
    b.qkv = p.field(full || bf, 2, BT * QKV);
    b.qkv_bf = bf ? p.field_bf(full, 2, BT * QKV) : nullptr;
    b.atty = p.field(full || (bf && !flash), 3, BT * Cl);  // flash backward reads it
    b.atty_bf = bf ? p.field_bf(full, 3, BT * Cl) : nullptr;
    b.att = p.field(att_shared, 4, flash ? NH * BT : NH * BT * T);
    b.residual2 = p.field(full, 5, R * C);
    b.ln2 = bf ? nullptr : p.field(full, 6, R * C);
    b.ln2_bf = bf ? p.field_bf(full, 6, R * C) : nullptr;
    b.rstd2 = p.field(full, 7, R);
    b.gu = p.field(full || bf, 8, BT * 2 * F);
    b.gu_bf = bf ? p.field_bf(full, 8, BT * 2 * F) : nullptr;
    b.act = bf ? nullptr : p.field(full, 9, BT * F);
    b.act_bf = bf ? p.field_bf(full, 9, BT * F) : nullptr;
    b.residual3 = p.take(R * C);  // the next block's input: always kept
  }
  p.head();
  A->lnf = A->rstdf = A->logits = A->losses = nullptr;
  A->lnf_bf = A->dlogits_bf = nullptr;
  if (st.head) {
    A->lnf = bf ? nullptr : p.take(R * C);
    A->lnf_bf = bf ? p.take_bf(R * C) : nullptr;
    A->rstdf = p.take(R);
    A->logits = p.take((bf ? head_chunk_rows(BT) : BT) * Vl);
    A->dlogits_bf = bf ? p.take_bf(BT * Vl) : nullptr;
    A->losses = p.take(BT);
  }
  ActivationBytes bytes =
      p.finish(static_cast<int64_t>(A->mem.size()), static_cast<int64_t>(A->mem_bf16.size()));
  bytes.scratch = scratch_floats(z, B, T, opts) * 4 + scratch_bf16(z, opts) * 2;
  return bytes;
}

Llama::Llama(const ModelConfig& c, int B, int T, ModelOptions opts)
    : Model(c, B, T, opts, llama_param_layout(c, opts.tp.size)) {
  if (!c.llama()) fail("model.family = \"{}\" is not a Llama", c.family);
  const LocalSizes z(c, B, T, opts_.tp);
  NKV_ = static_cast<int>(z.NKV);
  hs_ = c.head_dim();
  QKV_ = static_cast<int>(z.QKV);
  F_ = static_cast<int>(z.F);
  const int64_t BT = z.BT, C = z.C, F = F_, QKV = QKV_, R = z.R;
  const bool bf = opts_.bf16, sp = opts_.tp.on() && opts_.tp.sp;
  ActivationBytes sizes = llama_plan_activations(c, B, T, opts_, nullptr);
  slots_.resize(opts_.slots);
  for (Activations& a : slots_) {
    a.mem.resize(sizes.fp32_floats);
    a.mem_bf16.resize(sizes.bf16_values);
    act_bytes_ = llama_plan_activations(c, B, T, opts_, &a);
  }
  cur_ = &slots_[0];

  const int64_t datt =
      opts_.flash_attention ? attention_flash_scratch_floats(B, T, z.NH) : z.NH * BT * T;
  scratch_.mem.resize(scratch_floats(z, B, T, opts_));
  float* p = scratch_.mem.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  scratch_.proj = take(BT * C);
  scratch_.dresidual = take(R * C);
  scratch_.dln = take(BT * C);
  scratch_.datty = take(BT * z.Cl);
  scratch_.dqkv = take(BT * QKV);
  scratch_.datt = take(datt);
  scratch_.dgu = bf ? nullptr : take(BT * 2 * F);  // bf16: made straight into dout_bf
  scratch_.dact = take(BT * F);
  if (sp) {
    tps_.gathered = take(BT * C);
    tps_.rows = take(R * C);
    tps_.norm_grads = take(C);
  }
  KILN_CHECK(p == scratch_.mem.data() + scratch_.mem.size());
  scratch_.dout_bf = nullptr;
  if (bf) {
    scratch_.mem_bf16.resize(scratch_bf16(z, opts_));
    scratch_.dout_bf = scratch_.mem_bf16.data();
    if (sp) tps_.gathered_bf = scratch_.dout_bf + BT * std::max({2 * F, QKV, C});
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

// One block's forward from its input `residual` into the current slot's h[l]. With tensor
// parallelism this rank computes its heads and MLP units (model/model.h's f and g around the
// products); with sequence parallelism the norms and residual adds work on its R rows.
void Llama::block_forward(int l, const float* residual) {
  const ModelConfig& c = cfg_;
  const TensorParallel& tp = opts_.tp;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head / tp.size, NKV = NKV_, hs = hs_;
  const int64_t BT = static_cast<int64_t>(B) * T, F = F_, QKV = QKV_, Cl = NH * hs,
                R = tp.local_rows(BT);
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
    rmsnorm_forward_fused(nullptr, a.ln1, a.ln1_bf, a.rstd1, residual, nullptr, W.ln1, R, C,
                          static_cast<float>(c.norm_eps));
  }
  const float* x;
  const bf16* x_bf;
  whole_input(a.ln1, a.ln1_bf, &x, &x_bf);  // f
  linear(a.qkv, x, x_bf, W.qkv, C, QKV, false);
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
    if (bf) to_bf16(a.atty_bf, a.atty, BT * Cl);
  }
  // residual2 = residual + proj, added in the RMSNorm's pass over the rows.
  linear(scratch_.proj, a.atty, a.atty_bf, W.o, Cl, C, false);
  const float* proj = reduce_output(scratch_.proj, nullptr);  // g
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_forward_fused(a.residual2, a.ln2, a.ln2_bf, a.rstd2, residual, proj, W.ln2, R, C,
                          static_cast<float>(c.norm_eps));
  }
  whole_input(a.ln2, a.ln2_bf, &x, &x_bf);  // f
  linear(a.gu, x, x_bf, W.gate, C, 2 * F, false);
  {
    ProfileTimer t(profile_, &Profile::activation);
    if (bf) {
      round_to_bf16(a.gu, a.gu_bf, BT * 2 * F);
      swiglu_forward_bf16(a.act_bf, a.gu, BT, static_cast<int>(F));
    } else {
      swiglu_forward(a.act, a.gu, BT, static_cast<int>(F));
    }
  }
  if (!tp.on()) {  // residual3 = residual2 + the product, accumulated by the product itself
    {
      ProfileTimer t(profile_, &Profile::residual);
      copy(a.residual3, a.residual2, BT * C);
    }
    linear(a.residual3, a.act, a.act_bf, W.down, F, C, true);
    return;
  }
  linear(scratch_.proj, a.act, a.act_bf, W.down, F, C, false);
  const float* out = reduce_output(scratch_.proj, nullptr);  // g
  ProfileTimer t(profile_, &Profile::residual);
  copy(a.residual3, a.residual2, R * C);
  add_inplace(a.residual3, out, R * C);
}

// An RMSNorm's backward over this rank's rows into scratch_.dresidual; under sequence
// parallelism its weight's gradient is summed over the group first (each rank saw its rows).
void Llama::norm_backward(float* dw, const float* dout, const float* inp, const float* w,
                          const float* rstd, bf16* dinp_bf16, bool accumulate) {
  const TensorParallel& tp = opts_.tp;
  const int C = cfg_.n_embd;
  const int64_t R = tp.local_rows(static_cast<int64_t>(B_) * T_);
  if (!tp.on() || !tp.sp) {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_backward(scratch_.dresidual, dw, dout, inp, w, rstd, R, C, dinp_bf16, accumulate);
    return;
  }
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_backward(scratch_.dresidual, tps_.norm_grads, dout, inp, w, rstd, R, C, nullptr, false);
  }
  add_norm_grads(tps_.norm_grads, dw, nullptr, accumulate);
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
  embed_tokens(cur_->encoded, scratch_.proj, inputs, P_.embed, nullptr);
}

// The final RMSNorm, the LM head and, with targets, the loss (returned as a sum) of the current
// slot, from the last block's output `residual`.
double Llama::head_forward(const float* residual, const int32_t* targets, float dloss) {
  Activations& A = *cur_;
  const ModelConfig& c = cfg_;
  const int C = c.n_embd;
  const int64_t R = opts_.tp.local_rows(static_cast<int64_t>(B_) * T_);
  {
    ProfileTimer t(profile_, &Profile::norm);
    rmsnorm_forward_fused(nullptr, A.lnf, A.lnf_bf, A.rstdf, residual, nullptr, P_.norm, R, C,
                          static_cast<float>(c.norm_eps));
  }
  const float* x;
  const bf16* x_bf;
  const bool gathered = whole_input(A.lnf, A.lnf_bf, &x, &x_bf);  // f
  return lm_head_forward({x, x_bf, A.logits, A.dlogits_bf, A.losses, gathered}, P_.lm_head, targets,
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
  const int64_t R = opts_.tp.local_rows(static_cast<int64_t>(B_) * T_);
  const bool bf = opts_.bf16;
  Scratch& S = scratch_;
  // dW(Vp,C) += dlogits^T @ lnf;  dlnf(BT,C) = dlogits @ W (with tensor parallelism this rank's
  // vocabulary's part of it, summed by f's backward)
  const float* x;
  const bf16* x_bf;
  const bool gathered = whole_input(A.lnf, A.lnf_bf, &x, &x_bf);
  lm_head_backward({x, x_bf, A.logits, A.dlogits_bf, A.losses, gathered}, P_.lm_head, G_.lm_head,
                   S.dln, accumulate, /*tied_here=*/st.embedding && c.tie_embeddings);
  const float* dlnf = reduce_input_grad(S.dln);  // f
  std::fill(S.dresidual, S.dresidual + R * C, 0.0f);
  const bool blocks = st.last > st.first;
  const float* last = blocks ? A.h[st.last - 1].residual3 : A.encoded;
  norm_backward(G_.norm, dlnf, last, P_.norm, A.rstdf, bf && blocks ? S.dout_bf : nullptr,
                accumulate);
}

// Block l's backward for the current slot, from the gradient of its output in
// scratch_.dresidual to the gradient of its input there (and its parameters' gradients).
void Llama::block_backward(int l, bool accumulate) {
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const TensorParallel& tp = opts_.tp;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head / tp.size, NKV = NKV_, hs = hs_;
  const int64_t BT = static_cast<int64_t>(B) * T, F = F_, QKV = QKV_, Cl = NH * hs;
  const bool bf = opts_.bf16, sp = tp.on() && tp.sp;
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
  // precision. In bf16, dy_bf is dy rounded, made by the kernel that produced dy. x_scratch: x
  // is a norm output gathered into scratch (sequence parallelism).
  auto products = [&](float* dx, float* dw, const float* dy, const bf16* dy_bf, const float* x,
                      const bf16* x_bf, const float* w, int64_t K, int64_t N, bool x_scratch) {
    ProfileTimer t(profile_, &Profile::matmul);
    const MatmulShape sw{N, K, BT, true, false, accumulate, false};
    const MatmulShape sx{BT, K, N, false, false, false, false};
    // dy is backward's scratch (kept aside when the weight part waits: split_backward).
    weight_grad(sw, dy, dy_bf, x, x_bf, dw, x_scratch ? 3 : 1);
    if (bf)
      matmul_bf16(sx, dy_bf, wbf(w), dx);
    else
      matmul(sx, dy, w, dx);
  };
  const float* dy;
  const bf16* dy_bf;
  const float* x;
  const bf16* x_bf;
  // The MLP's down projection (row-parallel: g's backward makes the gradient whole); dy's bf16
  // copy came with the RMSNorm backward that last added to it.
  whole_dresidual(&dy, &dy_bf);
  products(S.dact, D.down, dy, dy_bf, a.act, a.act_bf, W.down, F, C, false);
  {
    ProfileTimer t(profile_, &Profile::activation);
    if (widen) from_bf16(a.gu, a.gu_bf, BT * 2 * F);
    swiglu_backward(S.dgu, a.gu, S.dact, BT, static_cast<int>(F), bf ? S.dout_bf : nullptr);
  }
  whole_input(a.ln2, a.ln2_bf, &x, &x_bf);
  products(S.dln, D.gate, S.dgu, S.dout_bf, x, x_bf, W.gate, C, 2 * F, sp);
  norm_backward(D.ln2, reduce_input_grad(S.dln), a.residual2, W.ln2, a.rstd2,
                bf && !sp ? S.dout_bf : nullptr, accumulate);
  whole_dresidual(&dy, &dy_bf);
  products(S.datty, D.o, dy, dy_bf, a.atty, a.atty_bf, W.o, Cl, C, false);
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
  whole_input(a.ln1, a.ln1_bf, &x, &x_bf);
  products(S.dln, D.qkv, S.dqkv, S.dout_bf, x, x_bf, W.qkv, C, QKV, sp);
  norm_backward(D.ln1, reduce_input_grad(S.dln), residual, W.ln1, a.rstd1,
                bf && l > st.first && !sp ? S.dout_bf : nullptr, accumulate);
}

// The embedding's backward for the current slot, from the first block's input gradient.
void Llama::embedding_backward(const int32_t* inputs, bool accumulate) {
  const ModelConfig& c = cfg_;
  // A tied embedding's gradient was begun by the LM head when this stage has it.
  if (!accumulate && !(opts_.stage.head && c.tie_embeddings))
    std::fill(G_.embed,
              G_.embed + static_cast<int64_t>(c.padded_vocab_size / opts_.tp.size) * c.n_embd,
              0.0f);
  embed_tokens_backward(G_.embed, nullptr, inputs);
}

}  // namespace kiln
