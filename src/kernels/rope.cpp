#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kernels/llama_kernels.h"

namespace kiln {

namespace {

// One head: the pairs (x[i], x[i+half]) turned by the angle whose cos and sin are c[i], s[i];
// with `inverse`, turned back (the transpose). The halves are separate restrict pointers, so
// the loop vectorises.
inline void rotate(float* x, const float* c, const float* s, int half, bool inverse) {
  float* __restrict a = x;
  float* __restrict b = x + half;
  if (!inverse) {
    for (int i = 0; i < half; i++) {
      const float x1 = a[i], x2 = b[i];
      a[i] = x1 * c[i] - x2 * s[i];
      b[i] = x2 * c[i] + x1 * s[i];
    }
  } else {
    for (int i = 0; i < half; i++) {
      const float y1 = a[i], y2 = b[i];
      a[i] = y1 * c[i] + y2 * s[i];
      b[i] = y2 * c[i] - y1 * s[i];
    }
  }
}

// The q heads and the k heads of one row (they are contiguous: NH + NKV heads from the start).
inline void rotate_row(float* row, const float* c, const float* s, int heads, int hs,
                       bool inverse) {
  const int half = hs / 2;
  for (int h = 0; h < heads; h++) rotate(row + static_cast<int64_t>(h) * hs, c, s, half, inverse);
}

void rope_rows(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
               int hs, bool inverse) {
  KILN_CHECK(hs % 2 == 0 && NKV > 0 && NH % NKV == 0);
  const int half = hs / 2;
  const int64_t ld = static_cast<int64_t>(NH + 2 * NKV) * hs, M = static_cast<int64_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; m++) {
    const int64_t t = m % T;
    rotate_row(qkv + m * ld, cos + t * half, sin + t * half, NH + NKV, hs, inverse);
  }
}

}  // namespace

// Hugging Face's _compute_default_rope_parameters and _compute_llama3_parameters, step by step
// in float32 as torch runs them (a scalar meeting a float tensor is rounded to float; x / tensor
// is x * reciprocal(tensor)).
void rope_inv_freq(float* inv_freq, int hs, float theta, const RopeScaling* scaling) {
  KILN_CHECK(hs % 2 == 0);
  const int half = hs / 2;
  for (int j = 0; j < half; j++)
    inv_freq[j] = 1.0f / std::pow(theta, static_cast<float>(2 * j) / static_cast<float>(hs));
  if (!scaling) return;
  const double old_len = scaling->original_max_position_embeddings;
  const float low_wavelen = static_cast<float>(old_len / scaling->low_freq_factor);
  const float high_wavelen = static_cast<float>(old_len / scaling->high_freq_factor);
  const float factor = scaling->factor, low = scaling->low_freq_factor;
  const float span =
      static_cast<float>(static_cast<double>(scaling->high_freq_factor) - scaling->low_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi);
  for (int j = 0; j < half; j++) {
    const float f = inv_freq[j];
    const float wavelen = (1.0f / f) * two_pi;
    if (wavelen > low_wavelen) {
      inv_freq[j] = f / factor;              // long wavelengths: stretched by the factor
    } else if (!(wavelen < high_wavelen)) {  // between: interpolated
      const float smooth = ((1.0f / wavelen) * static_cast<float>(old_len) - low) / span;
      inv_freq[j] = (1.0f - smooth) * f / factor + smooth * f;
    }
  }
}

void rope_table(float* cos, float* sin, int T, int hs, float theta, const RopeScaling* scaling) {
  const int half = hs / 2;
  std::vector<float> inv(half);
  rope_inv_freq(inv.data(), hs, theta, scaling);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < T; t++) {
    for (int j = 0; j < half; j++) {
      const double angle = static_cast<float>(t) * inv[j];  // rounded to float first
      cos[static_cast<int64_t>(t) * half + j] = static_cast<float>(std::cos(angle));
      sin[static_cast<int64_t>(t) * half + j] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope_forward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int hs) {
  rope_rows(qkv, cos, sin, B, T, NH, NKV, hs, false);
}

// y = R x with R a rotation of each pair, so dx = R^T dy: the same pairs turned back.
void rope_backward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int hs) {
  rope_rows(dqkv, cos, sin, B, T, NH, NKV, hs, true);
}

void rope_forward_row(float* qkv, const float* cos, const float* sin, int pos, int NH, int NKV,
                      int hs) {
  KILN_CHECK(hs % 2 == 0 && NKV > 0 && NH % NKV == 0);
  const int64_t half = hs / 2;
  rotate_row(qkv, cos + pos * half, sin + pos * half, NH + NKV, hs, false);
}

}  // namespace kiln
