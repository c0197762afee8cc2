// The non-matmul math of a GPT-2 step, each forward next to its backward.
//
// Shape vocabulary: B batch, T time, C channels, NH heads, hs = C/NH head size, V vocabulary,
// Vp padded vocabulary, M = B*T rows.
//
// Gradient convention (as in llm.c): parameter gradients and the residual-stream gradient are
// accumulated (+=); activation gradients that a kernel alone produces are written (=).
// Every kernel gives the same bits for any thread count: reductions run in a fixed order.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace kiln {

// ---- embedding ------------------------------------------------------------------------------
// out (B,T,C) = wte[inp] + wpe[t]; inp is (B,T). Without wpe (null), out = wte[inp].
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C);
// dwte, dwpe += scatter of dout (B,T,C); dwpe may be null.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                      int C);

// ---- layernorm (eps 1e-5) -------------------------------------------------------------------
// out (M,C), mean (M), rstd (M) from inp (M,C).
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t M, int C);
// The same fused with what surrounds it in a block: with `add`, res = inp + add is written and
// normalised (the residual add); out and out_bf16 (either may be null) receive the normalised
// rows in fp32 and/or bf16. One pass over the rows instead of a copy, the norm and a conversion.
void layernorm_forward_fused(float* res, float* out, bf16* out_bf16, float* mean, float* rstd,
                             const float* inp, const float* add, const float* w, const float* b,
                             int64_t M, int C);
// dinp += ..., dw += ..., db += ...; with dinp_bf16, the accumulated dinp is also written there
// rounded to bf16 (the operand of the next product of backward).
// With accumulate = false, dw and db are written (=) instead.
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t M, int C,
                        bf16* dinp_bf16 = nullptr, bool accumulate = true);

// ---- GELU, tanh approximation ---------------------------------------------------------------
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_forward_bf16(bf16* out, const float* inp, int64_t n);  // rounded to bf16
// dinp = gelu'(inp) * dout (written).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n);
// GELU's backward fused with the bias gradient of the layer before it, for inp, dout (M,N):
// g = gelu'(inp) * dout is written to dinp and/or dinp_bf16 (either may be null) and
// db (N) += column sums of g, with bias_backward's bits.
void gelu_bias_backward(float* dinp, bf16* dinp_bf16, float* db, const float* inp,
                        const float* dout, int64_t M, int N, bool accumulate = true);

// ---- causal self-attention ------------------------------------------------------------------
// GPT-2's multi-head forms: each is the grouped-query kernel below with NKV == NH, hs = C/NH.
// qkv (B,T,3C) holds q, k, v side by side; out (B,T,C); att (B,NH,T,T) keeps the softmax
// probabilities for backward (rows above the diagonal are zero).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) is written; datt (B,NH,T,T) is scratch.
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);

// The same attention without the T x T probabilities (flash-attention style): queries and keys
// in blocks of up to 128, an online softmax over the key blocks (a running maximum and sum per
// row, the output rescaled as the maximum grows), blocks above the diagonal skipped, and the
// products batched over the heads. Forward keeps lse (B,NH,T), each row's log-sum-exp of the
// scaled scores; backward makes each probability again as exp(score - lse) and needs the
// forward's output `out` (B,T,C). dqkv is written. scratch holds
// attention_flash_scratch_floats(B, T, NH) floats: O(B*NH*(128^2 + T)), no T x T buffer.
int64_t attention_flash_scratch_floats(int B, int T, int NH);
void attention_forward_flash(float* out, float* lse, float* scratch, const float* qkv, int B, int T,
                             int C, int NH);
void attention_backward_flash(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH);

// One query position against a KV cache, for incremental decoding: q (C) attends to the first
// n rows of k_cache and v_cache (each (n,C), heads side by side); out (C); scores (n) is scratch.
void attention_decode(float* out, float* scores, const float* q, const float* k_cache,
                      const float* v_cache, int n, int C, int NH);

