#include "model/gpt2.h"

#include <algorithm>
#include <cmath>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace kiln {

ModelConfig gpt2_config(int n_layer, int n_head, int n_embd, int block_size, int vocab_size,
                        int vocab_multiple) {
  ModelConfig c;
  c.n_layer = n_layer;
  c.n_head = n_head;
  c.n_embd = n_embd;
  c.block_size = block_size;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = pad_vocab(vocab_size, vocab_multiple);
  return c;
}

ParamLayout gpt2_param_layout(const ModelConfig& c, int tp) {
  ParamLayout L;
  const int64_t C = c.n_embd, Cl = C / tp, F = 4 * C / tp;  // this rank's heads and MLP units
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    L.add(std::move(name), std::move(shape), decay);
  };
  add("wte.weight", {c.padded_vocab_size / tp, C}, true);
  add("wpe.weight", {c.block_size, C}, true);
  for (int l = 0; l < c.n_layer; l++) {
    std::string p = "h." + std::to_string(l) + ".";
    L.blocks.push_back(L.total);
    add(p + "ln_1.weight", {C}, false);
    add(p + "ln_1.bias", {C}, false);
    add(p + "attn.c_attn.weight", {C, 3 * Cl}, true);
    add(p + "attn.c_attn.bias", {3 * Cl}, false);
    add(p + "attn.c_proj.weight", {Cl, C}, true);
    add(p + "attn.c_proj.bias", {C}, false);
    add(p + "ln_2.weight", {C}, false);
    add(p + "ln_2.bias", {C}, false);
    add(p + "mlp.c_fc.weight", {C, F}, true);
    add(p + "mlp.c_fc.bias", {F}, false);
    add(p + "mlp.c_proj.weight", {F, C}, true);
    add(p + "mlp.c_proj.bias", {C}, false);
  }
  L.blocks.push_back(L.total);
  add("ln_f.weight", {C}, false);
  add("ln_f.bias", {C}, false);
  return L;
}

std::vector<LogicalTensor> gpt2_logical_tensors(const ModelConfig& c) {
  const int64_t C = c.n_embd;
  std::vector<LogicalTensor> out;
  for (const auto& t : gpt2_param_layout(c).tensors) {
    LogicalTensor l{t.name, t.shape};
    if (t.name.ends_with("attn.c_attn.weight")) l.split_shape = {C, 3, C};
    if (t.name.ends_with("attn.c_attn.bias")) l.split_shape = {3, C};
    out.push_back(std::move(l));
  }
  return out;
}

int gpt2_split_dim(const std::string& name) {
  // Column-parallel: the fused QKV (by heads) and the MLP's first layer; row-parallel: the two
  // output projections; the vocabulary's rows. LayerNorms, positions and the row-parallel
  // layers' biases are whole on every rank.
  if (name == "wte.weight") return 0;
  if (name.ends_with("attn.c_attn.weight")) return 2;
  if (name.ends_with("attn.c_attn.bias")) return 1;
  if (name.ends_with("attn.c_proj.weight") || name.ends_with("mlp.c_proj.weight")) return 0;
  if (name.ends_with("mlp.c_fc.weight")) return 1;
  if (name.ends_with("mlp.c_fc.bias")) return 0;
  return -1;
}

ModelParams view_params(const ParamLayout& layout, const ModelConfig& c, float* base) {
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

void gpt2_init(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed) {
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
      init_normal(p, n, std, mix_seed(seed, i));  // one stream per tensor
      for (int64_t j = n; j < t.numel; j++) p[j] = 0.0f;
    } else {
      float v = ends_with(".weight") ? 1.0f : 0.0f;  // LayerNorm weights; biases are zero
      for (int64_t j = 0; j < t.numel; j++) p[j] = v;
    }
  }
}

