#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}

void gelu_forward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanh_vec(kGeluScale * (x + cube)));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    float tanh_arg = kGeluScale * (x + cube);
    float tanh_out = tanh_vec(tanh_arg);
    float sech2 = 1.0f - tanh_out * tanh_out;
    float grad = 0.5f * (1.0f + tanh_out) +
                 x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

}  // namespace kiln
