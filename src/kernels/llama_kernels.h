// The non-matmul math a Llama-family block adds to GPT-2's, each forward next to its backward:
// RMSNorm, rotary position embeddings (RoPE) and the SwiGLU activation. Grouped-query attention
// is the general form of the attention kernels in kernels.h.
//
// Shape vocabulary as in kernels.h: B batch, T time, C channels, M = B*T rows; NH query heads,
// NKV key/value heads (NH % NKV == 0), hs head size; F the MLP's hidden width.
//
// Gradient convention (as in kernels.h): parameter gradients and the residual-stream gradient are
// accumulated (+=); activation gradients that a kernel alone produces are written (=). Every
// kernel gives the same bits for any thread count.
#pragma once
#include <cstdint>

#include "kernels/bf16.h"

namespace kiln {

// ---- RMSNorm (Llama: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps)) -------------------
// out (M,C), rstd (M) from inp (M,C) and w (C).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t M, int C,
                     float eps);
// Fused with the residual add, as layernorm_forward_fused: with `add`, res = inp + add is
// written and normalised; out and out_bf16 (either may be null) receive the normalised rows in
// fp32 and/or bf16, with rmsnorm_forward's bits.
void rmsnorm_forward_fused(float* res, float* out, bf16* out_bf16, float* rstd, const float* inp,
                           const float* add, const float* w, int64_t M, int C, float eps);
// dinp (M,C) += ..., dw (C) += ... (written (=) with accumulate = false), from dout (M,C) and the
// forward's inp and rstd; with dinp_bf16, the accumulated dinp is also written there rounded to
// bf16 (the operand of the next product of backward).
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t M, int C, bf16* dinp_bf16 = nullptr,
                      bool accumulate = true);

// ---- rotary position embeddings (Hugging Face Llama's rotate_half convention) ----------------
// Within a head of size hs (even), element i < hs/2 pairs with i + hs/2 and turns by the angle
// t * inv_freq[i] of its position t:  x'[i] = x[i] cos - x[i+hs/2] sin,
// x'[i+hs/2] = x[i+hs/2] cos + x[i] sin, with inv_freq[j] = theta^(-2j/hs).

// Llama 3's frequency scaling (Hugging Face's `rope_type = "llama3"`): wavelengths shorter than
// original_max_position_embeddings / high_freq_factor are kept, those longer than
// original_max_position_embeddings / low_freq_factor divided by `factor`, and the ones between
// interpolated smoothly.
struct RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};
// The inverse frequencies inv_freq (hs/2), with `scaling` applied when it is not null: in float32
// as Hugging Face computes them (theta^(2j/hs) and its reciprocal rounded to float).
void rope_inv_freq(float* inv_freq, int hs, float theta, const RopeScaling* scaling = nullptr);
// cos and sin (T, hs/2) of the angles t * inv_freq[j] for positions t < T, made once per model:
// the angle is rounded to float as in Hugging Face's float32 product, its cos and sin taken in
// double and rounded.
void rope_table(float* cos, float* sin, int T, int hs, float theta,
                const RopeScaling* scaling = nullptr);
// In place on the q and k parts of qkv (B,T,(NH + 2*NKV)*hs) laid out q heads, then NKV k heads,
// then NKV v heads (v is not touched); row t of the table turns position t.
void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hs);
// The transpose rotation (by -angle), in place on the dq and dk parts of dqkv (B,T,(NH+2*NKV)*hs):
// the gradient with respect to the unrotated q and k.
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hs);
// One row qkv ((NH + 2*NKV)*hs) at position pos (incremental decoding): rope_forward's bits for
// that row.
void rope_forward_row(float* qkv, const float* cos, const float* sin, int pos, int NH, int NKV,
                      int hs);

// ---- SwiGLU ----------------------------------------------------------------------------------
// inp (M,2F) is the gate and up projections out of one product: columns [0,F) gate g, [F,2F)
// up u. out (M,F) = silu(g) * u, silu(g) = g / (1 + exp(-g)).
void swiglu_forward(float* out, const float* inp, int64_t M, int F);
void swiglu_forward_bf16(bf16* out, const float* inp, int64_t M, int F);  // rounded to bf16
// dinp (M,2F) written: dg = dout * u * silu'(g), du = dout * silu(g); dinp and dinp_bf16 (either
// may be null) receive it in fp32 and/or bf16.
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t M, int F,
                     bf16* dinp_bf16 = nullptr);

}  // namespace kiln
