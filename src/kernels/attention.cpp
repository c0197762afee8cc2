#include <algorithm>
#include <cmath>

#include "core/error.h"
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

// The strides (batch, head, row, column) of one head's (T, hs) slice of a tensor of rows of ld
// floats whose heads are `head` floats apart, and of the same slice transposed (hs, T).
struct HeadStrides {
  int64_t rows[4], cols[4];
};
HeadStrides head_strides(int T, int64_t ld, int64_t head) {
  const int64_t bt = static_cast<int64_t>(T) * ld;
  return HeadStrides{{bt, head, ld, 1}, {bt, head, 1, ld}};
}

StridedMatmul head_product(int B, int NH, int64_t M, int64_t N, int64_t K, const int64_t* a,
                           const int64_t* b, const int64_t* c) {
  StridedMatmul s{
      B, NH, M, N, K, {a[0], a[1], a[2], a[3]}, {b[0], b[1], b[2], b[3]}, {c[0], c[1], c[2], c[3]}};
  return s;
}

// Query heads h = g*G + j (G = NH/NKV) read kv head g. A batched product runs over (b, g) for one
// j at a time: the q, out and att heads of that j are every G-th head (head stride G*hs, or G*T*T
// for att), the k and v heads every head. With G = 1 this is one product over (b, h) with the
// strides and pointers the MHA kernels used, so GPT-2 gets the same primitives and the same bits.
// The k and v gradients of the G query heads of a group are added in the order j = 0, 1, ...

// Where the heads live: ld the row width of qkv, Cq that of out, and the strides (batch, head,
// row, column) of a group's j-th q head, of a kv head, of an out head and of an att matrix,
// row-major and transposed.
struct GqaLayout {
  int NH, NKV, G, hs;
  int64_t ld, Cq, koff, voff;
  HeadStrides q, kv, o;
  int64_t att_rows[4], att_cols[4];
  GqaLayout(int T, int NH_, int NKV_, int hs_, int64_t att_head, int64_t att_row)
      : NH(NH_), NKV(NKV_), G(NH_ / NKV_), hs(hs_) {
    KILN_CHECK(NKV > 0 && NH % NKV == 0);
    Cq = static_cast<int64_t>(NH) * hs;
    ld = Cq + 2 * static_cast<int64_t>(NKV) * hs;
    koff = Cq;
    voff = Cq + static_cast<int64_t>(NKV) * hs;
    q = head_strides(T, ld, G * hs);
    kv = head_strides(T, ld, hs);
    o = head_strides(T, Cq, G * hs);
    const int64_t r[4] = {NH * att_head, G * att_head, att_row, 1};
    const int64_t c[4] = {NH * att_head, G * att_head, 1, att_row};
    std::copy(r, r + 4, att_rows);
    std::copy(c, c + 4, att_cols);
  }
};

StridedMatmul group_product(int B, const GqaLayout& L, int64_t M, int64_t N, int64_t K,
                            const int64_t* a, const int64_t* b, const int64_t* c, bool accumulate) {
  StridedMatmul s = head_product(B, L.NKV, M, N, K, a, b, c);
  s.accumulate = accumulate;
  return s;
}

}  // namespace

// Per (b, h): S = Q K^T as batched products over the heads, read in place from qkv; the
// causal softmax of each row of S; out = P V written straight into the heads' columns. The
// products run over the full T x T (the zeros above the diagonal included): twice the useful
// flops, at the matmul rate instead of that of scalar loops.
void attention_forward_gqa(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                           int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  const GqaLayout L(T, NH, NKV, hs, TT, T);
  for (int j = 0; j < L.G; j++)
    matmul_strided(group_product(B, L, T, T, hs, L.q.rows, L.kv.cols, L.att_rows, false),
                   qkv + j * hs, qkv + L.koff, att + j * TT);
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
  for (int j = 0; j < L.G; j++)
    matmul_strided(group_product(B, L, T, hs, T, L.att_rows, L.kv.rows, L.o.rows, false),
                   att + j * TT, qkv + L.voff, out + j * hs);
}

