#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

float softmax_row_max(const float* x, int64_t n) {
  // Maximum and sum in 16 lanes combined in a fixed order: they vectorise (a serial double
  // sum over 50k logits is a chain of dependent adds) and give the same bits on every run.
  constexpr int kLanes = 16;
  float lmax[kLanes];
  for (int j = 0; j < kLanes; j++) lmax[j] = -INFINITY;
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes)
    for (int j = 0; j < kLanes; j++) lmax[j] = x[i0 + j] > lmax[j] ? x[i0 + j] : lmax[j];
  float maxv = -INFINITY;
  for (int j = 0; j < kLanes; j++) maxv = lmax[j] > maxv ? lmax[j] : maxv;
  for (int64_t i = i0; i < n; i++) maxv = x[i] > maxv ? x[i] : maxv;
  return maxv;
}

double softmax_row_exp_sum(float* x, int64_t n, float maxv) {
  // One exp per element: the exponentials overwrite the logits and become the gradient.
  constexpr int kLanes = 16;
  double lsum[kLanes] = {0};
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes)
    for (int j = 0; j < kLanes; j++) {
      const float e = exp_vec(x[i0 + j] - maxv);
      x[i0 + j] = e;
      lsum[j] += e;
    }
  double sum = 0;  // in double, lanes in order, then the tail
  for (int j = 0; j < kLanes; j++) sum += lsum[j];
  for (int64_t i = i0; i < n; i++) {
    x[i] = exp_vec(x[i] - maxv);
    sum += x[i];
  }
  return sum;
}

void softmax_row_gradient(float* x, int64_t n, int64_t total, float s, int64_t target, float scale,
                          bf16* out_bf16) {
  if (out_bf16) {  // the gradient goes only to the bf16 buffer, rounded in one pass
    for (int64_t i = 0; i < n; i++) out_bf16[i] = float_to_bf16(x[i] * s);
    if (target >= 0) out_bf16[target] = float_to_bf16(x[target] * s - scale);
    for (int64_t i = n; i < total; i++) out_bf16[i] = 0;
    return;
  }
  for (int64_t i = 0; i < n; i++) x[i] *= s;
  if (target >= 0) x[target] -= scale;
  for (int64_t i = n; i < total; i++) x[i] = 0;
}

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int64_t M, int V,
                           int Vp, float dlogits_scale, bf16* dlogits_bf16) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float* x = logits + m * Vp;
    int32_t y = targets[m];
    const float maxv = softmax_row_max(x, V);
    float target_logit = y >= 0 ? x[y] : 0.0f;
    const double sum = softmax_row_exp_sum(x, V, maxv);
    losses[m] = y >= 0 ? static_cast<float>(std::log(sum) + maxv - target_logit) : 0.0f;
    if (dlogits_scale != 0.0f) {
      const float s = y >= 0 ? static_cast<float>(dlogits_scale / sum) : 0.0f;
      softmax_row_gradient(x, V, Vp, s, y, dlogits_scale,
                           dlogits_bf16 ? dlogits_bf16 + m * Vp : nullptr);
    }
  }
}

}  // namespace kiln
