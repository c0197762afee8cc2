#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace kiln {

namespace {

struct AdamWConstants {
  float beta1, beta2, eps, grad_scale, bc2_sqrt, step, decay;
};

// One thread's range, written so that it vectorises (no aliasing, no branch in the loop); the
// operations are the ones of the scalar formula, in the same order, so the bits do not depend
// on the vector width.
template <bool kCopy>
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, bf16* __restrict p_bf16, int64_t n, AdamWConstants k) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const float grad = g[i] * k.grad_scale;
    const float mi = k.beta1 * m[i] + (1.0f - k.beta1) * grad;
    const float vi = k.beta2 * v[i] + (1.0f - k.beta2) * grad * grad;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * k.decay;
    const float out = pi - k.step * mi / (std::sqrt(vi) / k.bc2_sqrt + k.eps);
    p[i] = out;
    if constexpr (kCopy) p_bf16[i] = float_to_bf16(out);
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWParams& a,
                  bf16* p_bf16) {
  const float bc1 = 1.0f - std::pow(a.beta1, static_cast<float>(a.t));
  AdamWConstants k{a.beta1,
                   a.beta2,
                   a.eps,
                   a.grad_scale,
                   std::sqrt(1.0f - std::pow(a.beta2, static_cast<float>(a.t))),
                   a.lr / bc1,
                   1.0f - a.lr * a.weight_decay};
#pragma omp parallel
  {
    // Static ranges of whole cache lines per thread.
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t per = (n + nt - 1) / nt, span = (per + 15) / 16 * 16;
    const int64_t lo = std::min(n, span * id), hi = std::min(n, lo + span);
    if (p_bf16)
      adamw_range<true>(p + lo, g + lo, m + lo, v + lo, p_bf16 + lo, hi - lo, k);
    else
      adamw_range<false>(p + lo, g + lo, m + lo, v + lo, nullptr, hi - lo, k);
  }
}

}  // namespace kiln
