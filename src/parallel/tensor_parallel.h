// Tensor parallelism (Megatron-LM, Shoeybi et al. 2019) and sequence parallelism (Korthikanti et
// al. 2022): the communication a layer split across the ranks of a tensor-parallel group needs,
// as small functions next to the linears that use them (model/gpt2.cpp).
//
// A column-parallel linear (each rank holds some output columns: attention heads, MLP units)
// reads the whole input; a row-parallel linear (each rank holds the matching input rows) makes a
// partial sum of the whole output. Between them Megatron names two operators:
//   f, before a column-parallel linear: identity forward, all-reduce of the input's gradient
//      backward;
//   g, after a row-parallel linear: all-reduce of the partial output forward, identity backward.
// With sequence parallelism the rows (tokens) of the residual stream are split across the group
// outside the linears, so LayerNorms and residual adds work on 1/tp of the rows: f becomes an
// all-gather of rows forward and a reduce-scatter backward, g a reduce-scatter forward and an
// all-gather backward. Rows are split contiguously: rank r holds rows [r·R/tp, (r+1)·R/tp).
//
// The vocabulary is split too: rank r holds rows [r·Vp/tp, (r+1)·Vp/tp) of the token embedding,
// which is also the LM head's matrix, so the logits are computed and the loss taken without any
// rank holding all of them.
#pragma once
#include <cstdint>

#include "core/buffer.h"
#include "kernels/bf16.h"

namespace kiln {

class Communicator;

struct TensorParallel {
  Communicator* comm = nullptr;  // the tensor-parallel group (size ranks); null when size = 1
  int size = 1, rank = 0;
  bool sp = false;  // sequence parallelism
  bool on() const { return size > 1; }
  // Rows of the residual stream this rank holds, out of `rows`.
  int64_t local_rows(int64_t rows) const { return sp ? rows / size : rows; }
};

// f forward with sequence parallelism: rows (rows/size, cols) of this rank into `full`
// (rows, cols), every rank's rows gathered in rank order. Without it, nothing to do.
void f_forward(const TensorParallel& tp, float* full, const float* local, int64_t rows,
               int64_t cols);
void f_forward(const TensorParallel& tp, bf16* full, const bf16* local, int64_t rows, int64_t cols);
// f backward: `dfull` (rows, cols) holds this rank's partial gradient of the input. Without
// sequence parallelism it is all-reduced in place (dlocal = dfull); with it, this rank's rows of
// the sum go to `dlocal` (rows/size, cols).
void f_backward(const TensorParallel& tp, float* dfull, float* dlocal, int64_t rows, int64_t cols);
// g forward: `partial` (rows, cols) is this rank's part of a row-parallel output. Without
// sequence parallelism it is all-reduced in place; with it, this rank's rows of the sum go to
// `out` (rows/size, cols).
void g_forward(const TensorParallel& tp, float* partial, float* out, int64_t rows, int64_t cols);
// g backward: with sequence parallelism the output gradient's rows of every rank into `dfull`
// (rows, cols); without it the gradient is already whole.
inline void g_backward(const TensorParallel& tp, float* dfull, const float* dlocal, int64_t rows,
                       int64_t cols) {
  f_forward(tp, dfull, dlocal, rows, cols);
}
// In-place sum over the group of n values (gradients of replicated parameters that each rank
// computed from its own rows, under sequence parallelism).
void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n);

// y (rows, cols) += the bias b (cols) on every row: a row-parallel product's bias under sequence
// parallelism, added to this rank's rows of the sum.
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols);

// The vocabulary rows this rank holds, [begin, begin + count) of padded_vocab.
struct VocabSlice {
  int64_t begin = 0, count = 0;
};
VocabSlice vocab_slice(const TensorParallel& tp, int64_t padded_vocab);

// Vocabulary-parallel embedding: out (B·T, C) = this rank's rows of wte for the tokens it holds
// (zero for the others) plus, on rank 0 only, the positions' wpe rows (wpe may be null); the sum
// over the group (g forward) is then the embedding.
void vocab_embedding_forward(float* out, const int32_t* tokens, const float* wte_part, VocabSlice v,
                             const float* wpe, int B, int T, int C, int tp_rank);
// dwte_part += the gradient rows of the tokens this rank holds; dwpe (if not null) += all rows.
// dout (B·T, C) is the embedding's whole output gradient.
void vocab_embedding_backward(float* dwte_part, float* dwpe, const float* dout,
                              const int32_t* tokens, VocabSlice v, int B, int T, int C);

// Vocabulary-parallel softmax cross-entropy over M rows of this rank's logits (M, v.count): the
// row maxima, the sums of exponentials and the target logits are combined over the group, so
// the loss (and its gradient, this rank's columns) is that of the whole vocabulary; columns at
// or past vocab_size (padding) take no part. losses (M) and the gradient as in
// softmax_cross_entropy (kernels/kernels.h): logits overwritten with it (scaled by
// dlogits_scale), or with dlogits_bf16 rounded into it. Targets < 0 contribute nothing.
// `work` holds the row maxima and sums for at least M rows (made once: nothing is allocated in
// the step).
struct VocabLossWork {
  VocabLossWork() = default;
  VocabLossWork(const TensorParallel& tp, int64_t rows) : maxes(rows * tp.size), sums(2 * rows) {}
  Buffer<float> maxes;  // every rank's maximum of each row
  Buffer<double> sums;  // each row's sum of exponentials, then its target logit
};
void vocab_parallel_cross_entropy(const TensorParallel& tp, float* logits, float* losses,
                                  const int32_t* targets, int64_t M, int vocab_size, VocabSlice v,
                                  float dlogits_scale, VocabLossWork& work,
                                  bf16* dlogits_bf16 = nullptr);

}  // namespace kiln
