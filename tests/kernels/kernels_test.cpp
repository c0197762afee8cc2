// Kernels against float64 references written here with plain loops (the textbook math).
//
// Forward: kiln's float32 output against the float64 reference, within kFwdTol of the largest
// reference magnitude. Backward: for a fixed random R, L = sum(out * R), so dL/dout = R is the
// dout given to kiln's float32 backward; every input and parameter gradient is compared with
// central finite differences of the float64 reference, within kGradTol of the largest gradient.
// Accumulated gradients (+=) are checked against a random pre-fill plus the gradient; written
// gradients (=) start from garbage that must be overwritten.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_check.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"

namespace kiln {
namespace {

using namespace kernel_test;

// ---- float64 references -----------------------------------------------------------------------

Vec64 RefEncoder(const std::vector<int32_t>& inp, const Vec64& wte, const Vec64& wpe, int B, int T,
                 int C) {
  Vec64 out(static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      for (int c = 0; c < C; c++) {
        out[(b * T + t) * C + c] = wte[inp[b * T + t] * C + c] + wpe[t * C + c];
      }
    }
  }
  return out;
}

struct LayernormRef {
  Vec64 out, mean, rstd;
};

LayernormRef RefLayernorm(const Vec64& x, const Vec64& w, const Vec64& b, int M, int C) {
  LayernormRef r{Vec64(x.size()), Vec64(M), Vec64(M)};
  for (int m = 0; m < M; m++) {
    double mu = 0;
    for (int c = 0; c < C; c++) mu += x[m * C + c];
    mu /= C;
    double var = 0;  // biased
    for (int c = 0; c < C; c++) var += (x[m * C + c] - mu) * (x[m * C + c] - mu);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) r.out[m * C + c] = (x[m * C + c] - mu) * rstd * w[c] + b[c];
    r.mean[m] = mu;
    r.rstd[m] = rstd;
  }
  return r;
}

double RefGelu(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

struct AttentionRef {
  Vec64 out, att;
};

// qkv (B,T,3C): q, k, v side by side; head h is the hs-slice [h*hs, (h+1)*hs) of each.
AttentionRef RefAttention(const Vec64& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  AttentionRef r{Vec64(static_cast<size_t>(B) * T * C, 0.0),
                 Vec64(static_cast<size_t>(B) * NH * T * T, 0.0)};
  auto at = [&](int b, int t, int part, int h, int i) {
    return qkv[(b * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        std::vector<double> s(t + 1);
        double maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          double dot = 0;
          for (int i = 0; i < hs; i++) dot += at(b, t, 0, h, i) * at(b, t2, 1, h, i);
          s[t2] = dot * scale;
          maxv = std::max(maxv, s[t2]);
        }
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += std::exp(s[t2] - maxv);
        double* a = &r.att[((b * NH + h) * T + t) * T];
        for (int t2 = 0; t2 <= t; t2++) a[t2] = std::exp(s[t2] - maxv) / sum;
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int t2 = 0; t2 <= t; t2++) o += a[t2] * at(b, t2, 2, h, i);
          r.out[(b * T + t) * C + h * hs + i] = o;
        }
      }
    }
  }
  return r;
}

// losses (M): logsumexp over the first V columns minus the target logit; 0 for target < 0.
Vec64 RefCrossEntropy(const Vec64& logits, const std::vector<int32_t>& targets, int M, int V,
                      int Vp) {
  Vec64 losses(M, 0.0);
  for (int m = 0; m < M; m++) {
    if (targets[m] < 0) continue;
    const double* x = &logits[static_cast<size_t>(m) * Vp];
    double maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = std::max(maxv, x[i]);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += std::exp(x[i] - maxv);
    losses[m] = std::log(sum) + maxv - x[targets[m]];
  }
  return losses;
}

// C = op(A) @ op(B) [+ bias] [+ c0], with A stored (M,K) or (K,M), B stored (K,N) or (N,K).
Vec64 RefMatmul(const MatmulShape& s, const Vec64& a, const Vec64& b, const Vec64* bias,
                const Vec64* c0) {
  Vec64 c(static_cast<size_t>(s.M * s.N));
  for (int64_t m = 0; m < s.M; m++) {
    for (int64_t n = 0; n < s.N; n++) {
      double acc = 0;
      for (int64_t k = 0; k < s.K; k++) {
        const double av = s.trans_a ? a[k * s.M + m] : a[m * s.K + k];
        const double bv = s.trans_b ? b[n * s.K + k] : b[k * s.N + n];
        acc += av * bv;
      }
      if (bias) acc += (*bias)[n];
      if (c0) acc += (*c0)[m * s.N + n];
      c[m * s.N + n] = acc;
    }
  }
  return c;
}

// ---- encoder ----------------------------------------------------------------------------------

void CheckEncoder(int C) {
  SCOPED_TRACE("C=" + std::to_string(C));
  std::mt19937 rng(11);
  const int B = 2, T = 5, V = 12;
  // Repeated tokens (1, 3, 5) must sum their gradients; unused rows (0, 7, 8, 10, 11) get none.
  const std::vector<int32_t> inp = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  const Vec wte = RandomVec(rng, V * C, -1, 1), wpe = RandomVec(rng, T * C, -1, 1);
  const Vec r = RandomVec(rng, B * T * C, -1, 1);

  Vec out(B * T * C, kGarbage);
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(Near(out, RefEncoder(inp, Widen(wte), Widen(wpe), B, T, C), kFwdTol));

  const Vec dwte0 = RandomVec(rng, V * C, -1, 1), dwpe0 = RandomVec(rng, T * C, -1, 1);
  Vec dwte = dwte0, dwpe = dwpe0;
  encoder_backward(dwte.data(), dwpe.data(), r.data(), inp.data(), B, T, C);

  const Vec64 wte64 = Widen(wte), wpe64 = Widen(wpe);
  const Vec64 gwte =
      FiniteDiff([&](const Vec64& x) { return Dot(RefEncoder(inp, x, wpe64, B, T, C), r); }, wte64);
  const Vec64 gwpe =
      FiniteDiff([&](const Vec64& x) { return Dot(RefEncoder(inp, wte64, x, B, T, C), r); }, wpe64);
  EXPECT_TRUE(Near(dwte, dwte0, gwte, kGradTol)) << "dwte";
  EXPECT_TRUE(Near(dwpe, dwpe0, gwpe, kGradTol)) << "dwpe";
}