// dP = dout V^T; dS = P * (dP - rowsum(P * dP)) * scale; dq = dS K, dk = dS^T q, dv = P^T dout,
// each a batched product written straight into dqkv's columns.
void attention_backward_gqa(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int NKV, int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int64_t TT = static_cast<int64_t>(T) * T;
  const GqaLayout L(T, NH, NKV, hs, TT, T);
  for (int j = 0; j < L.G; j++)
    matmul_strided(group_product(B, L, T, T, hs, L.o.rows, L.kv.cols, L.att_rows, false),
                   dout + j * hs, qkv + L.voff, datt + j * TT);
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
  for (int j = 0; j < L.G; j++)  // dq = dS K
    matmul_strided(group_product(B, L, T, hs, T, L.att_rows, L.kv.rows, L.q.rows, false),
                   datt + j * TT, qkv + L.koff, dqkv + j * hs);
  for (int j = 0; j < L.G; j++)  // dk = sum over the group of dS^T q
    matmul_strided(group_product(B, L, T, hs, T, L.att_cols, L.q.rows, L.kv.rows, j > 0),
                   datt + j * TT, qkv + j * hs, dqkv + L.koff);
  for (int j = 0; j < L.G; j++)  // dv = sum over the group of P^T dout
    matmul_strided(group_product(B, L, T, hs, T, L.att_cols, L.o.rows, L.kv.rows, j > 0),
                   att + j * TT, dout + j * hs, dqkv + L.voff);
}

// ---- flash attention: blocks of queries against blocks of keys, an online softmax ----------

namespace {
constexpr int kFlashBlock = 128;

int flash_block(int T) {
  return std::min(T, kFlashBlock);
}

// The (b, h) and time of row r of a block of nq query rows starting at q0.
struct BlockRow {
  int64_t bh;
  int b, h, t, i;
};
inline BlockRow block_row(int64_t r, int nq, int q0, int NH) {
  BlockRow x;
  x.bh = r / nq;
  x.i = static_cast<int>(r % nq);
  x.b = static_cast<int>(x.bh / NH);
  x.h = static_cast<int>(x.bh % NH);
  x.t = q0 + x.i;
  return x;
}

// Keys k0 .. k0+nk-1 that query t may see (those at or before it): how many, from k0.
inline int keys_seen(int t, int k0, int nk) {
  return std::max(0, std::min(nk, t - k0 + 1));
}

inline float sum_lanes(const float* x, int n) {
  float lane[kLanes] = {0};
  int i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; j++) lane[j] += x[i + j];
  float s = 0;
  for (int j = 0; j < kLanes; j++) s += lane[j];
  for (; i < n; i++) s += x[i];
  return s;
}
}  // namespace

int64_t attention_flash_scratch_floats(int B, int T, int NH) {
  const int64_t kb = flash_block(T);
  return static_cast<int64_t>(B) * NH * (2 * kb * kb + T);
}

