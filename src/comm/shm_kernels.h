// The shared-memory engine's reduction kernels (comm/shm_communicator.cpp): ordered sums of the
// ranks' buffers in one pass, and the typed pieces the ring and halving-doubling algorithms pass
// partial sums with. Each sums in a fixed order, so results are the same bits on every run.
// Header-only: the engine's loops inline them as before.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "comm/communicator.h"

namespace kiln::detail::shm {

// ---- reduction kernels: dst = src[0] + src[1] + ... in that order, accumulated in T's sum type.

// One pass: kLanes elements at a time are summed in registers over the P sources and stored
// once (a block summed in an L1 buffer and then copied out ran 1.5x slower on large buffers).
constexpr int kLanes = 64;

inline void sum_f32(float* dst, float* dst2, const float* const* src, int P, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
    float acc[kLanes];
    const float* s0 = src[0] + i0;
    for (int j = 0; j < kLanes; j++) acc[j] = s0[j];
    for (int q = 1; q < P; q++) {
      const float* s = src[q] + i0;
      for (int j = 0; j < kLanes; j++) acc[j] += s[j];
    }
    for (int j = 0; j < kLanes; j++) dst[i0 + j] = acc[j];
    if (dst2)
      for (int j = 0; j < kLanes; j++) dst2[i0 + j] = acc[j];
  }
  for (; i0 < n; i0++) {
    float a = src[0][i0];
    for (int q = 1; q < P; q++) a += src[q][i0];
    dst[i0] = a;
    if (dst2) dst2[i0] = a;
  }
}

inline void sum_f64(double* dst, double* dst2, const double* const* src, int P, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double a = src[0][i];
    for (int q = 1; q < P; q++) a += src[q][i];
    dst[i] = a;
    if (dst2) dst2[i] = a;
  }
}

inline float widen(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Round to nearest even, NaN kept quiet: the same bits as float_to_bf16.
inline uint16_t narrow(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t nan = (b >> 16) | 0x40;
  const uint32_t rounded = (b + 0x7fff + ((b >> 16) & 1)) >> 16;
  return static_cast<uint16_t>((b & 0x7fffffff) > 0x7f800000 ? nan : rounded);
}

// bf16 inputs summed in fp32, rounded once at the end.
inline void sum_bf16(uint16_t* dst, uint16_t* dst2, const uint16_t* const* src, int P, int64_t n) {
  int64_t i0 = 0;
  for (; i0 + kLanes <= n; i0 += kLanes) {
    float acc[kLanes];
    const uint16_t* s0 = src[0] + i0;
    for (int j = 0; j < kLanes; j++) acc[j] = widen(s0[j]);
    for (int q = 1; q < P; q++) {
      const uint16_t* s = src[q] + i0;
      for (int j = 0; j < kLanes; j++) acc[j] += widen(s[j]);
    }
    for (int j = 0; j < kLanes; j++) dst[i0 + j] = narrow(acc[j]);
    if (dst2) std::memcpy(dst2 + i0, dst + i0, kLanes * sizeof(uint16_t));
  }
  for (; i0 < n; i0++) {
    float a = widen(src[0][i0]);
    for (int q = 1; q < P; q++) a += widen(src[q][i0]);
    dst[i0] = narrow(a);
    if (dst2) dst2[i0] = dst[i0];
  }
}

// dst (and dst2 if not null) = the ordered sum of the P sources, n elements of type t.
inline void reduce(DType t, void* dst, void* dst2, const void* const* src, int P, int64_t n) {
  if (n <= 0) return;
  switch (t) {
    case DType::F32:
      return sum_f32(static_cast<float*>(dst), static_cast<float*>(dst2),
                     reinterpret_cast<const float* const*>(src), P, n);
    case DType::BF16:
      return sum_bf16(static_cast<uint16_t*>(dst), static_cast<uint16_t*>(dst2),
                      reinterpret_cast<const uint16_t* const*>(src), P, n);
    case DType::F64:
      return sum_f64(static_cast<double*>(dst), static_cast<double*>(dst2),
                     reinterpret_cast<const double* const*>(src), P, n);
  }
}

// ---- typed kernels for the ring and halving-doubling algorithms, which pass partial sums
// between ranks: partials are kept in the accumulation type A (fp32 for bf16), so that a bf16
// result is rounded once, at the end, whatever the algorithm.

template <class T>
struct Num;
template <>
struct Num<float> {
  using A = float;
  static A wide(float x) { return x; }
  static float round(A a) { return a; }
};
template <>
struct Num<uint16_t> {  // bf16
  using A = float;
  static A wide(uint16_t x) { return widen(x); }
  static uint16_t round(A a) { return narrow(a); }
};
template <>
struct Num<double> {
  using A = double;
  static A wide(double x) { return x; }
  static double round(A a) { return a; }
};

template <class T>
using acc_t = typename Num<T>::A;

// Calls f with a null pointer of the element type of t (for template dispatch).
template <class F>
void with_type(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f(static_cast<float*>(nullptr));
    case DType::BF16:
      return f(static_cast<uint16_t*>(nullptr));
    case DType::F64:
      return f(static_cast<double*>(nullptr));
  }
}

// dst = partial + mine (partial first), or dst = mine widened when there is no partial.
template <class T>
void accumulate(acc_t<T>* __restrict dst, const acc_t<T>* __restrict partial,
                const T* __restrict mine, int64_t n) {
  if (partial)
    for (int64_t i = 0; i < n; i++) dst[i] = partial[i] + Num<T>::wide(mine[i]);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = Num<T>::wide(mine[i]);
}

// dst (and dst2 if not null) = round(partial + mine): the last addition of a ring.
template <class T>
void finish(T* __restrict dst, T* __restrict dst2, const acc_t<T>* __restrict partial,
            const T* __restrict mine, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = Num<T>::round(partial[i] + Num<T>::wide(mine[i]));
  if (dst2) std::memcpy(dst2, dst, n * sizeof(T));
}

// dst = lo + hi (dst may be lo or hi).
template <class A>
void combine(A* dst, const A* lo, const A* hi, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = lo[i] + hi[i];
}

template <class T>
void round_copy(T* __restrict dst, const acc_t<T>* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = Num<T>::round(src[i]);
}

// Elements [k*E, (k+1)*E) of a slice of `count` elements: how many exist.
inline int64_t piece(int64_t count, int64_t k, int64_t E) {
  return std::clamp<int64_t>(count - k * E, 0, E);
}

inline char* at(void* p, int64_t elems, int64_t es) {
  return static_cast<char*>(p) + elems * es;
}

}  // namespace kiln::detail::shm