TEST(KernelEncoder, ForwardAndAccumulatingBackwardMatchFloat64Reference) {
  CheckEncoder(8);
  CheckEncoder(70);  // more than one 64-channel block
}

TEST(KernelEncoder, BackwardIsBitwiseIdenticalAcrossRunsAndThreadCounts) {
  std::mt19937 rng(12);
  const int B = 2, T = 8, C = 130, V = 5;
  std::vector<int32_t> inp(B * T);
  for (size_t i = 0; i < inp.size(); i++) inp[i] = static_cast<int32_t>(i * 7 % V);
  const Vec dout = RandomVec(rng, B * T * C, -1, 1);
  const Vec dwte0 = RandomVec(rng, V * C, -1, 1), dwpe0 = RandomVec(rng, T * C, -1, 1);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Vec dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
    dwte.insert(dwte.end(), dwpe.begin(), dwpe.end());
    return dwte;
  };
  ExpectSameBitsOnOneAndTwoThreads(run);
}

// ---- layernorm --------------------------------------------------------------------------------

void CheckLayernorm(int M, int C) {
  SCOPED_TRACE("M=" + std::to_string(M) + " C=" + std::to_string(C));
  std::mt19937 rng(21);
  Vec x = RandomVec(rng, M * C, -2, 2);
  const Vec offsets = RandomVec(rng, M, -3, 3);  // rows with a non-zero mean
  for (int m = 0; m < M; m++) {
    for (int c = 0; c < C; c++) x[m * C + c] += offsets[m];
  }
  const Vec w = RandomVec(rng, C, 0.5f, 1.5f), b = RandomVec(rng, C, -0.5f, 0.5f);
  const Vec r = RandomVec(rng, M * C, -1, 1);
  const Vec64 x64 = Widen(x), w64 = Widen(w), b64 = Widen(b);

  Vec out(M * C, kGarbage), mean(M, kGarbage), rstd(M, kGarbage);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
  const LayernormRef ref = RefLayernorm(x64, w64, b64, M, C);
  EXPECT_TRUE(Near(out, ref.out, kFwdTol)) << "out";
  EXPECT_TRUE(Near(mean, ref.mean, kFwdTol)) << "mean";
  EXPECT_TRUE(Near(rstd, ref.rstd, kFwdTol)) << "rstd";

  const Vec dinp0 = RandomVec(rng, M * C, -1, 1);
  const Vec dw0 = RandomVec(rng, C, -1, 1), db0 = RandomVec(rng, C, -1, 1);
  Vec dinp = dinp0, dw = dw0, db = db0;
  layernorm_backward(dinp.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), M, C);

  const Vec64 gx =
      FiniteDiff([&](const Vec64& v) { return Dot(RefLayernorm(v, w64, b64, M, C).out, r); }, x64);
  const Vec64 gw =
      FiniteDiff([&](const Vec64& v) { return Dot(RefLayernorm(x64, v, b64, M, C).out, r); }, w64);
  const Vec64 gb =
      FiniteDiff([&](const Vec64& v) { return Dot(RefLayernorm(x64, w64, v, M, C).out, r); }, b64);
  EXPECT_TRUE(Near(dinp, dinp0, gx, kGradTol)) << "dinp";
  EXPECT_TRUE(Near(dw, dw0, gw, kGradTol)) << "dw";
  EXPECT_TRUE(Near(db, db0, gb, kGradTol)) << "db";
}

TEST(KernelLayernorm, ForwardMatchesFloat64Reference) {
  // The forward half of CheckLayernorm, kept apart so a failure names the direction.
  std::mt19937 rng(22);
  const int M = 4, C = 16;
  const Vec x = RandomVec(rng, M * C, -5, 5);
  const Vec w = RandomVec(rng, C, -2, 2), b = RandomVec(rng, C, -1, 1);
  Vec out(M * C), mean(M), rstd(M);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
  const LayernormRef ref = RefLayernorm(Widen(x), Widen(w), Widen(b), M, C);
  EXPECT_TRUE(Near(out, ref.out, kFwdTol));
  EXPECT_TRUE(Near(mean, ref.mean, kFwdTol));
  EXPECT_TRUE(Near(rstd, ref.rstd, kFwdTol));
}

TEST(KernelLayernorm, BackwardMatchesFloat64FiniteDifferences) {
  CheckLayernorm(7, 8);
  CheckLayernorm(3, 67);  // more than one 64-channel block for dw, db
}

TEST(KernelLayernorm, BackwardIsBitwiseIdenticalAcrossRunsAndThreadCounts) {
  std::mt19937 rng(23);
  const int M = 64, C = 130;
  const Vec x = RandomVec(rng, M * C, -2, 2), w = RandomVec(rng, C, 0.5f, 1.5f),
            b = RandomVec(rng, C, -1, 1), dout = RandomVec(rng, M * C, -1, 1);
  const Vec dinp0 = RandomVec(rng, M * C, -1, 1), dw0 = RandomVec(rng, C, -1, 1),
            db0 = RandomVec(rng, C, -1, 1);
  Vec out(M * C), mean(M), rstd(M);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Vec dinp = dinp0, dw = dw0, db = db0;
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), M, C);
    dinp.insert(dinp.end(), dw.begin(), dw.end());
    dinp.insert(dinp.end(), db.begin(), db.end());
    return dinp;
  };
  ExpectSameBitsOnOneAndTwoThreads(run);
}

