#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

inline float gelu(float x) {
  float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanh_vec(kGeluScale * (x + cube)));
}

// d gelu(x) / dx
inline float gelu_grad(float x) {
  float cube = 0.044715f * x * x * x;
  float tanh_arg = kGeluScale * (x + cube);
  float tanh_out = tanh_vec(tanh_arg);
  float sech2 = 1.0f - tanh_out * tanh_out;
  return 0.5f * (1.0f + tanh_out) +
         x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = gelu(inp[i]);
}

void gelu_forward_bf16(bf16* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) out[i] = float_to_bf16(gelu(inp[i]));
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) dinp[i] = gelu_grad(inp[i]) * dout[i];
}

void gelu_bias_backward(float* dinp, bf16* dinp_bf16, float* db, const float* inp,
                        const float* dout, int64_t M, int N, bool accumulate) {
  // Each thread owns blocks of columns and walks the rows in order, as bias_backward does: the
  // bias gradient gets the same bits, and each gradient value is made once, for all its users.
  constexpr int kBlock = 64;
  const int nblocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    const int j0 = blk * kBlock, j1 = std::min(N, j0 + kBlock);
    float acc[kBlock] = {0};
    for (int64_t m = 0; m < M; m++) {
      const int64_t row = m * N;
      for (int j = j0; j < j1; j++) {
        const float g = gelu_grad(inp[row + j]) * dout[row + j];
        if (dinp) dinp[row + j] = g;
        if (dinp_bf16) dinp_bf16[row + j] = float_to_bf16(g);
        acc[j - j0] += g;
      }
    }
    for (int j = j0; j < j1; j++) db[j] = accumulate ? db[j] + acc[j - j0] : acc[j - j0];
  }
}

}  // namespace kiln
