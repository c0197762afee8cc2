// Grouped-query attention (NKV key/value heads shared by NH query heads) against a float64
// reference and finite differences; against multi-head attention with each kv head repeated
// (Hugging Face's repeat_kv); the standard and flash kernels against each other; the same bits
// for any thread count; and, with NKV == NH, GPT-2's kernels' bits.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_check.h"
#include "kernels/kernels.h"

namespace kiln {
namespace {

using namespace kernel_test;

struct Heads {
  int B, T, NH, NKV, hs;
  int ld() const { return (NH + 2 * NKV) * hs; }
  int Cq() const { return NH * hs; }
  size_t qkv_size() const { return static_cast<size_t>(B) * T * ld(); }
  size_t out_size() const { return static_cast<size_t>(B) * T * Cq(); }
  std::string name() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
           " NKV=" + std::to_string(NKV) + " hs=" + std::to_string(hs);
  }
};

// out (B,T,NH*hs), lse (B,NH,T): query head h against kv head h / (NH/NKV), causal.
struct GqaRef {
  Vec64 out, lse;
};

GqaRef RefGqa(const Vec64& qkv, const Heads& k) {
  const int G = k.NH / k.NKV, ld = k.ld(), hs = k.hs;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  GqaRef r{Vec64(k.out_size(), 0.0), Vec64(static_cast<size_t>(k.B) * k.NH * k.T)};
  auto at = [&](int b, int t, int col) {
    return qkv[(static_cast<size_t>(b) * k.T + t) * ld + col];
  };
  for (int b = 0; b < k.B; b++)
    for (int h = 0; h < k.NH; h++) {
      const int qc = h * hs, kc = k.Cq() + (h / G) * hs, vc = k.Cq() + (k.NKV + h / G) * hs;
      for (int t = 0; t < k.T; t++) {
        Vec64 s(t + 1);
        double maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          double dot = 0;
          for (int i = 0; i < hs; i++) dot += at(b, t, qc + i) * at(b, t2, kc + i);
          s[t2] = dot * scale;
          maxv = std::max(maxv, s[t2]);
        }
        double sum = 0;
        for (int t2 = 0; t2 <= t; t2++) sum += std::exp(s[t2] - maxv);
        for (int i = 0; i < hs; i++) {
          double o = 0;
          for (int t2 = 0; t2 <= t; t2++) o += std::exp(s[t2] - maxv) / sum * at(b, t2, vc + i);
          r.out[(static_cast<size_t>(b) * k.T + t) * k.Cq() + qc + i] = o;
        }
        r.lse[(static_cast<size_t>(b) * k.NH + h) * k.T + t] = std::log(sum) + maxv;
      }
    }
  return r;
}

struct Outputs {
  Vec out, aux, dqkv;  // aux: att (standard) or lse (flash)
};

Outputs Standard(const Vec& qkv, const Vec& dout, const Heads& k) {
  Outputs r{Vec(k.out_size(), kGarbage), Vec(static_cast<size_t>(k.B) * k.NH * k.T * k.T, kGarbage),
            Vec(qkv.size(), kGarbage)};
  Vec datt(r.aux.size(), kGarbage);
  attention_forward_gqa(r.out.data(), r.aux.data(), qkv.data(), k.B, k.T, k.NH, k.NKV, k.hs);
  attention_backward_gqa(r.dqkv.data(), datt.data(), dout.data(), qkv.data(), r.aux.data(), k.B,
                         k.T, k.NH, k.NKV, k.hs);
  return r;
}

Outputs Flash(const Vec& qkv, const Vec& dout, const Heads& k) {
  Outputs r{Vec(k.out_size(), kGarbage), Vec(static_cast<size_t>(k.B) * k.NH * k.T, kGarbage),
            Vec(qkv.size(), kGarbage)};
  Vec scratch(attention_flash_scratch_floats(k.B, k.T, k.NH), kGarbage);
  attention_forward_flash_gqa(r.out.data(), r.aux.data(), scratch.data(), qkv.data(), k.B, k.T,
                              k.NH, k.NKV, k.hs);
  attention_backward_flash_gqa(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.out.data(),
                               r.aux.data(), k.B, k.T, k.NH, k.NKV, k.hs);
  return r;
}

