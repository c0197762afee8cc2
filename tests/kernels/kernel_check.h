// What the kernel tests share: random inputs, float64 finite differences, closeness to a float64
// reference relative to its largest magnitude, and same-bits checks across thread counts.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace kiln::kernel_test {

using Vec = std::vector<float>;
using Vec64 = std::vector<double>;
using Fn = std::function<double(const Vec64&)>;

// max |kiln - reference| / max |reference|
inline constexpr double kFwdTol = 1e-5;
// max |kiln - finite difference| / max |finite difference|
inline constexpr double kGradTol = 1e-4;
// central-difference step, in float64
inline constexpr double kFdStep = 1e-6;
// pre-fill of buffers a kernel must overwrite
inline constexpr float kGarbage = 123.0f;

inline Vec RandomVec(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline Vec64 Widen(const Vec& v) {
  return Vec64(v.begin(), v.end());
}

inline double MaxAbs(const Vec64& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// sum(out * R): the scalar whose gradient the backward kernels compute with dout = R.
inline double Dot(const Vec64& out, const Vec& r) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += out[i] * static_cast<double>(r[i]);
  return s;
}

// Central finite differences of f at x, one coordinate at a time.
inline Vec64 FiniteDiff(const Fn& f, Vec64 x) {
  Vec64 g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double xi = x[i];
    x[i] = xi + kFdStep;
    const double fp = f(x);
    x[i] = xi - kFdStep;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * kFdStep);
  }
  return g;
}

// |(got[i] - base[i]) - want[i]| <= rel_tol * max|want| for every i (base may be empty: zero).
// Reports the worst element.
inline ::testing::AssertionResult Near(const Vec& got, const Vec& base, const Vec64& want,
                                       double rel_tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  const double scale = MaxAbs(want) > 0 ? MaxAbs(want) : 1.0;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double g = static_cast<double>(got[i]) - (base.empty() ? 0.0 : base[i]);
    double err = std::fabs(g - want[i]);
    if (std::isnan(err)) err = INFINITY;
    if (err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (worst <= rel_tol * scale) return ::testing::AssertionSuccess();
  const double g = static_cast<double>(got[worst_i]) - (base.empty() ? 0.0 : base[worst_i]);
  return ::testing::AssertionFailure()
         << "worst element " << worst_i << ": got " << g << ", expected " << want[worst_i]
         << " (error " << worst << " > " << rel_tol << " * max magnitude " << scale << ")";
}

inline ::testing::AssertionResult Near(const Vec& got, const Vec64& want, double rel_tol) {
  return Near(got, Vec{}, want, rel_tol);
}

inline bool SameBits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Sets the OpenMP thread count for one scope and restores the previous one.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// run(threads) gives a kernel's outputs on that many threads: two runs on 2 threads and one on 1
// must give the same bits.
inline void ExpectSameBitsOnOneAndTwoThreads(const std::function<Vec(int)>& run) {
  const Vec a = run(2), b = run(2), c = run(1);
  EXPECT_TRUE(SameBits(a, b)) << "two runs with 2 threads differ";
  EXPECT_TRUE(SameBits(a, c)) << "1 thread and 2 threads differ";
}

}  // namespace kiln::kernel_test