// ---- GELU -------------------------------------------------------------------------------------

TEST(KernelGelu, ForwardMatchesFloat64TanhApproximation) {
  std::mt19937 rng(31);
  const Vec x = RandomVec(rng, 41, -5, 5);
  Vec out(x.size(), kGarbage);
  gelu_forward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  Vec64 want(x.size());
  for (size_t i = 0; i < x.size(); i++) want[i] = RefGelu(x[i]);
  EXPECT_TRUE(Near(out, want, kFwdTol));
}

TEST(KernelGelu, BackwardWritesFloat64FiniteDifferences) {
  std::mt19937 rng(32);
  const Vec x = RandomVec(rng, 41, -5, 5), r = RandomVec(rng, 41, -1, 1);
  Vec dinp(x.size(), kGarbage);  // written, not accumulated
  gelu_backward(dinp.data(), x.data(), r.data(), static_cast<int64_t>(x.size()));
  const Vec64 g = FiniteDiff(
      [&](const Vec64& v) {
        double s = 0;
        for (size_t i = 0; i < v.size(); i++) s += RefGelu(v[i]) * r[i];
        return s;
      },
      Widen(x));
  EXPECT_TRUE(Near(dinp, g, kGradTol));
}

// ---- attention --------------------------------------------------------------------------------

void CheckAttention(int B, int T, int C, int NH) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
               " NH=" + std::to_string(NH));
  std::mt19937 rng(41);
  const Vec qkv = RandomVec(rng, B * T * 3 * C, -1.5f, 1.5f);
  const Vec r = RandomVec(rng, B * T * C, -1, 1);
  const Vec64 qkv64 = Widen(qkv);

  Vec out(B * T * C, kGarbage), att(B * NH * T * T, kGarbage);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  const AttentionRef ref = RefAttention(qkv64, B, T, C, NH);
  EXPECT_TRUE(Near(out, ref.out, kFwdTol)) << "out";
  EXPECT_TRUE(Near(att, ref.att, kFwdTol)) << "att";
  for (int bh = 0; bh < B * NH; bh++) {
    for (int t = 0; t < T; t++) {
      for (int t2 = t + 1; t2 < T; t2++) {
        ASSERT_EQ(att[(bh * T + t) * T + t2], 0.0f) << "above the diagonal at " << t << "," << t2;
      }
    }
  }

  Vec dqkv(qkv.size(), kGarbage), datt(att.size(), kGarbage);  // dqkv written, datt scratch
  attention_backward(dqkv.data(), datt.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  const Vec64 g =
      FiniteDiff([&](const Vec64& v) { return Dot(RefAttention(v, B, T, C, NH).out, r); }, qkv64);
  EXPECT_TRUE(Near(dqkv, g, kGradTol)) << "dqkv";
}

TEST(KernelAttention, ForwardAndBackwardMatchFloat64ReferenceAndFiniteDifferences) {
  CheckAttention(2, 5, 8, 2);
  CheckAttention(1, 7, 12, 3);
  CheckAttention(1, 37, 16, 2);  // rows longer than the 16-lane softmax sums, with a tail
}

TEST(KernelAttention, ForwardAndBackwardAreBitwiseIdenticalAcrossRunsAndThreadCounts) {
  // Small, and large enough (one batch of heads, T = 192) for the products to split their work
  // inside a matrix.
  for (auto [B, T, C, NH] : {std::array{2, 16, 32, 4}, std::array{1, 192, 128, 2}}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::mt19937 rng(42);
    const Vec qkv = RandomVec(rng, B * T * 3 * C, -1.5f, 1.5f);
    const Vec dout = RandomVec(rng, B * T * C, -1, 1);
    auto run = [&](int threads) {
      ThreadCount tc(threads);
      Vec out(B * T * C, kGarbage), att(B * NH * T * T, kGarbage);
      attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      Vec dqkv(qkv.size(), kGarbage), datt(att.size(), kGarbage);
      attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                         NH);
      out.insert(out.end(), dqkv.begin(), dqkv.end());
      return out;
    };
    ExpectSameBitsOnOneAndTwoThreads(run);
  }
}

// Flash-style attention: the same function, so the same float64 reference and finite
// differences; its lse against the reference's log-sum-exp of the scaled causal scores.
void CheckFlashAttention(int B, int T, int C, int NH) {
  SCOPED_TRACE("flash B=" + std::to_string(B) + " T=" + std::to_string(T) +
               " C=" + std::to_string(C) + " NH=" + std::to_string(NH));
  std::mt19937 rng(43);
  const Vec qkv = RandomVec(rng, B * T * 3 * C, -1.5f, 1.5f);
  const Vec r = RandomVec(rng, B * T * C, -1, 1);
  const Vec64 qkv64 = Widen(qkv);
  const int hs = C / NH;

  Vec out(B * T * C, kGarbage), lse(B * NH * T, kGarbage);
  Vec scratch(attention_flash_scratch_floats(B, T, NH), kGarbage);
  attention_forward_flash(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(Near(out, RefAttention(qkv64, B, T, C, NH).out, kFwdTol)) << "out";
  Vec64 lse_ref(lse.size());
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          double s = 0;
          for (int i = 0; i < hs; i++)
            s += qkv64[(b * T + t) * 3 * C + h * hs + i] *
                 qkv64[(b * T + t2) * 3 * C + C + h * hs + i];
          sum += std::exp(s / std::sqrt(static_cast<double>(hs)));
        }
        lse_ref[(b * NH + h) * T + t] = std::log(sum);
      }
  EXPECT_TRUE(Near(lse, lse_ref, kFwdTol)) << "lse";

  Vec dqkv(qkv.size(), kGarbage);  // written
  attention_backward_flash(dqkv.data(), scratch.data(), r.data(), qkv.data(), out.data(),
                           lse.data(), B, T, C, NH);
  const Vec64 g =
      FiniteDiff([&](const Vec64& v) { return Dot(RefAttention(v, B, T, C, NH).out, r); }, qkv64);
  EXPECT_TRUE(Near(dqkv, g, kGradTol)) << "dqkv";

  // and against the kernels that keep the probabilities
  Vec out2(out.size()), att(B * NH * T * T), dqkv2(qkv.size()), datt(att.size());
  attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(dqkv2.data(), datt.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(Near(out, Widen(out2), kFwdTol)) << "out vs attention_forward";
  EXPECT_TRUE(Near(dqkv, Widen(dqkv2), kFwdTol * 10)) << "dqkv vs attention_backward";
}

