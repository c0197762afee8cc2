#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, int64_t M, int V,
                           int Vp, float dlogits_scale, bf16* dlogits_bf16) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    float* x = logits + m * Vp;
    int32_t y = targets[m];
    float maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = x[i] > maxv ? x[i] : maxv;
    float target_logit = y >= 0 ? x[y] : 0.0f;
    // One exp per element: the exponentials overwrite the logits and become the gradient.
    for (int i = 0; i < V; i++) x[i] = exp_vec(x[i] - maxv);
    double sum = 0;  // in order, in double: the same bits for any vector width
    for (int i = 0; i < V; i++) sum += x[i];
    losses[m] = y >= 0 ? static_cast<float>(std::log(sum) + maxv - target_logit) : 0.0f;
    if (dlogits_scale != 0.0f) {
      float s = y >= 0 ? static_cast<float>(dlogits_scale / sum) : 0.0f;
      for (int i = 0; i < V; i++) x[i] *= s;
      if (y >= 0) x[y] -= dlogits_scale;
      for (int i = V; i < Vp; i++) x[i] = 0;
      if (dlogits_bf16) {  // the same values, rounded, in their own buffer
        bf16* d = dlogits_bf16 + m * Vp;
        for (int i = 0; i < Vp; i++) d[i] = float_to_bf16(x[i]);
      }
    }
  }
}

}  // namespace kiln