void CheckGqa(const Heads& k) {
  SCOPED_TRACE(k.name());
  std::mt19937 rng(201);
  const Vec qkv = RandomVec(rng, k.qkv_size(), -1.5f, 1.5f),
            r = RandomVec(rng, k.out_size(), -1, 1);
  const Vec64 qkv64 = Widen(qkv);
  const GqaRef ref = RefGqa(qkv64, k);
  const Vec64 g = FiniteDiff([&](const Vec64& v) { return Dot(RefGqa(v, k).out, r); }, qkv64);
  const Outputs s = Standard(qkv, r, k), f = Flash(qkv, r, k);
  EXPECT_TRUE(Near(s.out, ref.out, kFwdTol)) << "standard out";
  EXPECT_TRUE(Near(s.dqkv, g, kGradTol)) << "standard dqkv";
  EXPECT_TRUE(Near(f.out, ref.out, kFwdTol)) << "flash out";
  EXPECT_TRUE(Near(f.aux, ref.lse, kFwdTol)) << "flash lse";
  EXPECT_TRUE(Near(f.dqkv, g, kGradTol)) << "flash dqkv";
  EXPECT_TRUE(Near(f.out, Widen(s.out), kFwdTol)) << "flash vs standard out";
  EXPECT_TRUE(Near(f.dqkv, Widen(s.dqkv), kFwdTol * 10)) << "flash vs standard dqkv";
}

TEST(KernelAttentionGqa, ForwardAndBackwardMatchFloat64ReferenceAndFiniteDifferences) {
  CheckGqa({2, 5, 6, 2, 6});   // GQA, hs = 6
  CheckGqa({1, 19, 4, 1, 8});  // MQA, T not a multiple of 16
  CheckGqa({1, 7, 3, 3, 6});   // MHA
  CheckGqa({1, 37, 6, 3, 5});  // odd head size, softmax rows with a 16-lane vector and a tail
}

// qkv with every kv head repeated NH/NKV times: the multi-head layout (B,T,3*NH*hs).
Vec RepeatKv(const Vec& qkv, const Heads& k) {
  const int G = k.NH / k.NKV, hs = k.hs, Cq = k.Cq();
  Vec m(static_cast<size_t>(k.B) * k.T * 3 * Cq);
  for (int64_t row = 0; row < int64_t{k.B} * k.T; row++) {
    const float* src = &qkv[row * k.ld()];
    float* dst = &m[row * 3 * Cq];
    for (int i = 0; i < Cq; i++) dst[i] = src[i];
    for (int h = 0; h < k.NH; h++)
      for (int i = 0; i < hs; i++) {
        dst[Cq + h * hs + i] = src[Cq + (h / G) * hs + i];
        dst[2 * Cq + h * hs + i] = src[Cq + (k.NKV + h / G) * hs + i];
      }
  }
  return m;
}

// The multi-head gradient folded back: a kv head's gradient is the sum over its repeats.
Vec64 FoldKv(const Vec& dm, const Heads& k) {
  const int G = k.NH / k.NKV, hs = k.hs, Cq = k.Cq();
  Vec64 d(k.qkv_size(), 0.0);
  for (int64_t row = 0; row < int64_t{k.B} * k.T; row++) {
    const float* src = &dm[row * 3 * Cq];
    double* dst = &d[row * k.ld()];
    for (int i = 0; i < Cq; i++) dst[i] = src[i];
    for (int h = 0; h < k.NH; h++)
      for (int i = 0; i < hs; i++) {
        dst[Cq + (h / G) * hs + i] += src[Cq + h * hs + i];
        dst[Cq + (k.NKV + h / G) * hs + i] += src[2 * Cq + h * hs + i];
      }
  }
  return d;
}

