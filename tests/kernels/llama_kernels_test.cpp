// RMSNorm, RoPE and SwiGLU against float64 references written here with plain loops, and their
// backwards against central finite differences of L = sum(out * R) (kernel_check.h).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_check.h"
#include "kernels/llama_kernels.h"

namespace kiln {
namespace {

using namespace kernel_test;

std::vector<bf16> Rounded(const Vec& x) {
  std::vector<bf16> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = float_to_bf16(x[i]);
  return r;
}

// ---- RMSNorm ----------------------------------------------------------------------------------

struct RmsnormRef {
  Vec64 out, rstd;
};

RmsnormRef RefRmsnorm(const Vec64& x, const Vec64& w, int M, int C, double eps) {
  RmsnormRef r{Vec64(x.size()), Vec64(M)};
  for (int m = 0; m < M; m++) {
    double ss = 0;
    for (int c = 0; c < C; c++) ss += x[m * C + c] * x[m * C + c];
    const double rstd = 1.0 / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; c++) r.out[m * C + c] = x[m * C + c] * rstd * w[c];
    r.rstd[m] = rstd;
  }
  return r;
}

void CheckRmsnorm(int M, int C, float eps) {
  SCOPED_TRACE("M=" + std::to_string(M) + " C=" + std::to_string(C));
  std::mt19937 rng(101);
  const Vec x = RandomVec(rng, M * C, -2, 2), w = RandomVec(rng, C, 0.5, 1.5);
  const Vec r = RandomVec(rng, M * C, -1, 1);
  Vec out(M * C, kGarbage), rstd(M, kGarbage);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), M, C, eps);
  const Vec64 x64 = Widen(x), w64 = Widen(w);
  const RmsnormRef ref = RefRmsnorm(x64, w64, M, C, eps);
  EXPECT_TRUE(Near(out, ref.out, kFwdTol)) << "out";
  EXPECT_TRUE(Near(rstd, ref.rstd, kFwdTol)) << "rstd";

  // dinp and dw accumulate onto what they hold.
  const Vec dinp0 = RandomVec(rng, M * C, -1, 1), dw0 = RandomVec(rng, C, -1, 1);
  Vec dinp = dinp0, dw = dw0;
  rmsnorm_backward(dinp.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), M, C);
  const Vec64 gx =
      FiniteDiff([&](const Vec64& v) { return Dot(RefRmsnorm(v, w64, M, C, eps).out, r); }, x64);
  const Vec64 gw =
      FiniteDiff([&](const Vec64& v) { return Dot(RefRmsnorm(x64, v, M, C, eps).out, r); }, w64);
  EXPECT_TRUE(Near(dinp, dinp0, gx, kGradTol)) << "dinp";
  EXPECT_TRUE(Near(dw, dw0, gw, kGradTol)) << "dw";

  // accumulate = false writes dw; the bf16 copy is the rounded accumulated dinp.
  Vec dinp2 = dinp0, dw2(C, kGarbage);
  std::vector<bf16> dinp_bf(M * C);
  rmsnorm_backward(dinp2.data(), dw2.data(), r.data(), x.data(), w.data(), rstd.data(), M, C,
                   dinp_bf.data(), false);
  EXPECT_TRUE(Near(dw2, gw, kGradTol)) << "dw written";
  EXPECT_EQ(dinp2, dinp);
  EXPECT_EQ(dinp_bf, Rounded(dinp));
}

TEST(KernelRmsnorm, ForwardMatchesFloat64AndBackwardMatchesFiniteDifferences) {
  CheckRmsnorm(7, 53, 1e-5f);   // odd C, under one 64-channel block
  CheckRmsnorm(3, 131, 1e-6f);  // several 16-lane chunks and weight blocks, with tails
  CheckRmsnorm(4, 1, 1e-5f);
  CheckRmsnorm(2, 8, 0.5f);  // an eps large enough to matter in the gradient
}

