#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "kernels/vec_math.h"

namespace kiln {

namespace {

constexpr int kLanes = 16;

// Maximum of x[0..n) in kLanes lanes combined in a fixed order (vectorises, same bits always).
inline float max_lanes(const float* x, int n) {
  float lane[kLanes];
  for (int j = 0; j < kLanes; j++) lane[j] = -INFINITY;
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float m = -INFINITY;
  for (int j = 0; j < kLanes; j++) m = lane[j] > m ? lane[j] : m;
  for (; i < n; i++) m = x[i] > m ? x[i] : m;
  return m;
}

// The strides (batch, head, row, column) of one head's (T, hs) slice of the interleaved qkv
// (B,T,3C), and of the same slice transposed (hs, T).
struct HeadStrides {
  int64_t rows[4], cols[4];
};
HeadStrides head_strides(int T, int ld, int hs) {
  const int64_t bt = static_cast<int64_t>(T) * ld;
  return HeadStrides{{bt, hs, ld, 1}, {bt, hs, 1, ld}};
}

StridedMatmul head_product(int B, int NH, int64_t M, int64_t N, int64_t K, const int64_t* a,
                           const int64_t* b, const int64_t* c) {
  StridedMatmul s{
      B, NH, M, N, K, {a[0], a[1], a[2], a[3]}, {b[0], b[1], b[2], b[3]}, {c[0], c[1], c[2], c[3]}};
  return s;
}

}  // namespace

// Per (b, h): S = Q K^T as one batched product over all heads, read in place from qkv; the
// causal softmax of each row of S; out = P V written straight into the heads' columns. The
// products run over the full T x T (the zeros above the diagonal included): twice the useful
// flops, at the matmul rate instead of that of scalar loops.
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  const HeadStrides x = head_strides(T, C3, hs), o = head_strides(T, C, hs);
  const int64_t att_rows[4] = {NH * TT, TT, T, 1};
  matmul_strided(head_product(B, NH, T, T, hs, x.rows, x.cols, att_rows), qkv, qkv + C, att);
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int t = static_cast<int>(r % T);
    float* a = att + r * T;
    const int n = t + 1;
    for (int t2 = 0; t2 < n; t2++) a[t2] *= scale;
    const float maxv = max_lanes(a, n);
    float lane[kLanes] = {0};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; j++) {
        a[i + j] = exp_vec(a[i + j] - maxv);
        lane[j] += a[i + j];
      }
    float sum = 0;
    for (int j = 0; j < kLanes; j++) sum += lane[j];
    for (; i < n; i++) {
      a[i] = exp_vec(a[i] - maxv);
      sum += a[i];
    }
    const float inv = 1.0f / sum;
    for (int t2 = 0; t2 < n; t2++) a[t2] *= inv;
    for (int t2 = n; t2 < T; t2++) a[t2] = 0;
  }
  matmul_strided(head_product(B, NH, T, hs, T, att_rows, x.rows, o.rows), att, qkv + 2 * C, out);
}

// dP = dout V^T; dS = P * (dP - rowsum(P * dP)) * scale; dq = dS K, dk = dS^T q, dv = P^T dout,
// each a batched product over all heads written straight into dqkv's columns.
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  const HeadStrides x = head_strides(T, C3, hs), o = head_strides(T, C, hs);
  const int64_t att_rows[4] = {NH * TT, TT, T, 1}, att_cols[4] = {NH * TT, TT, 1, T};
  matmul_strided(head_product(B, NH, T, T, hs, o.rows, x.cols, att_rows), dout, qkv + 2 * C, datt);
  const int64_t rows = static_cast<int64_t>(B) * NH * T;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; r++) {
    const int n = static_cast<int>(r % T) + 1;
    const float* a = att + r * T;
    float* da = datt + r * T;
    float lane[kLanes] = {0};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; j++) lane[j] += a[i + j] * da[i + j];
    float dot = 0;
    for (int j = 0; j < kLanes; j++) dot += lane[j];
    for (; i < n; i++) dot += a[i] * da[i];
    for (int t2 = 0; t2 < n; t2++) da[t2] = a[t2] * (da[t2] - dot) * scale;
    for (int t2 = n; t2 < T; t2++) da[t2] = 0;
  }
  matmul_strided(head_product(B, NH, T, hs, T, att_rows, x.rows, x.rows), datt, qkv + C, dqkv);
  matmul_strided(head_product(B, NH, T, hs, T, att_cols, x.rows, x.rows), datt, qkv, dqkv + C);
  matmul_strided(head_product(B, NH, T, hs, T, att_cols, o.rows, x.rows), att, dout, dqkv + 2 * C);
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
