#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/error.h"
#include "kernels/kernels.h"

namespace kiln {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool, bool>;

// A primitive with its memory objects and argument map, built once per shape: a call only swaps
// the data pointers in.
struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias;
  std::unordered_map<int, dnnl::memory> args;
};

using StridedKey = std::array<int64_t, 18>;

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Primitive> cache;
  std::map<StridedKey, Primitive> strided;
  std::mutex mu;
  // CPUs without avx512_bf16 or AMX: oneDNN has no bf16 matmul there, so the bf16 operands are
  // widened to fp32 (exactly) and multiplied in fp32 — the same mixed-precision arithmetic
  // (bf16-rounded operands, fp32 accumulation), at fp32 speed.
  int bf16_native = -1;  // unknown until the first bf16 product
  std::vector<float> wide_a, wide_b;
};

void widen(const void* src, int64_t n, std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(n));
  const bf16* s = static_cast<const bf16*>(src);
  float* d = dst.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) d[i] = bf16_to_float(s[i]);
}

Engine& engine() {
  static Engine e;
  return e;
}

// Accumulate into C (C += A·B): oneDNN's sum post-op; otherwise C is overwritten.
dnnl::primitive_attr sum_attr(bool accumulate) {
  dnnl::primitive_attr attr;
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  return attr;
}

Primitive make_primitive(Engine& e, const MatmulShape& s, bool bf16_operands) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  const dt in = bf16_operands ? dt::bf16 : dt::f32;
  dnnl::memory::desc a_md(dims{s.M, s.K}, in, s.trans_a ? dims{1, s.M} : dims{s.K, 1});
  dnnl::memory::desc b_md(dims{s.K, s.N}, in, s.trans_b ? dims{1, s.K} : dims{s.N, 1});
  dnnl::memory::desc c_md(dims{s.M, s.N}, dt::f32, dims{s.N, 1});
  const dnnl::primitive_attr attr = sum_attr(s.accumulate);
  Primitive p;
  if (s.bias) {
    dnnl::memory::desc bias_md(dims{1, s.N}, dt::f32, dims{s.N, 1});
    p.pd =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, e.engine);
  } else {
    p.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine);
  }
  p.prim = dnnl::matmul(p.pd);
  p.a = dnnl::memory(p.pd.src_desc(), e.engine, DNNL_MEMORY_NONE);
  p.b = dnnl::memory(p.pd.weights_desc(), e.engine, DNNL_MEMORY_NONE);
  p.c = dnnl::memory(p.pd.dst_desc(), e.engine, DNNL_MEMORY_NONE);
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  if (s.bias) {
    p.bias = dnnl::memory(p.pd.bias_desc(), e.engine, DNNL_MEMORY_NONE);
    p.args.emplace(DNNL_ARG_BIAS, p.bias);
  }
  return p;
}

Primitive make_strided_primitive(Engine& e, const StridedMatmul& s) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  auto md = [](int64_t rows, int64_t cols, const int64_t* st, const StridedMatmul& s) {
    return dnnl::memory::desc(dims{s.batch0, s.batch1, rows, cols}, dt::f32,
                              dims{st[0], st[1], st[2], st[3]});
  };
  const dnnl::primitive_attr attr = sum_attr(s.accumulate);
  Primitive p;
  p.pd = dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(md(s.M, s.K, s.a, s), md(s.K, s.N, s.b, s), md(s.M, s.N, s.c, s)), attr,
      e.engine);
  p.prim = dnnl::matmul(p.pd);
  p.a = dnnl::memory(p.pd.src_desc(), e.engine, DNNL_MEMORY_NONE);
  p.b = dnnl::memory(p.pd.weights_desc(), e.engine, DNNL_MEMORY_NONE);
  p.c = dnnl::memory(p.pd.dst_desc(), e.engine, DNNL_MEMORY_NONE);
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  return p;
}

void run(const MatmulShape& s, bool bf16_operands, const void* a, const void* b, float* c,
         const float* bias) {
  KILN_CHECK(s.bias == (bias != nullptr));
  Engine& e = engine();
  Key key{s.M, s.N, s.K, s.trans_a, s.trans_b, s.accumulate, s.bias, bf16_operands};
  // The lock covers the call: the cached memory objects are shared state.
  std::lock_guard<std::mutex> lock(e.mu);
  if (bf16_operands && e.bf16_native < 0) {
    try {
      make_primitive(e, s, true);
      e.bf16_native = 1;
    } catch (const dnnl::error&) {
      e.bf16_native = 0;
    }
  }
  if (bf16_operands && e.bf16_native == 0) {
    widen(a, s.M * s.K, e.wide_a);
    widen(b, s.K * s.N, e.wide_b);
    a = e.wide_a.data();
    b = e.wide_b.data();
    bf16_operands = false;
    std::get<7>(key) = false;
  }
  auto it = e.cache.find(key);
  if (it == e.cache.end()) it = e.cache.emplace(key, make_primitive(e, s, bf16_operands)).first;
  Primitive& p = it->second;
  p.a.set_data_handle(const_cast<void*>(a));
  p.b.set_data_handle(const_cast<void*>(b));
  p.c.set_data_handle(c);
  if (bias) p.bias.set_data_handle(const_cast<float*>(bias));
  p.prim.execute(e.stream, p.args);
  e.stream.wait();
}

}  // namespace