TEST(KernelAttentionGqa, EqualsMultiHeadAttentionWithRepeatedKvHeads) {
  // T = 150: two flash blocks of queries and keys, the second ragged.
  for (const Heads k : {Heads{2, 150, 6, 2, 8}, Heads{1, 150, 4, 1, 16}, Heads{2, 33, 8, 2, 6}}) {
    SCOPED_TRACE(k.name());
    std::mt19937 rng(202);
    const Vec qkv = RandomVec(rng, k.qkv_size(), -1.5f, 1.5f);
    const Vec dout = RandomVec(rng, k.out_size(), -1, 1);
    const Vec mqkv = RepeatKv(qkv, k);
    const int C = k.Cq();
    {  // and the two GQA kernels against each other, over several flash blocks
      const Outputs s = Standard(qkv, dout, k), f = Flash(qkv, dout, k);
      EXPECT_TRUE(Near(f.out, Widen(s.out), kFwdTol)) << "flash vs standard out";
      EXPECT_TRUE(Near(f.dqkv, Widen(s.dqkv), kFwdTol * 10)) << "flash vs standard dqkv";
    }
    for (bool flash : {false, true}) {
      SCOPED_TRACE(flash ? "flash" : "standard");
      const Outputs g = flash ? Flash(qkv, dout, k) : Standard(qkv, dout, k);
      Vec out(k.out_size()), dm(mqkv.size());
      if (flash) {
        Vec lse(static_cast<size_t>(k.B) * k.NH * k.T);
        Vec scratch(attention_flash_scratch_floats(k.B, k.T, k.NH));
        attention_forward_flash(out.data(), lse.data(), scratch.data(), mqkv.data(), k.B, k.T, C,
                                k.NH);
        attention_backward_flash(dm.data(), scratch.data(), dout.data(), mqkv.data(), out.data(),
                                 lse.data(), k.B, k.T, C, k.NH);
        EXPECT_TRUE(Near(g.aux, Widen(lse), 1e-6)) << "lse";
      } else {
        Vec att(static_cast<size_t>(k.B) * k.NH * k.T * k.T), datt(att.size());
        attention_forward(out.data(), att.data(), mqkv.data(), k.B, k.T, C, k.NH);
        attention_backward(dm.data(), datt.data(), dout.data(), mqkv.data(), att.data(), k.B, k.T,
                           C, k.NH);
        EXPECT_TRUE(Near(g.aux, Widen(att), 1e-6)) << "att";
      }
      EXPECT_TRUE(Near(g.out, Widen(out), 1e-6)) << "out";
      EXPECT_TRUE(Near(g.dqkv, FoldKv(dm, k), 1e-6)) << "dqkv";
    }
  }
}

TEST(KernelAttentionGqa, DecodeMatchesTheLastRowOfTheForward) {
  for (const Heads k : {Heads{1, 23, 6, 2, 6}, Heads{1, 40, 4, 1, 32}, Heads{1, 9, 3, 3, 8}}) {
    SCOPED_TRACE(k.name());
    std::mt19937 rng(203);
    const Vec qkv = RandomVec(rng, k.qkv_size(), -1.5f, 1.5f);
    const Outputs s = Standard(qkv, Vec(k.out_size(), 0.0f), k);
    const int kv = k.NKV * k.hs;
    Vec kc(static_cast<size_t>(k.T) * kv), vc(kc.size());
    for (int t = 0; t < k.T; t++)
      for (int i = 0; i < kv; i++) {
        kc[t * kv + i] = qkv[t * k.ld() + k.Cq() + i];
        vc[t * kv + i] = qkv[t * k.ld() + k.Cq() + kv + i];
      }
    for (int n : {1, k.T / 2, k.T}) {
      Vec out(k.Cq(), kGarbage), scores(n, kGarbage);
      attention_decode_gqa(out.data(), scores.data(), &qkv[(n - 1) * k.ld()], kc.data(), vc.data(),
                           n, k.NH, k.NKV, k.hs);
      const Vec want(s.out.begin() + (n - 1) * k.Cq(), s.out.begin() + n * k.Cq());
      EXPECT_TRUE(Near(out, Widen(want), kFwdTol)) << "n=" << n;
    }
  }
}

