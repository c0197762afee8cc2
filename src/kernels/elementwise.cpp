#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"

namespace kiln {

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void copy(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = x[i];
}

void scale_inplace(float* y, float s, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] *= s;
}

void to_bf16(bf16* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = float_to_bf16(x[i]);
}

void round_to_bf16(float* x, bf16* y, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    y[i] = float_to_bf16(x[i]);
    x[i] = bf16_to_float(y[i]);
  }
}

void from_bf16(float* y, const bf16* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) y[i] = bf16_to_float(x[i]);
}

double sum_squares(const float* x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  int64_t nchunks = (n + kChunk - 1) / kChunk;
  static thread_local std::vector<double> partial;  // grows once; no allocation per step
  partial.assign(nchunks, 0.0);
  double* part = partial.data();  // this thread's buffer, shared with the team below
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nchunks; c++) {
    int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
    // 16 lanes in double, combined in a fixed order: vectorises (a single running sum is a
    // chain of dependent adds) and gives the same bits for any vector width.
    double lane[16] = {0};
    int64_t i = i0;
    for (; i + 16 <= i1; i += 16)
      for (int j = 0; j < 16; j++) lane[j] += static_cast<double>(x[i + j]) * x[i + j];
    double s = 0;
    for (int j = 0; j < 16; j++) s += lane[j];
    for (; i < i1; i++) s += static_cast<double>(x[i]) * x[i];
    part[c] = s;
  }
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace kiln