void matmul_strided(const StridedMatmul& s, const float* a, const float* b, float* c) {
  Engine& e = engine();
  StridedKey key{s.batch0, s.batch1, s.M,    s.N,    s.K,    s.a[0], s.a[1], s.a[2], s.a[3],
                 s.b[0],   s.b[1],   s.b[2], s.b[3], s.c[0], s.c[1], s.c[2], s.c[3], s.accumulate};
  std::lock_guard<std::mutex> lock(e.mu);
  auto it = e.strided.find(key);
  if (it == e.strided.end()) it = e.strided.emplace(key, make_strided_primitive(e, s)).first;
  Primitive& p = it->second;
  p.a.set_data_handle(const_cast<float*>(a));
  p.b.set_data_handle(const_cast<float*>(b));
  p.c.set_data_handle(c);
  p.prim.execute(e.stream, p.args);
  e.stream.wait();
}

void matmul(const MatmulShape& s, const float* a, const float* b, float* c, const float* bias) {
  run(s, false, a, b, c, bias);
}

void matmul_bf16(const MatmulShape& s, const bf16* a, const bf16* b, float* c, const float* bias) {
  run(s, true, a, b, c, bias);
}

bool matmul_bf16_native() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mu);
  if (e.bf16_native < 0) {
    try {
      make_primitive(e, MatmulShape{64, 64, 64}, true);
      e.bf16_native = 1;
    } catch (const dnnl::error&) {
      e.bf16_native = 0;
    }
  }
  return e.bf16_native == 1;
}

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

double measure_peak_gflops(double seconds, bool bf16_operands, int rounds) {
  rounds = std::max(1, rounds);
  // One probe per shape, its operands made once (in the dtype measured only).
  struct Probe {
    MatmulShape s;
    Buffer<float> a, b, c;
    Buffer<bf16> ab, bb;
  };
  const int64_t shapes[][3] = {{1024, 1024, 1024}, {512, 3072, 768}, {2048, 768, 3072}};
  std::vector<std::unique_ptr<Probe>> probes;
  for (auto& sh : shapes) {
    auto p = std::make_unique<Probe>();
    p->s = MatmulShape{sh[0], sh[1], sh[2]};
    const MatmulShape& s = p->s;
    Buffer<float> a(s.M * s.K), b(s.K * s.N);
    for (size_t i = 0; i < a.size(); i++) a[i] = static_cast<float>(i % 7) * 0.01f;
    for (size_t i = 0; i < b.size(); i++) b[i] = static_cast<float>(i % 5) * 0.01f;
    if (bf16_operands) {
      p->ab.resize(a.size());
      p->bb.resize(b.size());
      to_bf16(p->ab.data(), a.data(), static_cast<int64_t>(a.size()));
      to_bf16(p->bb.data(), b.data(), static_cast<int64_t>(b.size()));
    } else {
      p->a = std::move(a);
      p->b = std::move(b);
    }
    p->c.resize(s.M * s.N);
    probes.push_back(std::move(p));
  }
  auto once = [&](Probe& p) {
    if (bf16_operands)
      matmul_bf16(p.s, p.ab.data(), p.bb.data(), p.c.data());
    else
      matmul(p.s, p.a.data(), p.b.data(), p.c.data());
  };
  for (auto& p : probes) once(*p);  // warm-up: primitive creation, page faults
  // Rounds across the shapes: a moment of load elsewhere on the machine then shrinks some
  // rounds, not the best one.
  const double slot = seconds / rounds;
  const size_t min_reps = rounds == 1 ? 3 : 1;
  double best = 0;
  for (int r = 0; r < rounds; r++)
    for (auto& p : probes) {
      const double flops = 2.0 * p->s.M * p->s.N * p->s.K;
      const double t0 = now_seconds();
      for (size_t reps = 0; now_seconds() - t0 < slot || reps < min_reps; reps++) {
        const double t = now_seconds();
        once(*p);
        best = std::max(best, flops / (now_seconds() - t) * 1e-9);
      }
    }
  return best;
}

}  // namespace kiln
