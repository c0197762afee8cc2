#include "kernels/llama_kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

namespace {

// silu(g) = g / (1 + exp(-g)), as torch computes it.
inline float silu(float g) {
  return g / (1.0f + exp_vec(-g));
}

}  // namespace

void swiglu_forward(float* out, const float* inp, int64_t M, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float* g = inp + m * 2 * F;
    const float* u = g + F;
    float* o = out + m * F;
#pragma omp simd
    for (int j = 0; j < F; j++) o[j] = silu(g[j]) * u[j];
  }
}

void swiglu_forward_bf16(bf16* out, const float* inp, int64_t M, int F) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float* g = inp + m * 2 * F;
    const float* u = g + F;
    bf16* o = out + m * F;
#pragma omp simd
    for (int j = 0; j < F; j++) o[j] = float_to_bf16(silu(g[j]) * u[j]);
  }
}

// With s = sigmoid(g): silu'(g) = s (1 + g (1 - s)).
void swiglu_backward(float* dinp, const float* inp, const float* dout, int64_t M, int F,
                     bf16* dinp_bf16) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const float* g = inp + m * 2 * F;
    const float* u = g + F;
    const float* d = dout + m * F;
    float* dg = dinp ? dinp + m * 2 * F : nullptr;
    bf16* dgb = dinp_bf16 ? dinp_bf16 + m * 2 * F : nullptr;
#pragma omp simd
    for (int j = 0; j < F; j++) {
      const float e = exp_vec(-g[j]);
      const float s = 1.0f / (1.0f + e);
      const float dgj = d[j] * u[j] * (s * (1.0f + g[j] * (1.0f - s)));
      const float duj = d[j] * (g[j] / (1.0f + e));
      if (dg) {
        dg[j] = dgj;
        dg[F + j] = duj;
      }
      if (dgb) {
        dgb[j] = float_to_bf16(dgj);
        dgb[F + j] = float_to_bf16(duj);
      }
    }
  }
}

}  // namespace kiln
