#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace kiln {

namespace {
constexpr float kEps = 1e-5f;
}

namespace {

// One row: mean and rstd of x, then the normalised row into o and/or o_bf16 (either may be
// null). Sums run in channel order, as they always have: the same bits from every caller.
inline void layernorm_row(float* o, bf16* o_bf16, float* mean, float* rstd, const float* x,
                          const float* w, const float* b, int C) {
  float s = 0;
  for (int c = 0; c < C; c++) s += x[c];
  float mu = s / C;
  float v = 0;
  for (int c = 0; c < C; c++) {
    float d = x[c] - mu;
    v += d * d;
  }
  float r = 1.0f / std::sqrt(v / C + kEps);
  if (o) {
    for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * r * w[c] + b[c];
    if (o_bf16)
      for (int c = 0; c < C; c++) o_bf16[c] = float_to_bf16(o[c]);
  } else if (o_bf16) {
    for (int c = 0; c < C; c++) o_bf16[c] = float_to_bf16((x[c] - mu) * r * w[c] + b[c]);
  }
  *mean = mu;
  *rstd = r;
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                       const float* b, int64_t M, int C) {
  layernorm_forward_fused(nullptr, out, nullptr, mean, rstd, inp, nullptr, w, b, M, C);
}

void layernorm_forward_fused(float* res, float* out, bf16* out_bf16, float* mean, float* rstd,
                             const float* inp, const float* add, const float* w, const float* b,
                             int64_t M, int C) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float* x = inp + m * C;
    if (add) {  // the residual sum, written while the row is in cache, is what is normalised
      float* r = res + m * C;
      const float* a = add + m * C;
      for (int c = 0; c < C; c++) r[c] = x[c] + a[c];
      x = r;
    }
    layernorm_row(out ? out + m * C : nullptr, out_bf16 ? out_bf16 + m * C : nullptr, mean + m,
                  rstd + m, x, w, b, C);
  }
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                        const float* w, const float* mean, const float* rstd, int64_t M, int C,
                        bf16* dinp_bf16, bool accumulate) {
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) {
      const float* x = inp + m * C;
      const float* d = dout + m * C;
      float mu = mean[m], r = rstd[m];
      float dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int c = 0; c < C; c++) {
        float norm = (x[c] - mu) * r;
        float dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      float* di = dinp + m * C;
      for (int c = 0; c < C; c++) {
        float norm = (x[c] - mu) * r;
        float dnorm = w[c] * d[c];
        di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r;
      }
      if (dinp_bf16) {  // the next product's operand, while the row is in cache
        bf16* dib = dinp_bf16 + m * C;
        for (int c = 0; c < C; c++) dib[c] = float_to_bf16(di[c]);
      }
    }
    // Weight and bias gradients: each thread owns a range of channels, rows in order.
    constexpr int kBlock = 64;
    int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      float aw[kBlock] = {0}, ab[kBlock] = {0};
      for (int64_t m = 0; m < M; m++) {
        const float* x = inp + m * C;
        const float* d = dout + m * C;
        float mu = mean[m], r = rstd[m];
        for (int c = c0; c < c1; c++) {
          aw[c - c0] += (x[c] - mu) * r * d[c];
          ab[c - c0] += d[c];
        }
      }
      for (int c = c0; c < c1; c++) {
        dw[c] = accumulate ? dw[c] + aw[c - c0] : aw[c - c0];
        db[c] = accumulate ? db[c] + ab[c - c0] : ab[c - c0];
      }
    }
  }
}

void bias_backward(float* db, const float* dout, int64_t M, int N, bool accumulate) {
  constexpr int kBlock = 64;
  int nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int j0 = blk * kBlock, j1 = std::min(N, j0 + kBlock);
    float acc[kBlock] = {0};
    for (int64_t m = 0; m < M; m++) {
      const float* d = dout + m * N;
      for (int j = j0; j < j1; j++) acc[j - j0] += d[j];
    }
    for (int j = j0; j < j1; j++) db[j] = accumulate ? db[j] + acc[j - j0] : acc[j - j0];
  }
}

}  // namespace kiln
