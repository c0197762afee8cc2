#include <cmath>

#include "kernels/kernels.h"

namespace kiln {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a,
                  bf16* p_bf16) {
  const float bc1 = 1.0f - std::pow(a.beta1, static_cast<float>(a.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(a.beta2, static_cast<float>(a.t)));
  const float step = a.lr / bc1;
  const float decay = 1.0f - a.lr * a.weight_decay;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float grad = g[i] * a.grad_scale;
    float mi = a.beta1 * m[i] + (1.0f - a.beta1) * grad;
    float vi = a.beta2 * v[i] + (1.0f - a.beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i] * decay;
    p[i] = pi - step * mi / (std::sqrt(vi) / bc2_sqrt + a.eps);
    if (p_bf16) p_bf16[i] = float_to_bf16(p[i]);
  }
}

}  // namespace kiln