namespace {

// Backward's scratch (GradScratch), in the order the constructor hands it out: fp32 floats and
// bf16 values.
int64_t gpt2_scratch_floats(const ModelConfig& c, int B, int T, const ModelOptions& opts) {
  const TensorParallel& tp = opts.tp;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head / tp.size,
                Cl = C / tp.size, F = 4 * C / tp.size, R = tp.local_rows(BT);
  const int64_t datt =
      opts.flash_attention ? attention_flash_scratch_floats(B, T, NH) : NH * BT * T;
  // proj, dresidual, dln, datty, dqkv, datt, dfch (fp32 only: bf16 makes it in dout_bf),
  // dfch_gelu; sequence parallelism: gathered, rows, ln_grads.
  int64_t n = BT * C + R * C + BT * C + BT * Cl + BT * 3 * Cl + datt + BT * F * (opts.bf16 ? 1 : 2);
  if (tp.on() && tp.sp) n += BT * C + R * C + 2 * C;
  return n;
}

int64_t gpt2_scratch_bf16(const ModelConfig& c, int B, int T, const ModelOptions& opts) {
  if (!opts.bf16) return 0;
  const TensorParallel& tp = opts.tp;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, F = 4 * C / tp.size;
  return BT * std::max(F, C) + (tp.on() && tp.sp ? BT * C : 0);  // dout_bf, gathered_bf
}

}  // namespace

ActivationBytes plan_activations(const ModelConfig& c, int B, int T, const ModelOptions& opts,
                                 Activations* A) {
  // With tensor parallelism a rank holds its heads (Cl = C/tp wide), MLP units (F = 4C/tp) and
  // vocabulary slice (Vl); with sequence parallelism the residual stream's R = B·T/tp rows.
  const TensorParallel& tp = opts.tp;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head / tp.size,
                Vl = c.padded_vocab_size / tp.size, Cl = C / tp.size, F = 4 * C / tp.size,
                R = tp.local_rows(BT);
  const bool bf = opts.bf16, full = opts.recompute == Recompute::full;
  const bool flash = opts.flash_attention;
  // With flash attention a block keeps the row log-sum-exps (B,NH,T), too small to recompute.
  const bool att_shared = full || (opts.recompute == Recompute::attention && !flash);
  Activations dummy;
  const bool fill = A != nullptr;
  if (!fill) A = &dummy;
  // A tensor is kept per block, or shared by all blocks (recomputed, or dead after its bf16 copy).
  ActivationPlanner p(fill ? A->mem.data() : nullptr, fill ? A->mem_bf16.data() : nullptr);
  using Blk = Activations::Block;
  const int first = opts.stage.first, last = opts.stage.last < 0 ? c.n_layer : opts.stage.last;
  A->encoded = p.take(R * C);  // the stage's input: the embedding's output, or what it received
  A->h.assign(c.n_layer, Blk{});
  for (int l = first; l < last; l++) {
    Blk& b = A->h[l];
    b.ln1 = bf ? nullptr : p.field(full, 0, R * C);
    b.ln1_mean = p.field(full, 1, R);
    b.ln1_rstd = p.field(full, 2, R);
    b.qkv = p.field(full || bf, 3, BT * 3 * Cl);           // bf16: kept as qkv_bf
    b.atty = p.field(full || (bf && !flash), 4, BT * Cl);  // flash backward reads it
    b.att = p.field(att_shared, 5, flash ? NH * BT : NH * BT * T);
    b.residual2 = p.field(full, 6, R * C);
    b.ln2 = bf ? nullptr : p.field(full, 7, R * C);
    b.ln2_mean = p.field(full, 8, R);
    b.ln2_rstd = p.field(full, 9, R);
    b.fch = p.field(full || bf, 10, BT * F);  // bf16: kept as fch_bf
    b.fch_gelu = bf ? nullptr : p.field(full, 11, BT * F);
    b.residual3 = p.take(R * C);  // the next block's input: always kept
    b.ln1_bf = b.atty_bf = b.ln2_bf = b.fch_gelu_bf = b.qkv_bf = b.fch_bf = nullptr;
    if (bf) {
      b.ln1_bf = p.field_bf(full, 12, R * C);
      b.atty_bf = p.field_bf(full, 13, BT * Cl);
      b.ln2_bf = p.field_bf(full, 14, R * C);
      b.fch_gelu_bf = p.field_bf(full, 15, BT * F);
      b.qkv_bf = p.field_bf(full, 16, BT * 3 * Cl);
      b.fch_bf = p.field_bf(full, 17, BT * F);
    }
  }
  p.head();
  A->lnf = A->lnf_mean = A->lnf_rstd = A->logits = A->losses = nullptr;
  A->lnf_bf = A->dlogits_bf = nullptr;
  if (opts.stage.head) {
    A->lnf = p.take(R * C);
    A->lnf_mean = p.take(R);
    A->lnf_rstd = p.take(R);
    A->lnf_bf = bf ? p.take_bf(R * C) : nullptr;
    // bf16: the logits of a chunk of rows at a time (fp32), the gradient of all rows in bf16.
    A->logits = p.take((bf ? head_chunk_rows(BT) : BT) * Vl);
    A->dlogits_bf = bf ? p.take_bf(BT * Vl) : nullptr;
    A->losses = p.take(BT);
  }
  ActivationBytes bytes =
      p.finish(static_cast<int64_t>(A->mem.size()), static_cast<int64_t>(A->mem_bf16.size()));
  bytes.scratch = gpt2_scratch_floats(c, B, T, opts) * 4 + gpt2_scratch_bf16(c, B, T, opts) * 2;
  return bytes;
}

