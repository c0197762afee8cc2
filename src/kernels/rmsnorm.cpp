#include <algorithm>
#include <cmath>

#include "kernels/llama_kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

namespace {

// One row: rstd of x, then the normalised row into o and/or o_bf16 (either may be null). The sum
// of squares runs in dot_vec's 16 lanes: vectorised, and the same bits from every caller.
inline void rmsnorm_row(float* o, bf16* o_bf16, float* rstd, const float* x, const float* w, int C,
                        float eps) {
  const float r = 1.0f / std::sqrt(dot_vec(x, x, C) / C + eps);
  if (o) {
    for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
    if (o_bf16)
      for (int c = 0; c < C; c++) o_bf16[c] = float_to_bf16(o[c]);
  } else if (o_bf16) {
    for (int c = 0; c < C; c++) o_bf16[c] = float_to_bf16(x[c] * r * w[c]);
  }
  *rstd = r;
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t M, int C,
                     float eps) {
  rmsnorm_forward_fused(nullptr, out, nullptr, rstd, inp, nullptr, w, M, C, eps);
}

void rmsnorm_forward_fused(float* res, float* out, bf16* out_bf16, float* rstd, const float* inp,
                           const float* add, const float* w, int64_t M, int C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float* x = inp + m * C;
    if (add) {  // the residual sum, written while the row is in cache, is what is normalised
      float* r = res + m * C;
      const float* a = add + m * C;
      for (int c = 0; c < C; c++) r[c] = x[c] + a[c];
      x = r;
    }
    rmsnorm_row(out ? out + m * C : nullptr, out_bf16 ? out_bf16 + m * C : nullptr, rstd + m, x, w,
                C, eps);
  }
}

// With y = x r w and r = (mean(x^2) + eps)^(-1/2):
//   dx = r (w dy) - x r^3 / C * sum(w dy x),   dw = sum over rows of x r dy.
void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                      const float* rstd, int64_t M, int C, bf16* dinp_bf16, bool accumulate) {
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; m++) {
      const float* x = inp + m * C;
      const float* d = dout + m * C;
      const float r = rstd[m];
      float lane[16] = {0};
      int c = 0;
      for (; c + 16 <= C; c += 16)
        for (int j = 0; j < 16; j++) lane[j] += w[c + j] * d[c + j] * x[c + j];
      float s = 0;
      for (int j = 0; j < 16; j++) s += lane[j];
      for (; c < C; c++) s += w[c] * d[c] * x[c];
      const float k = r * r * r * (s / C);
      float* di = dinp + m * C;
      for (c = 0; c < C; c++) di[c] += r * (w[c] * d[c]) - x[c] * k;
      if (dinp_bf16) {  // the next product's operand, while the row is in cache
        bf16* dib = dinp_bf16 + m * C;
        for (c = 0; c < C; c++) dib[c] = float_to_bf16(di[c]);
      }
    }
    // The weight gradient: each thread owns a range of channels and visits the rows in order.
    constexpr int kBlock = 64;
    const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      float aw[kBlock] = {0};
      for (int64_t m = 0; m < M; m++) {
        const float* x = inp + m * C;
        const float* d = dout + m * C;
        const float r = rstd[m];
        for (int c = c0; c < c1; c++) aw[c - c0] += x[c] * r * d[c];
      }
      for (int c = c0; c < c1; c++) dw[c] = accumulate ? dw[c] + aw[c - c0] : aw[c - c0];
    }
  }
}

}  // namespace kiln