// ---- grouped-query attention: the general form of the kernels above ----------------------------
// NKV key/value heads shared by NH query heads (NH % NKV == 0; query head h reads kv head
// h / (NH/NKV)); NKV == NH is the attention above, with its bits (the GPT-2 forms call these),
// NKV == 1 multi-query attention. qkv (B,T,(NH + 2*NKV)*hs) holds the NH q heads, then the NKV k
// heads, then the NKV v heads; out (B,T,NH*hs). att, lse and the flash scratch are per query
// head, as above. dqkv is written; the gradient of a k or v head is the sum over the query heads
// that share it, added in the order of those heads (the same bits for any thread count).
void attention_forward_gqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                           int hs);
void attention_backward_gqa(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int NKV, int hs);
void attention_forward_flash_gqa(float* out, float* lse, float* scratch, const float* qkv, int B,
                                 int T, int NH, int NKV, int hs);
void attention_backward_flash_gqa(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* out, const float* lse, int B, int T, int NH, int NKV,
                                  int hs);
// q (NH*hs) against the first n rows of k_cache and v_cache, each (n, NKV*hs); out (NH*hs);
// scores (n) is scratch.
void attention_decode_gqa(float* out, float* scores, const float* q, const float* k_cache,
                          const float* v_cache, int n, int NH, int NKV, int hs);

// ---- bias gradient --------------------------------------------------------------------------
// db (N) += column sums of dout (M,N); written (=) with accumulate = false.
void bias_backward(float* db, const float* dout, int64_t M, int N, bool accumulate = true);

// ---- loss -----------------------------------------------------------------------------------
// From logits (M,Vp) whose first V columns are real: losses (M) = -log softmax[target].
// The logits are consumed: one exponential per element is computed in place. If
// dlogits_scale != 0 they end as dloss/dlogits with dloss = dlogits_scale per row:
// (softmax - onehot) * scale, and 0 in the padded columns; otherwise their content is
// unspecified. Targets < 0 are ignored (loss 0, gradient 0). With dlogits_bf16 (M,Vp) the
// gradient is written there instead, rounded to bf16 (the same values the fp32 path gives,
// rounded), and the logits end unspecified.
// A row's softmax pieces, vectorised in a fixed order (the same bits on every run): the maximum
// of x[0, n), and the sum of exp(x - maxv) with the exponentials written over x.
float softmax_row_max(const float* x, int64_t n);
double softmax_row_exp_sum(float* x, int64_t n, float maxv);
// The row's gradient from its exponentials x[0, n): x·s, minus `scale` at column `target` (if
// >= 0), zero in the padding [n, total); over x, or rounded into out_bf16 when given.
void softmax_row_gradient(float* x, int64_t n, int64_t total, float s, int64_t target, float scale,
                          bf16* out_bf16);
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int64_t M, int V,
                           int Vp, float dlogits_scale, bf16* dlogits_bf16 = nullptr);

// ---- elementwise ----------------------------------------------------------------------------
void add_inplace(float* y, const float* x, int64_t n);  // y += x
void copy(float* y, const float* x, int64_t n);         // y = x
void scale_inplace(float* y, float s, int64_t n);       // y *= s
void to_bf16(bf16* y, const float* x, int64_t n);       // y = bf16(x), rounded to nearest even
// y = bf16(x), and x replaced by y's value: a tensor kept for backward in bf16 whose forward
// goes on from the same rounded values, so forward, backward and recompute all see them.
void round_to_bf16(float* x, bf16* y, int64_t n);
void from_bf16(float* y, const bf16* x, int64_t n);  // y = float(x), exact

// Sum of squares in double, in fixed-size chunks summed in order: the same bits for any thread
// count.
double sum_squares(const float* x, int64_t n);

// ---- AdamW (decoupled weight decay, bias-corrected) -----------------------------------------
// For one tensor, in PyTorch's order of operations (t counts from 1):
//   p *= 1 - lr*wd;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;
//   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// `grad_scale` multiplies the gradient on the fly (used for clipping).
struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t t;
};
// With p_bf16, the updated p is also written there rounded to bf16 (the matmuls' weight copy,
// made in the same pass instead of a second one over the parameters).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a,
                  bf16* p_bf16 = nullptr);

}  // namespace kiln
