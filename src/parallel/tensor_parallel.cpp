#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace kiln {

namespace {

std::vector<int64_t> equal_counts(int parts, int64_t n) {
  return std::vector<int64_t>(static_cast<size_t>(parts), n);
}

template <typename T>
void gather_rows(const TensorParallel& tp, T* full, const T* local, int64_t rows, int64_t cols,
                 DType dt) {
  if (!tp.on() || !tp.sp) {
    KILN_CHECK(full == local);
    return;
  }
  KILN_CHECK(rows % tp.size == 0);
  const int64_t n = rows / tp.size * cols;
  T* mine = full + tp.rank * n;
  if (mine != local) std::memcpy(mine, local, static_cast<size_t>(n) * sizeof(T));
  tp.comm->all_gather(full, equal_counts(tp.size, n), dt);
}

}  // namespace

void f_forward(const TensorParallel& tp, float* full, const float* local, int64_t rows,
               int64_t cols) {
  gather_rows(tp, full, local, rows, cols, DType::F32);
}

void f_forward(const TensorParallel& tp, bf16* full, const bf16* local, int64_t rows,
               int64_t cols) {
  gather_rows(tp, full, local, rows, cols, DType::BF16);
}

void f_backward(const TensorParallel& tp, float* dfull, float* dlocal, int64_t rows, int64_t cols) {
  g_forward(tp, dfull, dlocal, rows, cols);
}

void g_forward(const TensorParallel& tp, float* partial, float* out, int64_t rows, int64_t cols) {
  if (!tp.on()) return;
  if (!tp.sp) {
    KILN_CHECK(out == partial);
    tp.comm->all_reduce(partial, rows * cols, DType::F32);
    return;
  }
  KILN_CHECK(rows % tp.size == 0 && out != partial);
  tp.comm->reduce_scatter(partial, out, equal_counts(tp.size, rows / tp.size * cols), DType::F32);
}

void tp_all_reduce(const TensorParallel& tp, float* x, int64_t n) {
  if (!tp.on()) return;
  tp.comm->all_reduce(x, n, DType::F32);
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    float* row = y + r * cols;
    for (int64_t c = 0; c < cols; c++) row[c] += b[c];
  }
}

VocabSlice vocab_slice(const TensorParallel& tp, int64_t padded_vocab) {
  KILN_CHECK(padded_vocab % tp.size == 0);
  const int64_t n = padded_vocab / tp.size;
  return {tp.rank * n, n};
}

void vocab_embedding_forward(float* out, const int32_t* tokens, const float* wte_part, VocabSlice v,
                             const float* wpe, int B, int T, int C, int tp_rank) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float* o = out + (static_cast<int64_t>(b) * T + t) * C;
      const int64_t row = tokens[b * T + t] - v.begin;
      const float* e = row >= 0 && row < v.count ? wte_part + row * C : nullptr;
      const float* p = wpe && tp_rank == 0 ? wpe + static_cast<int64_t>(t) * C : nullptr;
      for (int c = 0; c < C; c++) o[c] = (e ? e[c] : 0.0f) + (p ? p[c] : 0.0f);
    }
}

void vocab_embedding_backward(float* dwte_part, float* dwpe, const float* dout,
                              const int32_t* tokens, VocabSlice v, int B, int T, int C) {
  // Each thread owns a range of channels and visits positions in order (as encoder_backward):
  // no races, a fixed order.
  constexpr int kBlock = 64;
  const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<int64_t>(b) * T + t) * C;
        const int64_t row = tokens[b * T + t] - v.begin;
        if (row >= 0 && row < v.count) {
          float* e = dwte_part + row * C;
          for (int c = c0; c < c1; c++) e[c] += d[c];
        }
        if (dwpe) {
          float* p = dwpe + static_cast<int64_t>(t) * C;
          for (int c = c0; c < c1; c++) p[c] += d[c];
        }
      }
  }
}

void vocab_parallel_cross_entropy(const TensorParallel& tp, float* logits, float* losses,
                                  const int32_t* targets, int64_t M, int vocab_size, VocabSlice v,
                                  float dlogits_scale, VocabLossWork& work, bf16* dlogits_bf16) {
  const int64_t Vl = v.count;
  // The columns of the real vocabulary here: [0, valid).
  const int64_t valid = std::clamp<int64_t>(vocab_size - v.begin, 0, Vl);
  auto target_col = [&](int64_t m) -> int64_t {
    const int64_t y = targets[m];
    return y >= 0 && y >= v.begin && y < v.begin + Vl ? y - v.begin : -1;
  };
  // 1. Each row's maximum over the whole vocabulary: every rank's, gathered.
  KILN_CHECK(static_cast<int64_t>(work.maxes.size()) >= M * tp.size &&
             static_cast<int64_t>(work.sums.size()) >= 2 * M);
  float* maxes = work.maxes.data();
  float* mine = maxes + tp.rank * M;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    mine[m] = softmax_row_max(logits + m * Vl, valid);
  }
  tp.comm->all_gather(maxes, equal_counts(tp.size, M), DType::F32);
  // 2. Exponentials (overwriting the logits), their sums and the target logits, summed over the
  // group: [sum of row 0..M-1, target logit of row 0..M-1].
  double* sums = work.sums.data();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float* x = logits + m * Vl;
    float mx = -INFINITY;
    for (int r = 0; r < tp.size; r++) mx = std::max(mx, maxes[r * M + m]);
    maxes[m] = mx;  // row m's maximum from now on (rank 0's slot; every slot was read)
    const int64_t y = target_col(m);
    sums[M + m] = y >= 0 ? x[y] : 0.0;
    sums[m] = softmax_row_exp_sum(x, valid, mx);
  }
  tp.comm->all_reduce(sums, 2 * M, DType::F64);
  // 3. Loss and gradient: softmax minus the one-hot target, this rank's columns.
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float* x = logits + m * Vl;
    const bool counted = targets[m] >= 0;
    const double sum = sums[m];
    losses[m] = counted ? static_cast<float>(std::log(sum) + maxes[m] - sums[M + m]) : 0.0f;
    if (dlogits_scale == 0.0f) continue;
    const float s = counted ? static_cast<float>(dlogits_scale / sum) : 0.0f;
    softmax_row_gradient(x, valid, Vl, s, target_col(m), dlogits_scale,
                         dlogits_bf16 ? dlogits_bf16 + m * Vl : nullptr);
  }
}

}  // namespace kiln
