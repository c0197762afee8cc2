// Elementary functions written so that the compiler vectorises loops that call them (the
// libm calls do not vectorise without -ffast-math). Accurate to a few ulp; kiln's fp32 path is
// checked against float64 references through them.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace kiln {

// exp(x): range reduction x = n ln2 + r, |r| <= ln2/2, and Cephes' degree-6 polynomial.
// Inputs are clamped to [-87.3, 88.7], inside float's normal range.
inline float exp_vec(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.7f ? 88.7f : x;
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// tanh(x) = 1 - 2 / (exp(2x) + 1); absolute error about 1e-7, which is what GELU's 1 + tanh
// needs.
inline float tanh_vec(float x) {
  return 1.0f - 2.0f / (exp_vec(2.0f * x) + 1.0f);
}

// Dot product in 16 lanes summed in a fixed order: vectorises, and gives the same bits on every
// run (unlike a reassociating -ffast-math reduction).
inline float dot_vec(const float* a, const float* b, int n) {
  float acc[16] = {0};
  int i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; j++) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (int j = 0; j < 16; j++) s += acc[j];
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

}  // namespace kiln
