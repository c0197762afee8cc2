#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/vec_math.h"

namespace kiln {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const float* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        float* a = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          float s = dot_vec(q, k, hs) * scale;
          a[t2] = s;
          if (s > maxv) maxv = s;
        }
        for (int t2 = 0; t2 <= t; t2++) a[t2] = exp_vec(a[t2] - maxv);
        float sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += a[t2];
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0;
        float* o = out + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * hs;
          float w = a[t2];
          for (int i = 0; i < hs; i++) o[i] += w * v[i];
        }
      }
    }
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // One (b, h) per task: its dq, dk, dv columns belong to it alone, so no two tasks race and
  // the order of accumulation is fixed.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        float* base = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        std::memset(base, 0, sizeof(float) * hs);
        std::memset(base + C, 0, sizeof(float) * hs);
        std::memset(base + 2 * C, 0, sizeof(float) * hs);
      }
      for (int t = 0; t < T; t++) {
        const float* a = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        float* da = datt + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        const float* d = dout + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        const float* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        float* dq = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        // through out = att @ v
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * hs;
          float* dv = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * hs;
          for (int i = 0; i < hs; i++) dv[i] += a[t2] * d[i];
          da[t2] = dot_vec(d, v, hs);
        }
        // through the softmax
        float dot = 0;
        for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * da[t2];
        for (int t2 = 0; t2 <= t; t2++) da[t2] = a[t2] * (da[t2] - dot) * scale;
        // through q . k
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          float* dk = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          float g = da[t2];
          for (int i = 0; i < hs; i++) {
            dq[i] += g * k[i];
            dk[i] += g * q[i];
          }
        }
      }
    }
  }
}

void attention_forward_flash(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const float* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        float* o = out + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0;
        // One pass over the keys with a running maximum m and sum l of exp(s - m); the output
        // accumulator is rescaled whenever m grows.
        float m = -INFINITY, l = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          const float* v = k + C;
          const float s = dot_vec(q, k, hs) * scale;
          if (s > m) {
            const float c = t2 == 0 ? 0.0f : exp_vec(m - s);
            for (int i = 0; i < hs; i++) o[i] *= c;
            l *= c;
            m = s;
          }
          const float p = exp_vec(s - m);
          l += p;
          for (int i = 0; i < hs; i++) o[i] += p * v[i];
        }
        const float inv = 1.0f / l;
        for (int i = 0; i < hs; i++) o[i] *= inv;
        lse[(static_cast<int64_t>(b) * NH + h) * T + t] = m + std::log(l);
      }
    }
  }
}

void attention_backward_flash(float* dqkv, const float* dout, const float* qkv, const float* out,
                              const float* lse, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // As attention_backward: one (b, h) per task, which alone owns its dq, dk, dv columns.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        float* base = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        std::memset(base, 0, sizeof(float) * hs);
        std::memset(base + C, 0, sizeof(float) * hs);
        std::memset(base + 2 * C, 0, sizeof(float) * hs);
      }
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        const float* o = out + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        const float* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        float* dq = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        const float L = lse[(static_cast<int64_t>(b) * NH + h) * T + t];
        // sum over t2 of p * (dout . v) = dout . out: the softmax backward's row constant.
        const float D = dot_vec(d, o, hs);
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          const float* v = k + C;
          float* dk = dqkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          float* dv = dk + C;
          const float p = exp_vec(dot_vec(q, k, hs) * scale - L);
          for (int i = 0; i < hs; i++) dv[i] += p * d[i];
          const float g = p * (dot_vec(d, v, hs) - D) * scale;
          for (int i = 0; i < hs; i++) {
            dq[i] += g * k[i];
            dk[i] += g * q[i];
          }
        }
      }
    }
  }
}

void attention_decode(float* out, float* scores, const float* q, const float* k_cache,
                      const float* v_cache, int n, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int h = 0; h < NH; h++) {
    const float* qh = q + h * hs;
    float maxv = -INFINITY;
    for (int t = 0; t < n; t++) {
      const float* k = k_cache + static_cast<int64_t>(t) * C + h * hs;
      float s = dot_vec(qh, k, hs) * scale;
      scores[t] = s;
      if (s > maxv) maxv = s;
    }
    for (int t = 0; t < n; t++) scores[t] = exp_vec(scores[t] - maxv);
    float sum = 0;
    for (int t = 0; t < n; t++) sum += scores[t];
    float* o = out + h * hs;
    for (int i = 0; i < hs; i++) o[i] = 0;
    for (int t = 0; t < n; t++) {
      const float* v = v_cache + static_cast<int64_t>(t) * C + h * hs;
      float w = scores[t] / sum;
      for (int i = 0; i < hs; i++) o[i] += w * v[i];
    }
  }
}

}  // namespace kiln
