#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/error.h"

namespace kiln {
namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool>;

struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Primitive> cache;
  std::mutex mu;
};

Engine& engine() {
  static Engine e;
  return e;
}

Primitive make_primitive(Engine& e, const MatmulShape& s) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  dnnl::memory::desc a_md(dims{s.M, s.K}, dt::f32, s.trans_a ? dims{1, s.M} : dims{s.K, 1});
  dnnl::memory::desc b_md(dims{s.K, s.N}, dt::f32, s.trans_b ? dims{1, s.K} : dims{s.N, 1});
  dnnl::memory::desc c_md(dims{s.M, s.N}, dt::f32, dims{s.N, 1});
  dnnl::primitive_attr attr;
  if (s.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  if (s.bias) {
    dnnl::memory::desc bias_md(dims{1, s.N}, dt::f32, dims{s.N, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, e.engine);
    return {pd, dnnl::matmul(pd)};
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, e.engine);
  return {pd, dnnl::matmul(pd)};
}

}  // namespace

void matmul(const MatmulShape& s, const float* a, const float* b, float* c, const float* bias) {
  KILN_CHECK(s.bias == (bias != nullptr));
  Engine& e = engine();
  Key key{s.M, s.N, s.K, s.trans_a, s.trans_b, s.accumulate, s.bias};
  Primitive* p;
  {
    std::lock_guard<std::mutex> lock(e.mu);
    auto it = e.cache.find(key);
    if (it == e.cache.end()) it = e.cache.emplace(key, make_primitive(e, s)).first;
    p = &it->second;
  }
  const auto& pd = p->pd;
  dnnl::memory am(pd.src_desc(), e.engine, const_cast<float*>(a));
  dnnl::memory bm(pd.weights_desc(), e.engine, const_cast<float*>(b));
  dnnl::memory cm(pd.dst_desc(), e.engine, c);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  if (bias) {
    dnnl::memory biasm(pd.bias_desc(), e.engine, const_cast<float*>(bias));
    args.emplace(DNNL_ARG_BIAS, biasm);
  }
  p->prim.execute(e.stream, args);
  e.stream.wait();
}

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

double measure_peak_gflops(double seconds) {
  double best = 0;
  const int64_t shapes[][3] = {{1024, 1024, 1024}, {512, 3072, 768}, {2048, 768, 3072}};
  for (auto& sh : shapes) {
    MatmulShape s{sh[0], sh[1], sh[2]};
    Buffer<float> a(s.M * s.K), b(s.K * s.N), c(s.M * s.N);
    for (size_t i = 0; i < a.size(); i++) a[i] = static_cast<float>(i % 7) * 0.01f;
    for (size_t i = 0; i < b.size(); i++) b[i] = static_cast<float>(i % 5) * 0.01f;
    matmul(s, a.data(), b.data(), c.data());  // warm-up, primitive creation
    double flops = 2.0 * s.M * s.N * s.K;
    double t0 = now_seconds();
    std::vector<double> rates;
    while (now_seconds() - t0 < seconds || rates.size() < 3) {
      double t = now_seconds();
      matmul(s, a.data(), b.data(), c.data());
      rates.push_back(flops / (now_seconds() - t) * 1e-9);
    }
    best = std::max(best, *std::max_element(rates.begin(), rates.end()));
  }
  return best;
}

}  // namespace kiln
