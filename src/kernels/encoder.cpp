#include <algorithm>

#include "kernels/kernels.h"

namespace kiln {

void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                     int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* o = out + (static_cast<int64_t>(b) * T + t) * C;
      const float* e = wte + static_cast<int64_t>(inp[b * T + t]) * C;
      if (!wpe) {  // no learned positions (rotary models)
        for (int c = 0; c < C; c++) o[c] = e[c];
        continue;
      }
      const float* p = wpe + static_cast<int64_t>(t) * C;
      for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
  }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                      int C) {
  // Each thread owns a range of channels and visits positions in order: no races, fixed order.
  constexpr int kBlock = 64;
  int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<int64_t>(b) * T + t) * C;
        float* e = dwte + static_cast<int64_t>(inp[b * T + t]) * C;
        if (!dwpe) {
          for (int c = c0; c < c1; c++) e[c] += d[c];
          continue;
        }
        float* p = dwpe + static_cast<int64_t>(t) * C;
        for (int c = c0; c < c1; c++) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
    }
  }
}

}  // namespace kiln