// For each block of query rows, the key blocks at or before it: S = Q K^T for all heads as one
// batched product; each row's running maximum m (kept in lse) and sum l are updated and its
// output rescaled by exp(m_old - m_new); then out += P V as a batched product. Blocks above the
// diagonal are skipped, so unlike the standard kernel no product is spent on masked scores.
void attention_forward_flash_gqa(float* out, float* lse, float* scratch, const float* qkv, int B,
                                 int T, int NH, int NKV, int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int kb = flash_block(T);
  const int64_t BH = static_cast<int64_t>(B) * NH, kk = static_cast<int64_t>(kb) * kb;
  const GqaLayout L(T, NH, NKV, hs, kk, kb);
  const int64_t ld = L.ld, Cq = L.Cq;
  float* S = scratch;          // (B,NH,kb,kb)
  float* l = S + 2 * BH * kk;  // (B,NH,T)
  for (int q0 = 0; q0 < T; q0 += kb) {
    const int nq = std::min(kb, T - q0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < BH * nq; r++) {
      const BlockRow w = block_row(r, nq, q0, NH);
      lse[w.bh * T + w.t] = -INFINITY;
      l[w.bh * T + w.t] = 0;
      float* orow = out + (static_cast<int64_t>(w.b) * T + w.t) * Cq + w.h * hs;
      for (int d = 0; d < hs; d++) orow[d] = 0;
    }
    for (int k0 = 0; k0 < q0 + nq; k0 += kb) {
      const int nk = std::min(kb, T - k0);
      for (int j = 0; j < L.G; j++)
        matmul_strided(group_product(B, L, nq, nk, hs, L.q.rows, L.kv.cols, L.att_rows, false),
                       qkv + q0 * ld + j * hs, qkv + L.koff + k0 * ld, S + j * kk);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < BH * nq; r++) {
        const BlockRow w = block_row(r, nq, q0, NH);
        float* s = S + w.bh * kk + static_cast<int64_t>(w.i) * kb;
        const int n = keys_seen(w.t, k0, nk);
        for (int j = n; j < nk; j++) s[j] = 0;
        if (n == 0) continue;
        for (int j = 0; j < n; j++) s[j] *= scale;
        float& m = lse[w.bh * T + w.t];
        const float mx = std::max(m, max_lanes(s, n));
        const float c = m == -INFINITY ? 0.0f : exp_vec(m - mx);
        for (int j = 0; j < n; j++) s[j] = exp_vec(s[j] - mx);
        l[w.bh * T + w.t] = l[w.bh * T + w.t] * c + sum_lanes(s, n);
        m = mx;
        float* orow = out + (static_cast<int64_t>(w.b) * T + w.t) * Cq + w.h * hs;
        for (int d = 0; d < hs; d++) orow[d] *= c;
      }
      for (int j = 0; j < L.G; j++)
        matmul_strided(group_product(B, L, nq, hs, nk, L.att_rows, L.kv.rows, L.o.rows, true),
                       S + j * kk, qkv + L.voff + k0 * ld, out + q0 * Cq + j * hs);
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < BH * nq; r++) {
      const BlockRow w = block_row(r, nq, q0, NH);
      const float sum = l[w.bh * T + w.t], inv = 1.0f / sum;
      float* orow = out + (static_cast<int64_t>(w.b) * T + w.t) * Cq + w.h * hs;
      for (int d = 0; d < hs; d++) orow[d] *= inv;
      lse[w.bh * T + w.t] += std::log(sum);
    }
  }
}