TEST(KernelRmsnorm, FusedResidualEqualsAddThenRmsnormAndItsBf16IsTheRoundedOutput) {
  const int M = 9, C = 77;
  const float eps = 1e-5f;
  std::mt19937 rng(102);
  const Vec x = RandomVec(rng, M * C, -2, 2), add = RandomVec(rng, M * C, -1, 1);
  const Vec w = RandomVec(rng, C, 0.5, 1.5);
  Vec sum(M * C), want(M * C), rstd0(M);
  for (int i = 0; i < M * C; i++) sum[i] = x[i] + add[i];
  rmsnorm_forward(want.data(), rstd0.data(), sum.data(), w.data(), M, C, eps);
  Vec res(M * C, kGarbage), out(M * C, kGarbage), rstd(M, kGarbage);
  std::vector<bf16> out_bf(M * C);
  rmsnorm_forward_fused(res.data(), out.data(), out_bf.data(), rstd.data(), x.data(), add.data(),
                        w.data(), M, C, eps);
  EXPECT_EQ(res, sum);
  EXPECT_EQ(out, want);
  EXPECT_EQ(rstd, rstd0);
  EXPECT_EQ(out_bf, Rounded(want));
  std::vector<bf16> only_bf(M * C);  // bf16 only, no residual
  rmsnorm_forward_fused(nullptr, nullptr, only_bf.data(), rstd.data(), sum.data(), nullptr,
                        w.data(), M, C, eps);
  EXPECT_EQ(only_bf, Rounded(want));
}

TEST(KernelRmsnorm, SameBitsAcrossRunsAndThreadCounts) {
  const int M = 50, C = 300;
  std::mt19937 rng(103);
  const Vec x = RandomVec(rng, M * C, -2, 2), w = RandomVec(rng, C, 0.5, 1.5);
  const Vec dout = RandomVec(rng, M * C, -1, 1), dw0 = RandomVec(rng, C, -1, 1);
  ExpectSameBitsOnOneAndTwoThreads([&](int threads) {
    ThreadCount tc(threads);
    Vec out(M * C), rstd(M), dinp(M * C, 0.0f), dw = dw0;
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), M, C, 1e-5f);
    rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), M, C);
    out.insert(out.end(), rstd.begin(), rstd.end());
    out.insert(out.end(), dinp.begin(), dinp.end());
    out.insert(out.end(), dw.begin(), dw.end());
    return out;
  });
}

// ---- RoPE -------------------------------------------------------------------------------------

// Hugging Face's inverse frequencies in float64: theta^(-2j/hs), and with Llama 3's scaling
// _compute_llama3_parameters' three cases written out.
Vec64 RefInvFreq(int hs, double theta, const RopeScaling* sc) {
  Vec64 f(hs / 2);
  for (int j = 0; j < hs / 2; j++) f[j] = 1.0 / std::pow(theta, 2.0 * j / hs);
  if (!sc) return f;
  const double old_len = sc->original_max_position_embeddings;
  const double low_wavelen = old_len / sc->low_freq_factor;
  const double high_wavelen = old_len / sc->high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2 * std::numbers::pi / x;
    if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
    if (wavelen > low_wavelen) {
      x /= sc->factor;  // low frequencies: divided by the factor
      continue;
    }
    const double smooth =
        (old_len / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    x = (1 - smooth) * x / sc->factor + smooth * x;
  }
  return f;
}

// qkv (B,T,(NH+2*NKV)*hs) with the q and k heads turned by position, rotate_half's pairing.
Vec64 RefRope(const Vec64& qkv, int B, int T, int NH, int NKV, int hs, double theta,
              const RopeScaling* sc) {
  const Vec64 f = RefInvFreq(hs, theta, sc);
  const int ld = (NH + 2 * NKV) * hs, half = hs / 2;
  Vec64 y = qkv;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH + NKV; h++) {
        double* x = &y[(static_cast<size_t>(b) * T + t) * ld + h * hs];
        for (int i = 0; i < half; i++) {
          const double c = std::cos(t * f[i]), s = std::sin(t * f[i]);
          const double x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * s;
          x[i + half] = x2 * c + x1 * s;
        }
      }
  return y;
}