TEST(KernelAttentionFlash, ForwardAndBackwardMatchFloat64ReferenceAndFiniteDifferences) {
  CheckFlashAttention(2, 5, 8, 2);
  CheckFlashAttention(1, 7, 12, 3);
  CheckFlashAttention(1, 40, 32, 2);  // long rows: the running maximum moves many times
}

// Several blocks of queries and keys (128 each; the last one ragged) against the kernels that
// keep the probabilities, which the test above checks against float64 and finite differences.
TEST(KernelAttentionFlash, ManyBlocksMatchTheStandardKernels) {
  const int B = 2, T = 300, C = 32, NH = 2;
  std::mt19937 rng(45);
  Vec qkv = RandomVec(rng, B * T * 3 * C, -1.5f, 1.5f);
  for (int i = 0; i < C; i++) qkv[(7 * 3 + 1) * C + i] *= 6.0f;  // one key far above the rest
  const Vec dout = RandomVec(rng, B * T * C, -1, 1);
  Vec out(B * T * C, kGarbage), lse(B * NH * T, kGarbage), dqkv(qkv.size(), kGarbage);
  Vec scratch(attention_flash_scratch_floats(B, T, NH), kGarbage);
  attention_forward_flash(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
  attention_backward_flash(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                           lse.data(), B, T, C, NH);
  Vec out2(out.size()), att(B * NH * T * T), dqkv2(qkv.size()), datt(att.size());
  attention_forward(out2.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(dqkv2.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(Near(out, Widen(out2), kFwdTol)) << "out";
  EXPECT_TRUE(Near(dqkv, Widen(dqkv2), kFwdTol * 10)) << "dqkv";
  // lse against the probabilities' own normaliser: the row's maximum probability is
  // exp(max score - lse).
  for (int bh = 0; bh < B * NH; bh++) {
    for (int t : {0, 1, 127, 128, 200, 299}) {
      const float* a = att.data() + (static_cast<int64_t>(bh) * T + t) * T;
      double s = 0;
      for (int t2 = 0; t2 <= t; t2++) s += a[t2];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST(KernelAttentionFlash, SameBitsAcrossRunsAndThreadCounts) {
  for (auto [B, T, C, NH] : {std::array{2, 16, 32, 4}, std::array{1, 300, 128, 2}}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    std::mt19937 rng(44);
    const Vec qkv = RandomVec(rng, B * T * 3 * C, -1.5f, 1.5f);
    const Vec dout = RandomVec(rng, B * T * C, -1, 1);
    auto run = [&](int threads) {
      ThreadCount tc(threads);
      Vec out(B * T * C), lse(B * NH * T), dqkv(qkv.size(), kGarbage);
      Vec scratch(attention_flash_scratch_floats(B, T, NH), kGarbage);
      attention_forward_flash(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
      attention_backward_flash(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                               lse.data(), B, T, C, NH);
      out.insert(out.end(), lse.begin(), lse.end());
      out.insert(out.end(), dqkv.begin(), dqkv.end());
      return out;
    };
    ExpectSameBitsOnOneAndTwoThreads(run);
  }
}

// ---- softmax cross-entropy --------------------------------------------------------------------

struct CrossEntropyCase {
  int M = 6, V = 7, Vp = 10;
  std::vector<int32_t> targets = {2, -1, 0, 6, 3, -1};
  Vec logits;
  CrossEntropyCase() {
    std::mt19937 rng(51);
    logits = RandomVec(rng, M * Vp, -3, 3);
    for (int m = 0; m < M; m++) {
      // Padded columns hold values that would dominate the loss if they were read.
      for (int i = V; i < Vp; i++) logits[m * Vp + i] = 50.0f;
    }
    for (int i = 0; i < V; i++) logits[3 * Vp + i] += 100.0f;  // exp() overflows without the max
  }
};

TEST(KernelCrossEntropy, LossesMatchFloat64LogSumExpOverRealColumns) {
  CrossEntropyCase k;
  const Vec64 want = RefCrossEntropy(Widen(k.logits), k.targets, k.M, k.V, k.Vp);
  for (float scale : {0.0f, 0.37f}) {
    SCOPED_TRACE("dlogits_scale=" + std::to_string(scale));
    Vec logits = k.logits, losses(k.M, kGarbage);
    softmax_cross_entropy(logits.data(), losses.data(), k.targets.data(), k.M, k.V, k.Vp, scale);
    EXPECT_TRUE(Near(losses, want, kFwdTol));
    EXPECT_EQ(losses[1], 0.0f) << "ignored target";
    EXPECT_EQ(losses[5], 0.0f) << "ignored target";
  }
}

TEST(KernelCrossEntropy, DlogitsMatchFloat64FiniteDifferencesWithPaddingAndIgnoredTargets) {
  CrossEntropyCase k;
  const float scale = 0.37f;
  Vec logits = k.logits, losses(k.M);
  softmax_cross_entropy(logits.data(), losses.data(), k.targets.data(), k.M, k.V, k.Vp, scale);
  // L = scale * sum(losses): padded columns and ignored rows have a zero gradient.
  const Vec64 g = FiniteDiff(
      [&](const Vec64& x) {
        double s = 0;
        for (double l : RefCrossEntropy(x, k.targets, k.M, k.V, k.Vp)) s += l;
        return s * scale;
      },
      Widen(k.logits));
  EXPECT_TRUE(Near(logits, g, kGradTol));
  for (int m = 0; m < k.M; m++) {
    for (int i = 0; i < k.Vp; i++) {
      if (i >= k.V || k.targets[m] < 0) {
        EXPECT_EQ(logits[m * k.Vp + i], 0.0f) << "row " << m << " column " << i;
      }
    }
  }
}

// A vocabulary wide enough for the 16-lane maximum and sum, with a tail that is not a multiple
// of 16; the bf16 gradient is the fp32 gradient rounded, bit for bit.
TEST(KernelCrossEntropy, WideRowsMatchFloat64AndBf16GradientIsTheRoundedFp32One) {
  const int M = 5, V = 1001, Vp = 1024;
  std::mt19937 rng(53);
  Vec logits0 = RandomVec(rng, M * Vp, -4, 4);
  logits0[2 * Vp + 1000] = 30.0f;  // the maximum in the tail
  logits0[4 * Vp + 17] = 30.0f;    // and inside a lane
  const std::vector<int32_t> targets = {3, 1000, -1, 999, 17};
  const Vec64 want = RefCrossEntropy(Widen(logits0), targets, M, V, Vp);
  const float scale = 0.25f;
  Vec fp = logits0, losses(M);
  softmax_cross_entropy(fp.data(), losses.data(), targets.data(), M, V, Vp, scale);
  EXPECT_TRUE(Near(losses, want, kFwdTol));
  Vec scratch = logits0, losses_bf(M);
  std::vector<bf16> d(M * Vp, 0x7fff);
  softmax_cross_entropy(scratch.data(), losses_bf.data(), targets.data(), M, V, Vp, scale,
                        d.data());
  EXPECT_EQ(losses_bf, losses);
  for (int i = 0; i < M * Vp; i++) ASSERT_EQ(d[i], float_to_bf16(fp[i])) << "element " << i;
}

// ---- fused kernels: the same bits as the unfused sequence they replace ------------------------

std::vector<bf16> Rounded(const Vec& x) {
  std::vector<bf16> r(x.size());
  for (size_t i = 0; i < x.size(); i++) r[i] = float_to_bf16(x[i]);
  return r;
}

TEST(KernelFused, ResidualLayernormEqualsAddThenLayernormAndItsBf16IsTheRoundedOutput) {
  const int M = 7, C = 53;
  std::mt19937 rng(71);
  const Vec x = RandomVec(rng, M * C, -2, 2), add = RandomVec(rng, M * C, -1, 1);
  const Vec w = RandomVec(rng, C, 0.5, 1.5), b = RandomVec(rng, C, -0.5, 0.5);
  Vec sum(M * C), want(M * C), mean0(M), rstd0(M);
  for (int i = 0; i < M * C; i++) sum[i] = x[i] + add[i];
  layernorm_forward(want.data(), mean0.data(), rstd0.data(), sum.data(), w.data(), b.data(), M, C);
  Vec res(M * C, kGarbage), out(M * C, kGarbage), mean(M), rstd(M);
  std::vector<bf16> out_bf(M * C);
  layernorm_forward_fused(res.data(), out.data(), out_bf.data(), mean.data(), rstd.data(), x.data(),
                          add.data(), w.data(), b.data(), M, C);
  EXPECT_EQ(res, sum);
  EXPECT_EQ(out, want);
  EXPECT_EQ(mean, mean0);
  EXPECT_EQ(rstd, rstd0);
  EXPECT_EQ(out_bf, Rounded(want));
  // bf16 only, no residual: the same rounded rows.
  std::vector<bf16> only_bf(M * C);
  layernorm_forward_fused(nullptr, nullptr, only_bf.data(), mean.data(), rstd.data(), sum.data(),
                          nullptr, w.data(), b.data(), M, C);
  EXPECT_EQ(only_bf, Rounded(want));
}

TEST(KernelFused, LayernormBackwardBf16CopyIsTheRoundedAccumulatedGradient) {
  const int M = 5, C = 37;
  std::mt19937 rng(72);
  const Vec x = RandomVec(rng, M * C, -2, 2), dout = RandomVec(rng, M * C, -1, 1);
  const Vec w = RandomVec(rng, C, 0.5, 1.5), b = RandomVec(rng, C, -0.5, 0.5);
  const Vec dinp0 = RandomVec(rng, M * C, -1, 1);
  Vec out(M * C), mean(M), rstd(M);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), M, C);
  Vec d1 = dinp0, dw1(C), db1(C), d2 = dinp0, dw2(C), db2(C);
  layernorm_backward(d1.data(), dw1.data(), db1.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), M, C);
  std::vector<bf16> d_bf(M * C);
  layernorm_backward(d2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), M, C, d_bf.data());
  EXPECT_EQ(d2, d1);
  EXPECT_EQ(dw2, dw1);
  EXPECT_EQ(db2, db1);
  EXPECT_EQ(d_bf, Rounded(d1));
}

TEST(KernelFused, GeluBf16AndGeluBiasBackwardEqualTheUnfusedKernels) {
  for (auto [M, N] : {std::pair{3, 5}, std::pair{17, 130}, std::pair{64, 256}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N));
    std::mt19937 rng(73);
    const Vec x = RandomVec(rng, M * N, -4, 4), dout = RandomVec(rng, M * N, -1, 1);
    Vec y(M * N);
    gelu_forward(y.data(), x.data(), M * N);
    std::vector<bf16> y_bf(M * N);
    gelu_forward_bf16(y_bf.data(), x.data(), M * N);
    EXPECT_EQ(y_bf, Rounded(y));

    const Vec db0 = RandomVec(rng, N, -1, 1);
    Vec dx(M * N), db = db0;
    gelu_backward(dx.data(), x.data(), dout.data(), M * N);
    bias_backward(db.data(), dx.data(), M, N);
    Vec fdx(M * N, kGarbage), fdb = db0;
    std::vector<bf16> fdx_bf(M * N);
    gelu_bias_backward(fdx.data(), fdx_bf.data(), fdb.data(), x.data(), dout.data(), M, N);
    EXPECT_EQ(fdx, dx);
    EXPECT_EQ(fdb, db);
    EXPECT_EQ(fdx_bf, Rounded(dx));
    Vec bdb = db0;  // bf16 output only
    std::vector<bf16> bdx_bf(M * N);
    gelu_bias_backward(nullptr, bdx_bf.data(), bdb.data(), x.data(), dout.data(), M, N);
    EXPECT_EQ(bdb, db);
    EXPECT_EQ(bdx_bf, Rounded(dx));
  }
}

// ---- bias gradient ----------------------------------------------------------------------------

void CheckBiasBackward(int M, int N) {
  SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N));
  std::mt19937 rng(61);
  const Vec x = RandomVec(rng, M * N, -1, 1), r = RandomVec(rng, M * N, -1, 1);
  const Vec db0 = RandomVec(rng, N, -1, 1);
  Vec db = db0;
  bias_backward(db.data(), r.data(), M, N);
  // out(m, n) = x(m, n) + b(n)
  const Vec64 g = FiniteDiff(
      [&](const Vec64& b) {
        Vec64 out(M * N);
        for (int m = 0; m < M; m++) {
          for (int n = 0; n < N; n++) out[m * N + n] = x[m * N + n] + b[n];
        }
        return Dot(out, r);
      },
      Vec64(N, 0.25));
  EXPECT_TRUE(Near(db, db0, g, kGradTol));
}

