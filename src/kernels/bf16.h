// bfloat16, stored as its 16 bits: the upper half of an IEEE float32 (8 exponent bits, 7
// mantissa bits). Conversions round to nearest, ties to even, as oneDNN and PyTorch do.
#pragma once
#include <cstdint>
#include <cstring>

namespace kiln {

using bf16 = uint16_t;

inline bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16>(u >> 16);
}

inline float bf16_to_float(bf16 h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace kiln