TEST(KernelAttentionGqa, SameBitsAcrossRunsAndThreadCounts) {
  for (const Heads k : {Heads{2, 16, 6, 2, 8}, Heads{1, 300, 8, 2, 32}, Heads{1, 200, 4, 1, 64}}) {
    SCOPED_TRACE(k.name());
    std::mt19937 rng(204);
    const Vec qkv = RandomVec(rng, k.qkv_size(), -1.5f, 1.5f);
    const Vec dout = RandomVec(rng, k.out_size(), -1, 1);
    ExpectSameBitsOnOneAndTwoThreads([&](int threads) {
      ThreadCount tc(threads);
      const Outputs s = Standard(qkv, dout, k), f = Flash(qkv, dout, k);
      Vec all = s.out;
      for (const Vec* v : {&s.dqkv, &f.out, &f.aux, &f.dqkv})
        all.insert(all.end(), v->begin(), v->end());
      return all;
    });
  }
}

// With NKV == NH the general kernels are GPT-2's: the same bits, at GPT-2 small's head shape.
TEST(KernelAttentionGqa, MultiHeadFormGivesGpt2KernelsBits) {
  for (const Heads k : {Heads{2, 64, 12, 12, 64}, Heads{1, 300, 12, 12, 64},
                        Heads{4, 256, 12, 12, 64}, Heads{3, 37, 3, 3, 4}}) {
    SCOPED_TRACE(k.name());
    const int B = k.B, T = k.T, C = k.Cq(), NH = k.NH;
    std::mt19937 rng(205);
    const Vec qkv = RandomVec(rng, k.qkv_size(), -1.5f, 1.5f);
    const Vec dout = RandomVec(rng, k.out_size(), -1, 1);
    const Outputs s = Standard(qkv, dout, k), f = Flash(qkv, dout, k);
    Vec out(k.out_size()), att(static_cast<size_t>(B) * NH * T * T), datt(att.size()),
        dqkv(qkv.size());
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    EXPECT_TRUE(SameBits(s.out, out)) << "standard out";
    EXPECT_TRUE(SameBits(s.aux, att)) << "att";
    EXPECT_TRUE(SameBits(s.dqkv, dqkv)) << "standard dqkv";
    Vec lse(static_cast<size_t>(B) * NH * T), scratch(attention_flash_scratch_floats(B, T, NH));
    attention_forward_flash(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
    attention_backward_flash(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(),
                             lse.data(), B, T, C, NH);
    EXPECT_TRUE(SameBits(f.out, out)) << "flash out";
    EXPECT_TRUE(SameBits(f.aux, lse)) << "lse";
    EXPECT_TRUE(SameBits(f.dqkv, dqkv)) << "flash dqkv";
    // decode: row n-1 against the cached k and v of the rows before it
    const int n = T / 2;
    Vec kc(static_cast<size_t>(T) * C), vc(kc.size());
    for (int t = 0; t < T; t++)
      for (int i = 0; i < C; i++) {
        kc[t * C + i] = qkv[t * 3 * C + C + i];
        vc[t * C + i] = qkv[t * 3 * C + 2 * C + i];
      }
    Vec o1(C), o2(C), sc(n);
    attention_decode(o1.data(), sc.data(), &qkv[(n - 1) * 3 * C], kc.data(), vc.data(), n, C, NH);
    attention_decode_gqa(o2.data(), sc.data(), &qkv[(n - 1) * 3 * C], kc.data(), vc.data(), n, NH,
                         NH, k.hs);
    EXPECT_TRUE(SameBits(o1, o2)) << "decode";
  }
}

}  // namespace
}  // namespace kiln