TEST(KernelBiasBackward, AccumulatesFloat64FiniteDifferences) {
  CheckBiasBackward(9, 5);
  CheckBiasBackward(9, 70);  // more than one 64-column block
}

TEST(KernelBiasBackward, IsBitwiseIdenticalAcrossThreadCounts) {
  std::mt19937 rng(62);
  const int M = 50, N = 200;
  const Vec dout = RandomVec(rng, M * N, -1, 1), db0 = RandomVec(rng, N, -1, 1);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Vec db = db0;
    bias_backward(db.data(), dout.data(), M, N);
    return db;
  };
  EXPECT_TRUE(SameBits(run(2), run(1)));
}

// ---- matmul -----------------------------------------------------------------------------------

TEST(KernelMatmul, AllTransposeAccumulateAndBiasCombinationsMatchFloat64Reference) {
  std::mt19937 rng(71);
  const int64_t sizes[][3] = {{7, 5, 6}, {33, 70, 65}};
  for (const auto& sz : sizes) {
    for (int combo = 0; combo < 16; combo++) {
      MatmulShape s{sz[0], sz[1], sz[2]};
      s.trans_a = combo & 1;
      s.trans_b = combo & 2;
      s.accumulate = combo & 4;
      s.bias = combo & 8;
      SCOPED_TRACE(::testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K
                                        << " trans_a=" << s.trans_a << " trans_b=" << s.trans_b
                                        << " accumulate=" << s.accumulate << " bias=" << s.bias);
      const Vec a = RandomVec(rng, s.M * s.K, -1, 1), b = RandomVec(rng, s.K * s.N, -1, 1);
      const Vec bias = RandomVec(rng, s.N, -1, 1), c0 = RandomVec(rng, s.M * s.N, -1, 1);
      Vec c = s.accumulate ? c0 : Vec(s.M * s.N, kGarbage);
      matmul(s, a.data(), b.data(), c.data(), s.bias ? bias.data() : nullptr);
      const Vec64 bias64 = Widen(bias), c064 = Widen(c0);
      const Vec64 want = RefMatmul(s, Widen(a), Widen(b), s.bias ? &bias64 : nullptr,
                                   s.accumulate ? &c064 : nullptr);
      EXPECT_TRUE(Near(c, want, kFwdTol));
    }
  }
}