// FlashAttention-2's order: for each key block, the query blocks at or after it. P is made
// again from the scores and lse; dv += P^T dout, dP = dout V^T, dS = P (dP - D) scale with
// D = rowsum(dout * out), dq += dS K, dk += dS^T q, every product batched over the heads and
// accumulated in place in dqkv.
void attention_backward_flash_gqa(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                  const float* out, const float* lse, int B, int T, int NH, int NKV,
                                  int hs) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int kb = flash_block(T);
  const int64_t BH = static_cast<int64_t>(B) * NH, kk = static_cast<int64_t>(kb) * kb;
  const GqaLayout L(T, NH, NKV, hs, kk, kb);
  const int64_t ld = L.ld, Cq = L.Cq;
  float* S = scratch;       // (B,NH,kb,kb): P
  float* dP = S + BH * kk;  // (B,NH,kb,kb): dP, then dS
  float* D = dP + BH * kk;  // (B,NH,T)
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < BH * T; r++) {
    const int64_t bh = r / T;
    const int t = static_cast<int>(r % T), b = static_cast<int>(bh / NH),
              h = static_cast<int>(bh % NH);
    const int64_t at = (static_cast<int64_t>(b) * T + t) * Cq + h * hs;
    D[r] = dot_vec(dout + at, out + at, hs);
    float* row = dqkv + (static_cast<int64_t>(b) * T + t) * ld;
    for (int d = 0; d < hs; d++) row[h * hs + d] = 0;
    if (h < NKV)
      for (int d = 0; d < hs; d++) row[L.koff + h * hs + d] = row[L.voff + h * hs + d] = 0;
  }
  for (int k0 = 0; k0 < T; k0 += kb) {
    const int nk = std::min(kb, T - k0);
    for (int q0 = k0; q0 < T; q0 += kb) {
      const int nq = std::min(kb, T - q0);
      for (int j = 0; j < L.G; j++)
        matmul_strided(group_product(B, L, nq, nk, hs, L.q.rows, L.kv.cols, L.att_rows, false),
                       qkv + q0 * ld + j * hs, qkv + L.koff + k0 * ld, S + j * kk);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < BH * nq; r++) {
        const BlockRow w = block_row(r, nq, q0, NH);
        float* s = S + w.bh * kk + static_cast<int64_t>(w.i) * kb;
        const int n = keys_seen(w.t, k0, nk);
        const float Lse = lse[w.bh * T + w.t];
        for (int j = 0; j < n; j++) s[j] = exp_vec(s[j] * scale - Lse);
        for (int j = n; j < nk; j++) s[j] = 0;
      }
      for (int j = 0; j < L.G; j++)  // dv += P^T dout
        matmul_strided(group_product(B, L, nk, hs, nq, L.att_cols, L.o.rows, L.kv.rows, true),
                       S + j * kk, dout + q0 * Cq + j * hs, dqkv + L.voff + k0 * ld);
      for (int j = 0; j < L.G; j++)  // dP = dout V^T
        matmul_strided(group_product(B, L, nq, nk, hs, L.o.rows, L.kv.cols, L.att_rows, false),
                       dout + q0 * Cq + j * hs, qkv + L.voff + k0 * ld, dP + j * kk);
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < BH * nq; r++) {
        const BlockRow w = block_row(r, nq, q0, NH);
        const float* p = S + w.bh * kk + static_cast<int64_t>(w.i) * kb;
        float* g = dP + w.bh * kk + static_cast<int64_t>(w.i) * kb;
        const float Dt = D[w.bh * T + w.t];
        for (int j = 0; j < nk; j++) g[j] = p[j] * (g[j] - Dt) * scale;
      }
      for (int j = 0; j < L.G; j++)  // dq += dS K
        matmul_strided(group_product(B, L, nq, hs, nk, L.att_rows, L.kv.rows, L.q.rows, true),
                       dP + j * kk, qkv + L.koff + k0 * ld, dqkv + q0 * ld + j * hs);
      for (int j = 0; j < L.G; j++)  // dk += dS^T q
        matmul_strided(group_product(B, L, nk, hs, nq, L.att_cols, L.q.rows, L.kv.rows, true),
                       dP + j * kk, qkv + q0 * ld + j * hs, dqkv + L.koff + k0 * ld);
    }
  }
}

void attention_decode_gqa(float* out, float* scores, const float* q, const float* k_cache,
                          const float* v_cache, int n, int NH, int NKV, int hs) {
  KILN_CHECK(NKV > 0 && NH % NKV == 0);
  const int G = NH / NKV;
  const int64_t ldkv = static_cast<int64_t>(NKV) * hs;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int h = 0; h < NH; h++) {
    const float* qh = q + h * hs;
    const int64_t kvh = static_cast<int64_t>(h / G) * hs;
    float maxv = -INFINITY;
    for (int t = 0; t < n; t++) {
      const float* k = k_cache + t * ldkv + kvh;
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
      const float* v = v_cache + t * ldkv + kvh;
      float w = scores[t] / sum;
      for (int i = 0; i < hs; i++) o[i] += w * v[i];
    }
  }
}

// ---- GPT-2's forms: NKV == NH, C = NH * hs ----------------------------------------------------

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attention_forward_gqa(out, att, qkv, B, T, NH, NH, C / NH);
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  attention_backward_gqa(dqkv, datt, dout, qkv, att, B, T, NH, NH, C / NH);
}

void attention_forward_flash(float* out, float* lse, float* scratch, const float* qkv, int B, int T,
                             int C, int NH) {
  attention_forward_flash_gqa(out, lse, scratch, qkv, B, T, NH, NH, C / NH);
}

void attention_backward_flash(float* dqkv, float* scratch, const float* dout, const float* qkv,
                              const float* out, const float* lse, int B, int T, int C, int NH) {
  attention_backward_flash_gqa(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NH, C / NH);
}

void attention_decode(float* out, float* scores, const float* q, const float* k_cache,
                      const float* v_cache, int n, int C, int NH) {
  attention_decode_gqa(out, scores, q, k_cache, v_cache, n, NH, NH, C / NH);
}

}  // namespace kiln