struct RopeCase {
  int B, T, NH, NKV, hs;
};

void CheckRope(RopeCase k, float theta, const RopeScaling* sc) {
  const auto [B, T, NH, NKV, hs] = k;
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
               " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs) + (sc ? " llama3" : ""));
  std::mt19937 rng(111);
  const int ld = (NH + 2 * NKV) * hs, half = hs / 2;
  const Vec qkv = RandomVec(rng, B * T * ld, -1, 1), r = RandomVec(rng, B * T * ld, -1, 1);
  Vec cos(T * half), sin(T * half);
  rope_table(cos.data(), sin.data(), T, hs, theta, sc);
  Vec y = qkv;
  rope_forward(y.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  const Vec64 qkv64 = Widen(qkv);
  EXPECT_TRUE(Near(y, RefRope(qkv64, B, T, NH, NKV, hs, theta, sc), kFwdTol)) << "forward";
  for (int m = 0; m < B * T; m++)  // v is not touched
    for (int i = (NH + NKV) * hs; i < ld; i++) ASSERT_EQ(y[m * ld + i], qkv[m * ld + i]);

  // Backward: rope_backward turns R's dq and dk back in place; dv passes through.
  Vec d = r;
  rope_backward(d.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  const Vec64 g = FiniteDiff(
      [&](const Vec64& v) { return Dot(RefRope(v, B, T, NH, NKV, hs, theta, sc), r); }, qkv64);
  EXPECT_TRUE(Near(d, g, kGradTol)) << "backward";

  // The single-row form gives rope_forward's bits for that row.
  for (int m : {0, B * T - 1, (B * T) / 2}) {
    Vec row(qkv.begin() + m * ld, qkv.begin() + (m + 1) * ld);
    rope_forward_row(row.data(), cos.data(), sin.data(), m % T, NH, NKV, hs);
    EXPECT_EQ(row, Vec(y.begin() + m * ld, y.begin() + (m + 1) * ld)) << "row " << m;
  }
}

TEST(KernelRope, ForwardMatchesFloat64AndBackwardMatchesFiniteDifferences) {
  CheckRope({2, 5, 6, 2, 6}, 10000.0f, nullptr);    // hs = 6, GQA
  CheckRope({1, 19, 4, 1, 8}, 10000.0f, nullptr);   // MQA, T not a multiple of 16
  CheckRope({2, 7, 3, 3, 34}, 500000.0f, nullptr);  // MHA, half = 17: a vector and a tail
  RopeScaling sc{8.0f, 1.0f, 4.0f, 16};  // a short original context: all three regimes at hs 32
  CheckRope({1, 9, 2, 1, 32}, 10000.0f, &sc);
}

// Llama 3.1's table (theta 500000, hs 128, factor 8, 1, 4, 8192) against HF's formula in float64:
// every inverse frequency to float rounding, each of the three regimes present, and the cos/sin
// table at positions far into a long context.
TEST(KernelRope, Llama3ScalingMatchesHuggingFaceFormula) {
  const int hs = 128, half = hs / 2;
  const RopeScaling sc{8.0f, 1.0f, 4.0f, 8192};
  Vec inv(half);
  rope_inv_freq(inv.data(), hs, 500000.0f, &sc);
  const Vec64 want = RefInvFreq(hs, 500000.0, &sc), plain = RefInvFreq(hs, 500000.0, nullptr);
  int kept = 0, divided = 0, smoothed = 0;
  for (int j = 0; j < half; j++) {
    EXPECT_NEAR(inv[j], want[j], 4e-6 * want[j]) << "j=" << j;
    const double ratio = want[j] / plain[j];
    if (ratio == 1.0) {
      kept++;
    } else if (std::fabs(ratio - 1.0 / 8) < 1e-12) {
      divided++;
    } else {
      smoothed++;
      EXPECT_GT(ratio, 1.0 / 8);
      EXPECT_LT(ratio, 1.0);
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
  // Unscaled: theta^(-2j/hs) to float rounding.
  Vec inv0(half);
  rope_inv_freq(inv0.data(), hs, 500000.0f);
  for (int j = 0; j < half; j++) EXPECT_NEAR(inv0[j], plain[j], 2e-7 * plain[j]) << "j=" << j;

  const int T = 8200;
  Vec cos(static_cast<size_t>(T) * half), sin(cos.size());
  rope_table(cos.data(), sin.data(), T, hs, 500000.0f, &sc);
  for (int t : {0, 1, 17, 4095, 8191, 8199}) {
    for (int j = 0; j < half; j++) {
      const size_t at = static_cast<size_t>(t) * half + j;
      // As documented: the float product t * inv_freq (HF's float32 angle), its cos and sin.
      const double a32 = static_cast<float>(t) * inv[j];
      EXPECT_NEAR(cos[at], std::cos(a32), 1e-7) << t << "," << j;
      EXPECT_NEAR(sin[at], std::sin(a32), 1e-7) << t << "," << j;
      // And near the exact angle of HF's formula: off by the float roundings of the frequency
      // (a few parts in 1e6) and of the angle.
      const double a = t * want[j], tol = 1e-6 + a * 1e-5;
      EXPECT_NEAR(cos[at], std::cos(a), tol) << t << "," << j;
      EXPECT_NEAR(sin[at], std::sin(a), tol) << t << "," << j;
    }
  }
}

// Each pair turns by an orthogonal matrix: backward (R^T) after forward (R) gives the input back,
// and <R x, y> = <x, R^T y>.
TEST(KernelRope, BackwardIsTheInverseTranspose) {
  const int B = 2, T = 33, NH = 6, NKV = 2, hs = 64, ld = (NH + 2 * NKV) * hs;
  std::mt19937 rng(112);
  const Vec x = RandomVec(rng, B * T * ld, -1, 1), y = RandomVec(rng, B * T * ld, -1, 1);
  Vec cos(T * hs / 2), sin(T * hs / 2);
  rope_table(cos.data(), sin.data(), T, hs, 10000.0f, nullptr);
  Vec rx = x;
  rope_forward(rx.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  Vec back = rx;
  rope_backward(back.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  EXPECT_TRUE(Near(back, Widen(x), 1e-6)) << "R^T R x = x";
  Vec rty = y;
  rope_backward(rty.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); i++) {
    lhs += static_cast<double>(rx[i]) * y[i];
    rhs += static_cast<double>(x[i]) * rty[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5);
}

TEST(KernelRope, SameBitsAcrossRunsAndThreadCounts) {
  const int B = 3, T = 41, NH = 8, NKV = 2, hs = 64, ld = (NH + 2 * NKV) * hs;
  std::mt19937 rng(113);
  const Vec x = RandomVec(rng, B * T * ld, -1, 1);
  const RopeScaling sc;
  ExpectSameBitsOnOneAndTwoThreads([&](int threads) {
    ThreadCount tc(threads);
    Vec cos(T * hs / 2), sin(T * hs / 2);
    rope_table(cos.data(), sin.data(), T, hs, 500000.0f, &sc);
    Vec y = x, d = x;
    rope_forward(y.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
    rope_backward(d.data(), cos.data(), sin.data(), B, T, NH, NKV, hs);
    y.insert(y.end(), d.begin(), d.end());
    y.insert(y.end(), cos.begin(), cos.end());
    y.insert(y.end(), sin.begin(), sin.end());
    return y;
  });
}

// ---- SwiGLU -----------------------------------------------------------------------------------

Vec64 RefSwiglu(const Vec64& inp, int M, int F) {
  Vec64 out(static_cast<size_t>(M) * F);
  for (int m = 0; m < M; m++)
    for (int j = 0; j < F; j++) {
      const double g = inp[m * 2 * F + j], u = inp[m * 2 * F + F + j];
      out[m * F + j] = g / (1 + std::exp(-g)) * u;
    }
  return out;
}

void CheckSwiglu(int M, int F) {
  SCOPED_TRACE("M=" + std::to_string(M) + " F=" + std::to_string(F));
  std::mt19937 rng(121);
  const Vec inp = RandomVec(rng, M * 2 * F, -4, 4), r = RandomVec(rng, M * F, -1, 1);
  const Vec64 inp64 = Widen(inp);
  Vec out(M * F, kGarbage);
  swiglu_forward(out.data(), inp.data(), M, F);
  EXPECT_TRUE(Near(out, RefSwiglu(inp64, M, F), kFwdTol)) << "out";
  std::vector<bf16> out_bf(M * F);
  swiglu_forward_bf16(out_bf.data(), inp.data(), M, F);
  EXPECT_EQ(out_bf, Rounded(out));

  Vec dinp(M * 2 * F, kGarbage);  // written
  swiglu_backward(dinp.data(), inp.data(), r.data(), M, F);
  const Vec64 g = FiniteDiff([&](const Vec64& v) { return Dot(RefSwiglu(v, M, F), r); }, inp64);
  EXPECT_TRUE(Near(dinp, g, kGradTol)) << "dinp";
  Vec dinp2(M * 2 * F, kGarbage);
  std::vector<bf16> dinp_bf(M * 2 * F), only_bf(M * 2 * F);
  swiglu_backward(dinp2.data(), inp.data(), r.data(), M, F, dinp_bf.data());
  EXPECT_EQ(dinp2, dinp);
  EXPECT_EQ(dinp_bf, Rounded(dinp));
  swiglu_backward(nullptr, inp.data(), r.data(), M, F, only_bf.data());
  EXPECT_EQ(only_bf, Rounded(dinp));
}

TEST(KernelSwiglu, ForwardMatchesFloat64AndBackwardMatchesFiniteDifferences) {
  CheckSwiglu(3, 5);
  CheckSwiglu(7, 37);  // a vector and a tail per row
  CheckSwiglu(1, 1);
}

TEST(KernelSwiglu, LargeGatesSaturateWithoutNaN) {
  const int M = 1, F = 6;
  const Vec inp = {-200.0f, -90.0f, -20.0f, 20.0f, 90.0f, 200.0f, 1, 1, 1, 1, 1, 1};
  Vec out(F), dinp(2 * F);
  const Vec dout(F, 1.0f);
  swiglu_forward(out.data(), inp.data(), M, F);
  swiglu_backward(dinp.data(), inp.data(), dout.data(), M, F);
  for (int j = 0; j < F; j++) {
    const double g = inp[j];
    EXPECT_NEAR(out[j], g > 0 ? g : 0.0, 1e-6 * std::fabs(g)) << j;
    EXPECT_NEAR(dinp[j], g > 0 ? 1.0 : 0.0, 1e-6) << j;          // silu' -> 1 and 0
    EXPECT_NEAR(dinp[F + j], out[j], 1e-6 * std::fabs(g)) << j;  // du = silu(g)
  }
}

TEST(KernelSwiglu, SameBitsAcrossRunsAndThreadCounts) {
  const int M = 37, F = 300;
  std::mt19937 rng(122);
  const Vec inp = RandomVec(rng, M * 2 * F, -4, 4), dout = RandomVec(rng, M * F, -1, 1);
  ExpectSameBitsOnOneAndTwoThreads([&](int threads) {
    ThreadCount tc(threads);
    Vec out(M * F), dinp(M * 2 * F);
    swiglu_forward(out.data(), inp.data(), M, F);
    swiglu_backward(dinp.data(), inp.data(), dout.data(), M, F);
    out.insert(out.end(), dinp.begin(), dinp.end());
    return out;
  });
}

}  // namespace
}  // namespace kiln