// ---- bf16 -------------------------------------------------------------------------------------

TEST(KernelBf16, RoundsToNearestTiesToEvenAndKeepsSpecials) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);             // halfway, to the even 1.0
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);         // halfway, to the even 1+2^-6
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above halfway: up
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(float_to_bf16(3.4028235e38f), 0x7f80);  // FLT_MAX rounds to infinity
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(-NAN))));
  EXPECT_EQ(bf16_to_float(0x3f81), 1.0f + 0x1p-7f);
}

TEST(KernelBf16, ConversionIsTheNearestBf16AndTheKernelAgreesWithTheScalar) {
  std::mt19937 rng(81);
  Vec x = RandomVec(rng, 10000, -1000, 1000);
  x.push_back(1e-30f);  // subnormal in neither format, but tiny
  x.push_back(0.0f);
  std::vector<bf16> y(x.size());
  to_bf16(y.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); i++) {
    ASSERT_EQ(y[i], float_to_bf16(x[i])) << i;
    // The neighbours of y[i] in bf16 are no closer to x[i].
    const double got = bf16_to_float(y[i]);
    if (x[i] == 0.0f) {
      ASSERT_EQ(got, 0.0);
      continue;
    }
    for (int d : {-1, 1}) {  // the next smaller and larger magnitudes
      const double other = bf16_to_float(static_cast<bf16>(y[i] + d));
      ASSERT_LE(std::fabs(got - x[i]), std::fabs(other - x[i])) << "x=" << x[i];
    }
  }
}