Gpt2::Gpt2(const ModelConfig& c, int B, int T, ModelOptions opts)
    : Model(c, B, T, opts, gpt2_param_layout(c, opts.tp.size)) {
  if (c.llama()) fail("model.family = \"llama\" is not a GPT-2");
  const TensorParallel& tp = opts.tp;
  const int64_t BT = static_cast<int64_t>(B) * T, C = c.n_embd, NH = c.n_head / tp.size,
                Cl = C / tp.size, F = 4 * C / tp.size, R = tp.local_rows(BT);
  const bool bf = opts.bf16, sp = tp.on() && tp.sp;
  ActivationBytes plan = plan_activations(c, B, T, opts_, nullptr);
  slots_.resize(opts_.slots);
  for (Activations& a : slots_) {
    a.mem.resize(plan.fp32_floats);
    a.mem_bf16.resize(plan.bf16_values);
    act_bytes_ = plan_activations(c, B, T, opts_, &a);
    a.B = B;
    a.T = T;
  }
  cur_ = &slots_[0];

  const int64_t datt =
      opts.flash_attention ? attention_flash_scratch_floats(B, T, NH) : NH * BT * T;
  scratch_.mem.resize(gpt2_scratch_floats(c, B, T, opts));
  float* p = scratch_.mem.data();
  auto take = [&](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  scratch_.proj = take(BT * C);
  scratch_.dresidual = take(R * C);
  scratch_.dln = take(BT * C);
  scratch_.datty = take(BT * Cl);
  scratch_.dqkv = take(BT * 3 * Cl);
  scratch_.datt = take(datt);
  scratch_.dfch = bf ? nullptr : take(BT * F);  // bf16: made straight into dout_bf
  scratch_.dfch_gelu = take(BT * F);
  if (sp) {
    tps_.gathered = take(BT * C);
    tps_.rows = take(R * C);
    tps_.norm_grads = take(2 * C);
  }
  KILN_CHECK(p == scratch_.mem.data() + scratch_.mem.size());
  scratch_.dout_bf = nullptr;
  if (bf) {
    scratch_.mem_bf16.resize(gpt2_scratch_bf16(c, B, T, opts));
    scratch_.dout_bf = scratch_.mem_bf16.data();
    if (sp) tps_.gathered_bf = scratch_.dout_bf + BT * std::max(F, C);
  }
  KILN_CHECK(act_bytes_.scratch ==
             static_cast<int64_t>(scratch_.mem.bytes() + scratch_.mem_bf16.bytes()));
  if (opts.kv_cache) {
    for (int l = 0; l < c.n_layer; l++) {
      k_cache_.emplace_back(static_cast<int64_t>(c.block_size) * C);
      v_cache_.emplace_back(static_cast<int64_t>(c.block_size) * C);
    }
    decode_scores_.resize(c.block_size);
  }
}

// One block's forward from its input `residual` into the current slot's h[l] (P_ and params_ are
// set). With tensor parallelism this rank computes its heads and MLP units (column-parallel
// products after f, row-parallel ones before g); with sequence parallelism the LayerNorms and
// residual adds work on its R rows.
void Gpt2::block_forward(int l, const float* residual) {
  const ModelConfig& c = cfg_;
  const TensorParallel& tp = opts_.tp;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head / tp.size;
  const int64_t BT = static_cast<int64_t>(B) * T, Cl = C / tp.size, F = 4 * C / tp.size,
                R = tp.local_rows(BT);
  const bool bf = opts_.bf16;
  const BlockParams& W = P_.h[l];
  Activations::Block& a = cur_->h[l];
  GradScratch& S = scratch_;
  // y (+)= x @ w (+ b), from the fp32 x or its bf16 copy.
  auto linear = [&](float* y, const float* x, const bf16* x_bf, const float* w, const float* b,
                    int64_t K, int64_t N, bool accumulate) {
    ProfileTimer t(profile_, &Profile::matmul);
    const MatmulShape s{BT, N, K, false, false, accumulate, b != nullptr};
    if (bf)
      matmul_bf16(s, x_bf, wbf(w), y, b);
    else
      matmul(s, x, w, y, b);
  };
  // A row-parallel product's bias is added once: by rank 0 into its part of the sum, or (sequence
  // parallelism) by every rank to its rows of the sum.
  const bool bias_in_product = !tp.on() || (tp.rank == 0 && !tp.sp);
  {
    ProfileTimer t(profile_, &Profile::norm);
    layernorm_forward_fused(nullptr, a.ln1, a.ln1_bf, a.ln1_mean, a.ln1_rstd, residual, nullptr,
                            W.ln1_w, W.ln1_b, R, C);
  }
  const float* x;
  const bf16* x_bf;
  whole_input(a.ln1, a.ln1_bf, &x, &x_bf);  // f
  linear(a.qkv, x, x_bf, W.qkv_w, W.qkv_b, C, 3 * Cl, false);
  {
    ProfileTimer t(profile_, &Profile::attention);
    if (bf) round_to_bf16(a.qkv, a.qkv_bf, BT * 3 * Cl);
    if (opts_.kv_cache) {  // decoding one position: its key and value join the cache
      const int64_t at = static_cast<int64_t>(decode_pos_) * C;
      copy(k_cache_[l].data() + at, a.qkv + C, C);
      copy(v_cache_[l].data() + at, a.qkv + 2 * C, C);
      attention_decode(a.atty, decode_scores_.data(), a.qkv, k_cache_[l].data(), v_cache_[l].data(),
                       decode_pos_ + 1, C, NH);
    } else if (opts_.flash_attention) {
      attention_forward_flash(a.atty, a.att, S.datt, a.qkv, B, T, static_cast<int>(Cl), NH);
    } else {
      attention_forward(a.atty, a.att, a.qkv, B, T, static_cast<int>(Cl), NH);
    }
    if (bf) to_bf16(a.atty_bf, a.atty, BT * Cl);
  }
  // residual2 = residual + proj, added in the LayerNorm's pass over the rows.
  linear(S.proj, a.atty, a.atty_bf, W.attproj_w, bias_in_product ? W.attproj_b : nullptr, Cl, C,
         false);
  const float* proj = reduce_output(S.proj, W.attproj_b);  // g
  {
    ProfileTimer t(profile_, &Profile::norm);
    layernorm_forward_fused(a.residual2, a.ln2, a.ln2_bf, a.ln2_mean, a.ln2_rstd, residual, proj,
                            W.ln2_w, W.ln2_b, R, C);
  }
  whole_input(a.ln2, a.ln2_bf, &x, &x_bf);  // f
  // fch = ln2 @ fc_w + fc_b (the bias in the product), then GELU straight into the next
  // product's operand.
  linear(a.fch, x, x_bf, W.fc_w, W.fc_b, C, F, false);
  {
    ProfileTimer t(profile_, &Profile::activation);
    if (bf) {
      round_to_bf16(a.fch, a.fch_bf, BT * F);
      gelu_forward_bf16(a.fch_gelu_bf, a.fch, BT * F);
    } else {
      gelu_forward(a.fch_gelu, a.fch, BT * F);
    }
  }
  if (!tp.on()) {  // residual3 = residual2 + the product, accumulated by the product itself
    {
      ProfileTimer t(profile_, &Profile::residual);
      copy(a.residual3, a.residual2, BT * C);
    }
    linear(a.residual3, a.fch_gelu, a.fch_gelu_bf, W.fcproj_w, W.fcproj_b, F, C, true);
    return;
  }
  linear(S.proj, a.fch_gelu, a.fch_gelu_bf, W.fcproj_w, bias_in_product ? W.fcproj_b : nullptr, F,
         C, false);
  const float* out = reduce_output(S.proj, W.fcproj_b);  // g
  ProfileTimer t(profile_, &Profile::residual);
  copy(a.residual3, a.residual2, R * C);
  add_inplace(a.residual3, out, R * C);
}

void Gpt2::norm_backward(float* dw, float* db, const float* dout, const float* inp, const float* w,
                         const float* mean, const float* rstd, bf16* dinp_bf16, bool accumulate) {
  const TensorParallel& tp = opts_.tp;
  const int C = cfg_.n_embd;
  const int64_t R = tp.local_rows(static_cast<int64_t>(B_) * T_);
  if (!tp.on() || !tp.sp) {
    ProfileTimer t(profile_, &Profile::norm);
    layernorm_backward(scratch_.dresidual, dw, db, dout, inp, w, mean, rstd, R, C, dinp_bf16,
                       accumulate);
    return;
  }
  // The weight's and bias's gradients side by side, summed over the group in one collective.
  float* part = tps_.norm_grads;
  {
    ProfileTimer t(profile_, &Profile::norm);
    layernorm_backward(scratch_.dresidual, part, part + C, dout, inp, w, mean, rstd, R, C, nullptr,
                       false);
  }
  add_norm_grads(part, dw, db, accumulate);
}

const float* Gpt2::stage_output(int slot) const {
  const Activations& A = slots_.at(slot);
  return opts_.stage.last > opts_.stage.first ? A.h[opts_.stage.last - 1].residual3 : A.encoded;
}

void Gpt2::begin_pass(const float* params, float* grads, int slot) {
  set_params(params);
  if (grads && grads != grads_) {
    G_ = view_params(layout_, cfg_, grads);
    grads_ = grads;
  }
  cur_ = &slots_.at(slot);
}

void Gpt2::embed(const int32_t* inputs) {
  embed_tokens(cur_->encoded, scratch_.proj, inputs, P_.wte, P_.wpe);
}

void Gpt2::set_params(const float* params) {
  // bf16: a copy of exactly these parameters (set_weights or the lent copy, after each update).
  if (opts_.bf16) KILN_CHECK(weights_ && weights_->source() == params);
  if (params != params_) {
    P_ = view_params(layout_, cfg_, const_cast<float*>(params));
    params_ = params;
  }
}

const float* Gpt2::decode(const float* params, int32_t token, int pos) {
  const ModelConfig& c = cfg_;
  begin_decode(token, pos);
  set_params(params);
  cur_ = &slots_[0];
  Activations& A = *cur_;
  encoder_forward(A.encoded, &token, P_.wte, P_.wpe + static_cast<int64_t>(pos) * c.n_embd, 1, 1,
                  c.n_embd);
  const float* residual = A.encoded;
  for (int l = 0; l < c.n_layer; l++) {
    block_forward(l, residual);
    residual = A.h[l].residual3;
  }
  head_forward(residual, nullptr, 0.0f);
  return logits();
}

// The final LayerNorm, the tied LM head and, with targets, the loss (returned as a sum) of the
// current slot, from the last block's output `residual`.
double Gpt2::head_forward(const float* residual, const int32_t* targets, float dloss) {
  Activations& A = *cur_;
  const ModelConfig& c = cfg_;
  const int C = c.n_embd;
  const int64_t R = opts_.tp.local_rows(static_cast<int64_t>(B_) * T_);
  {
    ProfileTimer t(profile_, &Profile::norm);
    layernorm_forward_fused(nullptr, A.lnf, A.lnf_bf, A.lnf_mean, A.lnf_rstd, residual, nullptr,
                            P_.lnf_w, P_.lnf_b, R, C);
  }
  const float* x;
  const bf16* x_bf;
  whole_input(A.lnf, A.lnf_bf, &x, &x_bf);  // f
  return lm_head_forward(
      {x, x_bf, A.logits, A.dlogits_bf, A.losses, x != A.lnf || x_bf != A.lnf_bf}, P_.wte, targets,
      dloss);
}

// The head's backward for the current slot: the tied LM head (wte's gradient begun, dln_f) and
// the final LayerNorm, leaving the gradient of the last block's output in scratch_.dresidual.
void Gpt2::head_backward(bool accumulate) {
  Activations& A = *cur_;
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const TensorParallel& tp = opts_.tp;
  const int C = c.n_embd;
  const int64_t BT = static_cast<int64_t>(B_) * T_, R = tp.local_rows(BT);
  const bool bf = opts_.bf16;
  GradScratch& S = scratch_;
  // dwte(Vp,C) += dlogits^T @ lnf;  dlnf(BT,C) = dlogits @ wte (with tensor parallelism this
  // rank's vocabulary's part of it, summed by f's backward)
  const float* x;
  const bf16* x_bf;
  whole_input(A.lnf, A.lnf_bf, &x, &x_bf);
  lm_head_backward({x, x_bf, A.logits, A.dlogits_bf, A.losses, x != A.lnf || x_bf != A.lnf_bf},
                   P_.wte, G_.wte, S.dln, accumulate, /*tied_here=*/st.embedding);
  const float* dlnf = reduce_input_grad(S.dln);  // f
  std::fill(S.dresidual, S.dresidual + R * C, 0.0f);
  const bool blocks = st.last > st.first;
  const float* last = blocks ? A.h[st.last - 1].residual3 : A.encoded;
  norm_backward(G_.lnf_w, G_.lnf_b, dlnf, last, P_.lnf_w, A.lnf_mean, A.lnf_rstd,
                bf && blocks ? S.dout_bf : nullptr, accumulate);
}

// Block l's backward for the current slot, from the gradient of its output in
// scratch_.dresidual to the gradient of its input there (and its parameters' gradients).
void Gpt2::block_backward(int l, bool accumulate) {
  const ModelConfig& c = cfg_;
  const StageSpec& st = opts_.stage;
  const TensorParallel& tp = opts_.tp;
  const int B = B_, T = T_, C = c.n_embd, NH = c.n_head / tp.size;
  const int64_t BT = static_cast<int64_t>(B) * T, Cl = C / tp.size, F = 4 * C / tp.size;
  const bool bf = opts_.bf16, sp = tp.on() && tp.sp;
  const ModelParams& P = P_;
  ModelParams& G = G_;
  Activations& A = *cur_;
  GradScratch& S = scratch_;
  const BlockParams& W = P.h[l];
  BlockParams& D = G.h[l];
  Activations::Block& a = A.h[l];
  const float* residual = l == st.first ? A.encoded : A.h[l - 1].residual3;
  if (opts_.recompute == Recompute::full) block_forward(l, residual);
  // bf16: the shared fp32 forms of qkv and the MLP input are filled again from the block's
  // bf16 copies (a full recompute has just made them).
  const bool widen = bf && opts_.recompute != Recompute::full;
  // A linear layer's two products, dW += x^T @ dy and dx = dy @ W^T, in the model's
  // precision. In bf16, dy_bf is dy rounded, made by the kernel that produced dy.
  // x_scratch: x is a LayerNorm output gathered into scratch (sequence parallelism).
  auto products = [&](float* dx, float* dw, const float* dy, const bf16* dy_bf, const float* x,
                      const bf16* x_bf, const float* w, int64_t K, int64_t N, bool x_scratch) {
    ProfileTimer t(profile_, &Profile::matmul);
    // dy is backward's scratch (kept aside when the weight part waits: split_backward).
    weight_grad(MatmulShape{K, N, BT, true, false, accumulate, false}, x, x_bf, dy, dy_bf, dw,
                x_scratch ? 3 : 2);
    if (bf)
      matmul_bf16(MatmulShape{BT, K, N, false, true, false, false}, dy_bf, wbf(w), dx);
    else
      matmul(MatmulShape{BT, K, N, false, true, false, false}, dy, w, dx);
  };
  auto bias_grad = [&](float* db, const float* dy, int64_t N) {
    ProfileTimer t(profile_, &Profile::matmul);
    bias_backward(db, dy, BT, static_cast<int>(N), accumulate);
  };
  const float* dy;
  const bf16* dy_bf;
  const float* x;
  const bf16* x_bf;
  // The MLP's output projection (row-parallel: g's backward makes the gradient whole); dy's
  // bf16 copy came with the LayerNorm backward that last added to it. Every rank computes the
  // whole bias gradient from the whole dy.
  whole_dresidual(&dy, &dy_bf);
  bias_grad(D.fcproj_b, dy, C);
  products(S.dfch_gelu, D.fcproj_w, dy, dy_bf, a.fch_gelu, a.fch_gelu_bf, W.fcproj_w, F, C, false);
  {
    ProfileTimer t(profile_, &Profile::activation);  // GELU and fc's bias gradient in one pass
    if (widen) from_bf16(a.fch, a.fch_bf, BT * F);
    gelu_bias_backward(S.dfch, bf ? S.dout_bf : nullptr, D.fc_b, a.fch, S.dfch_gelu, BT, F,
                       accumulate);
  }
  whole_input(a.ln2, a.ln2_bf, &x, &x_bf);
  products(S.dln, D.fc_w, S.dfch, S.dout_bf, x, x_bf, W.fc_w, C, F, sp);
  norm_backward(D.ln2_w, D.ln2_b, reduce_input_grad(S.dln), a.residual2, W.ln2_w, a.ln2_mean,
                a.ln2_rstd, bf && !sp ? S.dout_bf : nullptr, accumulate);
  whole_dresidual(&dy, &dy_bf);
  bias_grad(D.attproj_b, dy, C);
  products(S.datty, D.attproj_w, dy, dy_bf, a.atty, a.atty_bf, W.attproj_w, Cl, C, false);
  {
    ProfileTimer t(profile_, &Profile::attention);
    // The probabilities again from q and k (same kernel, same bits); atty is rewritten with
    // the values it already holds.
    const int Cw = static_cast<int>(Cl);
    if (widen) from_bf16(a.qkv, a.qkv_bf, BT * 3 * Cl);
    if (opts_.flash_attention) {
      attention_backward_flash(S.dqkv, S.datt, S.datty, a.qkv, a.atty, a.att, B, T, Cw, NH);
    } else {
      if (opts_.recompute == Recompute::attention)
        attention_forward(a.atty, a.att, a.qkv, B, T, Cw, NH);
      attention_backward(S.dqkv, S.datt, S.datty, a.qkv, a.att, B, T, Cw, NH);
    }
  }
  bias_grad(D.qkv_b, S.dqkv, 3 * Cl);
  if (bf) {
    ProfileTimer t(profile_, &Profile::matmul);
    to_bf16(S.dout_bf, S.dqkv, BT * 3 * Cl);
  }
  whole_input(a.ln1, a.ln1_bf, &x, &x_bf);
  products(S.dln, D.qkv_w, S.dqkv, S.dout_bf, x, x_bf, W.qkv_w, C, 3 * Cl, sp);
  norm_backward(D.ln1_w, D.ln1_b, reduce_input_grad(S.dln), residual, W.ln1_w, a.ln1_mean,
                a.ln1_rstd, bf && l > st.first && !sp ? S.dout_bf : nullptr, accumulate);
}

// The embedding's backward for the current slot, from the first block's input gradient.
void Gpt2::embedding_backward(const int32_t* inputs, bool accumulate) {
  const ModelConfig& c = cfg_;
  const int64_t C = c.n_embd;
  ModelParams& G = G_;
  // wte's gradient was begun by the LM head (in a stage without the head, this one begins it);
  // wpe's has no other writer.
  if (!accumulate) std::fill(G.wpe, G.wpe + c.block_size * C, 0.0f);
  if (!accumulate && !opts_.stage.head)
    std::fill(G.wte, G.wte + c.padded_vocab_size / opts_.tp.size * C, 0.0f);
  embed_tokens_backward(G.wte, G.wpe, inputs);
}

ModelSpec gpt2_spec(const ModelConfig& c, bool padded, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.family = "gpt2";
  m.n_layer = c.n_layer;
  m.hidden = c.n_embd;
  m.n_head = c.n_head;
  m.n_kv_head = c.n_head;
  m.ffn_hidden = 4 * c.n_embd;
  m.vocab = padded ? c.padded_vocab_size : c.vocab_size;
  m.max_seq = c.block_size;
  return m;  // the rest are ModelSpec's defaults: GELU, LayerNorm, learned positions, biases, tied
}

int64_t gpt2_num_params(const ModelConfig& c) {
  return count_params(gpt2_spec(c, /*padded=*/false)).total;
}

double gpt2_flops_per_token(const ModelConfig& c, int T) {
  return 6.0 * static_cast<double>(gpt2_num_params(c)) +
         12.0 * c.n_layer * static_cast<double>(c.n_embd) * T;
}

}  // namespace kiln