// bf16 operands, fp32 accumulation: every product of two bf16 values is exact in fp32, so the
// result is the float64 product of the rounded operands up to fp32 summation error.
TEST(KernelMatmulBf16, AllCombinationsMatchFloat64ProductOfTheRoundedOperands) {
  std::mt19937 rng(73);
  const int64_t sizes[][3] = {{7, 5, 6}, {33, 70, 65}, {64, 96, 200}};
  for (const auto& sz : sizes) {
    for (int combo = 0; combo < 16; combo++) {
      MatmulShape s{sz[0], sz[1], sz[2]};
      s.trans_a = combo & 1;
      s.trans_b = combo & 2;
      s.accumulate = combo & 4;
      s.bias = combo & 8;
      SCOPED_TRACE(::testing::Message() << "M=" << s.M << " N=" << s.N << " K=" << s.K
                                        << " trans_a=" << s.trans_a << " trans_b=" << s.trans_b
                                        << " accumulate=" << s.accumulate << " bias=" << s.bias);
      const Vec a = RandomVec(rng, s.M * s.K, -1, 1), b = RandomVec(rng, s.K * s.N, -1, 1);
      const Vec bias = RandomVec(rng, s.N, -1, 1), c0 = RandomVec(rng, s.M * s.N, -1, 1);
      std::vector<bf16> ab(a.size()), bb(b.size());
      to_bf16(ab.data(), a.data(), static_cast<int64_t>(a.size()));
      to_bf16(bb.data(), b.data(), static_cast<int64_t>(b.size()));
      Vec64 a64(a.size()), b64(b.size());
      for (size_t i = 0; i < a.size(); i++) a64[i] = bf16_to_float(ab[i]);
      for (size_t i = 0; i < b.size(); i++) b64[i] = bf16_to_float(bb[i]);
      Vec c = s.accumulate ? c0 : Vec(s.M * s.N, kGarbage);
      matmul_bf16(s, ab.data(), bb.data(), c.data(), s.bias ? bias.data() : nullptr);
      const Vec64 bias64 = Widen(bias), c064 = Widen(c0);
      const Vec64 want =
          RefMatmul(s, a64, b64, s.bias ? &bias64 : nullptr, s.accumulate ? &c064 : nullptr);
      EXPECT_TRUE(Near(c, want, kFwdTol));
    }
  }
}

TEST(KernelMatmulBf16, SameBitsAcrossRunsAndThreadCounts) {
  std::mt19937 rng(74);
  // The shapes of a linear layer's three products at M = 256 rows.
  const int64_t M = 256, K = 192, N = 576;
  const Vec x = RandomVec(rng, M * K, -1, 1), w = RandomVec(rng, K * N, -1, 1);
  const Vec dy = RandomVec(rng, M * N, -1, 1);
  std::vector<bf16> xb(x.size()), wb(w.size()), dyb(dy.size());
  to_bf16(xb.data(), x.data(), M * K);
  to_bf16(wb.data(), w.data(), K * N);
  to_bf16(dyb.data(), dy.data(), M * N);
  auto run = [&](int threads) {
    ThreadCount tc(threads);
    Vec y(M * N), dx(M * K), dw(K * N, 0.5f);
    matmul_bf16(MatmulShape{M, N, K}, xb.data(), wb.data(), y.data());
    matmul_bf16(MatmulShape{K, N, M, true, false, true, false}, xb.data(), dyb.data(), dw.data());
    matmul_bf16(MatmulShape{M, K, N, false, true, false, false}, dyb.data(), wb.data(), dx.data());
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  };
  ExpectSameBitsOnOneAndTwoThreads(run);
}

// The two layouts the model uses, each forward with its backward built from transposed
// products: a linear layer with W stored (K,N), and the tied lm_head with W stored (N,K).
void CheckLinearGradients(bool w_stored_nk) {
  SCOPED_TRACE(w_stored_nk ? "W stored (N,K)" : "W stored (K,N)");
  std::mt19937 rng(72);
  const int64_t M = 7, K = 6, N = 5;
  const Vec x = RandomVec(rng, M * K, -1, 1), w = RandomVec(rng, K * N, -1, 1);
  const Vec b = RandomVec(rng, N, -1, 1), r = RandomVec(rng, M * N, -1, 1);
  const Vec64 x64 = Widen(x), w64 = Widen(w), b64 = Widen(b);
  const MatmulShape fwd{M, N, K, false, w_stored_nk, false, true};
  auto ref = [&](const Vec64& xv, const Vec64& wv, const Vec64& bv) {
    return Dot(RefMatmul(fwd, xv, wv, &bv, nullptr), r);
  };

  Vec y(M * N, kGarbage);
  matmul(fwd, x.data(), w.data(), y.data(), b.data());
  EXPECT_TRUE(Near(y, RefMatmul(fwd, x64, w64, &b64, nullptr), kFwdTol)) << "y";

  const Vec dw0 = RandomVec(rng, K * N, -1, 1), db0 = RandomVec(rng, N, -1, 1);
  Vec dx(M * K, kGarbage), dw = dw0, db = db0;
  if (w_stored_nk) {
    matmul(MatmulShape{N, K, M, true, false, true, false}, r.data(), x.data(), dw.data());
    matmul(MatmulShape{M, K, N, false, false, false, false}, r.data(), w.data(), dx.data());
  } else {
    matmul(MatmulShape{K, N, M, true, false, true, false}, x.data(), r.data(), dw.data());
    matmul(MatmulShape{M, K, N, false, true, false, false}, r.data(), w.data(), dx.data());
  }
  bias_backward(db.data(), r.data(), M, static_cast<int>(N));

  const Vec64 gx = FiniteDiff([&](const Vec64& v) { return ref(v, w64, b64); }, x64);
  const Vec64 gw = FiniteDiff([&](const Vec64& v) { return ref(x64, v, b64); }, w64);
  const Vec64 gb = FiniteDiff([&](const Vec64& v) { return ref(x64, w64, v); }, b64);
  EXPECT_TRUE(Near(dx, gx, kGradTol)) << "dx";
  EXPECT_TRUE(Near(dw, dw0, gw, kGradTol)) << "dw";
  EXPECT_TRUE(Near(db, db0, gb, kGradTol)) << "db";
}

TEST(KernelMatmul, TransposedProductsGiveFloat64FiniteDifferenceGradients) {
  CheckLinearGradients(false);
  CheckLinearGradients(true);
}

// ---- AdamW ------------------------------------------------------------------------------------

struct AdamWState {
  Vec64 p, m, v;
};

// torch.optim.AdamW (foreach=False, amsgrad=False) for one step, in float64:
//   param.mul_(1 - lr * weight_decay)
//   exp_avg.lerp_(grad, 1 - beta1)
//   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
//   step_size = lr / (1 - beta1 ** step)
//   denom = (exp_avg_sq.sqrt() / sqrt(1 - beta2 ** step)).add_(eps)
//   param.addcdiv_(exp_avg, denom, value=-step_size)
// with grad = g * grad_scale (kiln's on-the-fly clipping).
AdamWState RefAdamW(AdamWState s, const Vec& g, const AdamWParams& a) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  const double t = static_cast<double>(a.t);
  const double step_size = lr / (1.0 - std::pow(b1, t));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(b2, t));
  for (size_t i = 0; i < s.p.size(); i++) {
    const double grad = static_cast<double>(g[i]) * static_cast<double>(a.grad_scale);
    s.p[i] *= 1.0 - lr * wd;
    s.m[i] += (grad - s.m[i]) * (1.0 - b1);
    s.v[i] = s.v[i] * b2 + (1.0 - b2) * grad * grad;
    const double denom = std::sqrt(s.v[i]) / bc2_sqrt + eps;
    s.p[i] += -step_size * s.m[i] / denom;
  }
  return s;
}

TEST(KernelAdamW, UpdateMatchesFloat64PyTorchFormulas) {
  std::mt19937 rng(81);
  const int n = 64;
  Vec p = RandomVec(rng, n, -1, 1), m(n, 0.0f), v(n, 0.0f);
  for (int64_t t : {1, 2, 3, 4, 5, 1000}) {
    SCOPED_TRACE("t=" + std::to_string(t));
    Vec g = RandomVec(rng, n, -1, 1);
    g[0] = 0.0f;   // no gradient: decay only
    g[1] = 1e-8f;  // tiny gradients: eps dominates the denominator
    g[2] = -3e-8f;
    const AdamWParams a{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t};
    const AdamWState want = RefAdamW({Widen(p), Widen(m), Widen(v)}, g, a);
    const Vec p_before = p;
    // The same update with the bf16 copy written in the same pass: same p, m, v bits.
    Vec p2 = p, m2 = m, v2 = v;
    std::vector<bf16> pb(n);
    adamw_update(p2.data(), g.data(), m2.data(), v2.data(), n, a, pb.data());
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
    EXPECT_TRUE(SameBits(p, p2) && SameBits(m, m2) && SameBits(v, v2));
    for (int i = 0; i < n; i++) ASSERT_EQ(pb[i], float_to_bf16(p[i])) << i;
    // Compare the step taken rather than the parameters, so errors in it are not hidden by |p|.
    Vec64 want_step(n);
    for (int i = 0; i < n; i++) want_step[i] = want.p[i] - p_before[i];
    EXPECT_TRUE(Near(p, p_before, want_step, kGradTol)) << "p";
    EXPECT_TRUE(Near(m, want.m, kFwdTol)) << "m";
    EXPECT_TRUE(Near(v, want.v, kFwdTol)) << "v";
    // The tiny-gradient elements alone, relative to their own step.
    for (int i = 1; i <= 2; i++) {
      EXPECT_NEAR(p[i] - p_before[i], want_step[i], 1e-3 * std::fabs(want_step[i])) << i;
    }
  }
}

// ---- sum of squares and elementwise -----------------------------------------------------------

TEST(KernelSumSquares, MatchesFloat64SumAcrossChunks) {
  std::mt19937 rng(91);
  const Vec x = RandomVec(rng, 3 * 65536 + 17, -2, 2);
  for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{65536}, static_cast<int64_t>(x.size())}) {
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += static_cast<double>(x[i]) * x[i];
    EXPECT_NEAR(sum_squares(x.data(), n), want, 1e-12 * want) << "n=" << n;
  }
}

TEST(KernelSumSquares, IsBitwiseIdenticalAcrossThreadCounts) {
  std::mt19937 rng(92);
  const Vec x = RandomVec(rng, 5 * 65536 + 3, -2, 2);
  double one, two;
  {
    ThreadCount tc(1);
    one = sum_squares(x.data(), static_cast<int64_t>(x.size()));
  }
  {
    ThreadCount tc(2);
    two = sum_squares(x.data(), static_cast<int64_t>(x.size()));
  }
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0) << one << " vs " << two;
}

TEST(KernelElementwise, AddCopyScaleMatchFloat64) {
  std::mt19937 rng(93);
  const int n = 33;
  const Vec x = RandomVec(rng, n, -1, 1), y0 = RandomVec(rng, n, -1, 1);
  Vec y = y0;
  add_inplace(y.data(), x.data(), n);
  for (int i = 0; i < n; i++) {
    EXPECT_FLOAT_EQ(y[i], static_cast<double>(y0[i]) + static_cast<double>(x[i])) << i;
  }
  scale_inplace(y.data(), -0.75f, n);
  for (int i = 0; i < n; i++) {
    EXPECT_FLOAT_EQ(y[i], (static_cast<double>(y0[i]) + static_cast<double>(x[i])) * -0.75) << i;
  }
  copy(y.data(), x.data(), n);
  EXPECT_TRUE(SameBits(y, x));
}

}  // namespace
}  // namespace kiln
