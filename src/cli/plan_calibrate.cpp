// `kiln plan --calibrate`: measures this machine (matmul rates fp32 and bf16, memory and cache
// bandwidth, per-kernel overhead) and writes a hardware file the planner reads.
#include "cli/plan_calibrate.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "plan/hardware.h"

namespace fs = std::filesystem;

namespace kiln::cli {
namespace {

using namespace kiln::plan;

// ---- calibration: measure this machine ----

// The best (shortest) time of `fn` over about `seconds`, at least `min_reps` runs.
template <typename Fn>
double best_time(Fn fn, double seconds, int min_reps) {
  fn();  // warm-up: primitive creation, page faults
  double best = 1e30, start = now_seconds();
  for (int i = 0; i < min_reps || now_seconds() - start < seconds; i++) {
    double t = now_seconds();
    fn();
    best = std::min(best, now_seconds() - t);
  }
  return best;
}

// The best time of each named measurement over several rounds: a round disturbed by another
// process on the cores is outvoted by the others.
class Timings {
 public:
  template <typename Fn>
  double best(const std::string& key, Fn fn, double seconds, int min_reps) {
    double t = best_time(fn, seconds, min_reps);
    auto [it, fresh] = best_.try_emplace(key, t);
    if (!fresh) it->second = std::min(it->second, t);
    return it->second;
  }

 private:
  std::map<std::string, double> best_;
};

struct Calibration {
  DeviceSpec device;
  std::vector<std::string> lines;  // what was measured, for the file's comment and the screen
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

// Whether /proc/cpuinfo lists `flag` for the first CPU.
bool cpu_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0)
      return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

double llc_mib() {
  for (int idx = 3; idx >= 2; idx--) {
    std::ifstream f(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", idx));
    std::string s;
    if (f >> s && !s.empty()) {
      double v = std::atof(s.c_str());
      if (s.back() == 'K') v /= 1024;
      if (s.back() == 'M') v *= 1;
      return v;
    }
  }
  return 0;
}

// a = b + s·c over n floats with all threads; bytes counted as STREAM counts them (12 per
// element: two reads and a write).
double triad_gbs(int64_t n, double seconds, Timings& timings, const std::string& key) {
  Buffer<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) a[i] = 0, b[i] = 1, c[i] = 2;
  float* pa = a.data();
  const float *pb = b.data(), *pc = c.data();
  double t = timings.best(
      key,
      [&] {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) pa[i] = pb[i] + 0.5f * pc[i];
      },
      seconds, 5);
  return 12.0 * n / t * 1e-9;
}

Calibration measure(double seconds, int rounds) {
  Timings timings;
  Calibration cal;
  for (int round = 0; round < rounds; round++) {
    cal = Calibration{};
    DeviceSpec d = find_device("cpu");
    d.name = "this-cpu";
    d.description =
        fmt::format("{}, {} threads, one kiln process", cpu_model_name(), num_threads());

    // The matmuls a GPT-2 step runs, as kiln runs them (weights stored (in, out)): forward
    // y = x·W, backward dx = dy·Wᵀ and dW = xᵀ·dy, and the LM head against the (Vp, C) embedding,
    // for GPT-2 124M at B·T = 256 and configs/small.toml at B·T = 1024; fitted to
    // t = overhead + FLOPs / rate (Hockney's linear timing model) on relative error.
    struct Shape {
      int64_t M, N, K;
      bool ta, tb;
    };
    const Shape shapes[] = {{256, 2304, 768, false, false},   {256, 768, 768, false, false},
                            {256, 3072, 768, false, false},   {256, 768, 3072, false, false},
                            {256, 768, 2304, false, true},    {256, 3072, 768, false, true},
                            {768, 2304, 256, true, false},    {3072, 768, 256, true, false},
                            {1024, 768, 256, false, false},   {1024, 256, 1024, false, false},
                            {1024, 256, 768, false, true},    {256, 1024, 1024, true, false},
                            {256, 50304, 768, false, true},   {256, 768, 50304, false, false},
                            {50304, 768, 256, true, false},   {1024, 50304, 256, false, true},
                            {1024, 256, 50304, false, false}, {50304, 256, 1024, true, false},
                            {128, 128, 128, false, false},    {512, 512, 512, false, false},
                            {1024, 1024, 1024, false, false}};
    std::vector<std::pair<double, double>> samples;  // (FLOPs, seconds)
    double peak = 0;
    for (const Shape& sh : shapes) {
      MatmulShape s{sh.M, sh.N, sh.K, sh.ta, sh.tb};
      Buffer<float> a(s.M * s.K), b(s.K * s.N), c(s.M * s.N);
      for (size_t i = 0; i < a.size(); i++) a[i] = float(i % 7) * 0.01f;
      for (size_t i = 0; i < b.size(); i++) b[i] = float(i % 5) * 0.01f;
      const double fl = 2.0 * s.M * s.N * s.K;
      double t = timings.best(
          fmt::format("mm{}x{}x{}{}{}", sh.M, sh.N, sh.K, sh.ta, sh.tb),
          [&] { matmul(s, a.data(), b.data(), c.data()); }, seconds * std::min(1.0, fl / 2e9), 3);
      samples.push_back({fl, t});
      peak = std::max(peak, fl / t);
      cal.lines.push_back(fmt::format("matmul {}x{}x{}{}{}: {:.1f} GFLOP/s", sh.M, sh.N, sh.K,
                                      sh.ta ? " Aᵀ" : "", sh.tb ? " Bᵀ" : "", fl / t * 1e-9));
    }
    // Weighted least squares on relative error: minimise Σ ((t0 + f·c − t) / t)².
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    for (auto [f, t] : samples) {
      const double w = 1.0 / (t * t);
      s00 += w, s01 += w * f, s11 += w * f * f, r0 += w * t, r1 += w * f * t;
    }
    const double det = s00 * s11 - s01 * s01;
    double t0 = (r0 * s11 - r1 * s01) / det, inv_rate = (s00 * r1 - s01 * r0) / det;
    if (t0 < 0 || inv_rate <= 0) t0 = 0, inv_rate = 1 / peak;
    const double rate = std::min(peak, 1 / inv_rate);
    d.peak_tflops_32 = peak * 1e-12;
    d.matmul_efficiency = rate / peak;
    cal.lines.push_back(
        fmt::format("matmul fit: {:.1f} GFLOP/s sustained + {:.1f} µs per call; "
                    "best {:.1f} GFLOP/s",
                    rate * 1e-9, t0 * 1e6, peak * 1e-9));

    // bf16: a peak only where oneDNN runs bf16 products on the CPU's own instructions. Elsewhere
    // kiln widens bf16 operands to fp32 (fp32's speed), and a bf16 peak would be a made-up
    // number (or the 0 that made `--dtype bf16` plans divide by it): none is written.
    d.peak_tflops_16 = 0;
    if (matmul_bf16_native()) {
      double peak16 = 0;
      for (const Shape& sh : shapes) {
        MatmulShape s{sh.M, sh.N, sh.K, sh.ta, sh.tb};
        Buffer<bf16> a(s.M * s.K), b(s.K * s.N);
        Buffer<float> c(s.M * s.N);
        for (size_t i = 0; i < a.size(); i++) a[i] = float_to_bf16(float(i % 7) * 0.01f);
        for (size_t i = 0; i < b.size(); i++) b[i] = float_to_bf16(float(i % 5) * 0.01f);
        const double fl = 2.0 * s.M * s.N * s.K;
        const double t = timings.best(
            fmt::format("bf16mm{}x{}x{}{}{}", sh.M, sh.N, sh.K, sh.ta, sh.tb),
            [&] { matmul_bf16(s, a.data(), b.data(), c.data()); },
            seconds * std::min(1.0, fl / 2e9), 3);
        peak16 = std::max(peak16, fl / t);
      }
      d.peak_tflops_16 = peak16 * 1e-12;
      cal.lines.push_back(fmt::format(
          "bf16 matmul (native, fp32 accumulation), same shapes: best {:.1f} GFLOP/s, used as "
          "peak_tflops_bf16 with the fp32 fit's efficiency",
          peak16 * 1e-9));
    } else {
      cal.lines.push_back(fmt::format(
          "bf16: no peak written: oneDNN has no native bf16 matmul here{}, so kiln widens bf16 "
          "operands to fp32 and multiplies at the fp32 rate; plan this machine with --dtype fp32",
          cpu_flag("avx512_bf16") || cpu_flag("amx_bf16")
              ? " (the CPU reports avx512_bf16 or amx_bf16, but this oneDNN does not use it)"
              : " (the CPU has neither avx512_bf16 nor amx_bf16)"));
    }

    // Memory bandwidth: a STREAM triad over arrays far larger than the last-level cache.
    const double llc = llc_mib();
    const int64_t big = std::max<int64_t>(int64_t(4 * llc * (1 << 20) / 4), int64_t(1) << 24);
    const double triad = triad_gbs(big, seconds * 3, timings, "triad");
    cal.lines.push_back(fmt::format("memory: STREAM triad over 3 × {:.0f} MiB: {:.1f} GB/s",
                                    big * 4.0 / (1 << 20), triad));

    // kiln's own memory-bound kernels, with bytes counted as the planner counts them. On data far
    // larger than the cache (the loss over a GPT-2 vocabulary, AdamW over 16M parameters) they set
    // mem_bw_efficiency; on data that fits (layernorm and GELU, forward and backward, at the
    // small config's shapes) they set the cache bandwidth.
    {
      const int64_t M = 1024, V = 50304;
      Buffer<float> logits(M * V), losses(M);
      Buffer<int32_t> targets(M);
      for (int64_t i = 0; i < M; i++) targets[i] = int32_t((i * 7919) % V);
      const double t_ce = timings.best(
          "ce",
          [&] {
            for (size_t i = 0; i < logits.size(); i++) logits[i] = float(i % 13) * 0.1f;
            softmax_cross_entropy(logits.data(), losses.data(), targets.data(), M, V, V, 1.0f / M);
          },
          seconds, 3);
      // The refill above is a write of the logits, as the LM head's matmul does.
      const double ce_bytes = double(M) * V * (3 * 4 + 12);
      const int64_t n = int64_t(16) << 20;
      Buffer<float> p(n), g(n), m(n), v(n);
      AdamWParams ap{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
      const double t_adam = timings.best(
          "adamw", [&] { adamw_update(p.data(), g.data(), m.data(), v.data(), n, ap); }, seconds,
          3);
      const double adam_bytes = 28.0 * n;  // reads p, g, m, v; writes p, m, v
      // AdamW streams its four arrays (reads and in-place writes, no write-allocate): that is
      // the bandwidth the planner's memory-bound kernels get. The triad above is reported for
      // reference; STREAM's count leaves out the read that allocates the written line. kiln's
      // cross-entropy computes an exponential per logit and runs below it (compute-bound).
      d.mem_bw_gbs = adam_bytes / t_adam * 1e-9;
      d.mem_bw_efficiency = 1;
      cal.lines.push_back(fmt::format(
          "kiln kernels on memory: AdamW {:.1f} GB/s (used as the memory bandwidth), cross-entropy "
          "{:.1f} GB/s",
          d.mem_bw_gbs, ce_bytes / t_ce * 1e-9));

      const int64_t rows = 1024, C = 256, nf = rows * 4 * C;
      Buffer<float> x(rows * C), y(rows * C), mean(rows), rstd(rows), w(C), bb(C), dx(rows * C),
          dw(C), db(C), h(nf), hg(nf), dh(nf);
      for (size_t i = 0; i < x.size(); i++) x[i] = float(i % 11) * 0.1f;
      for (int i = 0; i < C; i++) w[i] = 1;
      const double t_ln = timings.best(
          "layernorm",
          [&] {
            layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bb.data(),
                              rows, C);
            layernorm_backward(dx.data(), dw.data(), db.data(), y.data(), x.data(), w.data(),
                               mean.data(), rstd.data(), rows, C);
          },
          seconds, 20);
      const double t_gelu = timings.best(
          "gelu",
          [&] {
            gelu_forward(hg.data(), h.data(), nf);
            gelu_backward(dh.data(), h.data(), hg.data(), nf);
          },
          seconds, 20);
      const double ln_bytes = 6.0 * rows * C * 4, gelu_bytes = 6.0 * nf * 4;
      if (llc > 0) {
        d.cache_mib = llc;
        d.cache_bw_gbs = (ln_bytes + gelu_bytes) / (t_ln + t_gelu) * 1e-9;
        cal.lines.push_back(fmt::format(
            "kiln kernels in cache ({:.0f} MiB): layernorm {:.1f} GB/s, GELU {:.1f} GB/s; used "
            "{:.1f} GB/s",
            llc, ln_bytes / t_ln * 1e-9, gelu_bytes / t_gelu * 1e-9, d.cache_bw_gbs));
      }

      // kiln's attention (causal loops) at the small config's shape, against the FLOPs the
      // planner counts for unfused attention: 6 products of 2·T·T·hs per head (2 forward, 4
      // backward, full size). It can exceed 1: the loops skip the masked half.
      const int B = 4, T = 256, AC = 256, NH = 4;
      Buffer<float> qkv(int64_t(B) * T * 3 * AC), out(int64_t(B) * T * AC),
          att(int64_t(B) * NH * T * T), datt(int64_t(B) * NH * T * T), dqkv(qkv.size()),
          dout(out.size());
      for (size_t i = 0; i < qkv.size(); i++) qkv[i] = float(i % 17) * 0.01f;
      for (size_t i = 0; i < dout.size(); i++) dout[i] = float(i % 5) * 0.01f;
      const double t_att = timings.best(
          "attention",
          [&] {
            attention_forward(out.data(), att.data(), qkv.data(), B, T, AC, NH);
            attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T,
                               AC, NH);
          },
          seconds, 5);
      const double att_flops = 6.0 * 2 * T * T * double(AC / NH) * B * NH;
      d.attention_efficiency = att_flops / t_att / rate;
      cal.lines.push_back(
          fmt::format("kiln attention (B={} T={} C={} NH={}): {:.1f} GFLOP/s as "
                      "counted, {:.2f} of the matmul rate",
                      B, T, AC, NH, att_flops / t_att * 1e-9, d.attention_efficiency));
    }
    // The fixed cost of one small parallel kernel (OpenMP fork and join), and of a matmul call.
    {
      Buffer<float> x(4096);
      float* px = x.data();
      double t = timings.best(
          "overhead",
          [&] {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < 4096; i++) px[i] = px[i] * 0.5f + 1.0f;
          },
          seconds, 200);
      d.kernel_overhead_us = std::max(t, t0) * 1e6;
      cal.lines.push_back(
          fmt::format("kernel overhead: element-wise {:.1f} µs, matmul {:.1f} µs; "
                      "used {:.1f} µs",
                      t * 1e6, t0 * 1e6, d.kernel_overhead_us));
    }
    const double mem = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    d.memory_gib = mem / double(1 << 30);
    d.intra_link = "shm";
    d.intra_link_gbs = d.mem_bw_gbs;
    d.nic_gbps = 0;
    cal.lines.push_back(fmt::format("memory capacity {:.1f} GiB", d.memory_gib));
    cal.lines.push_back(
        "not measured: collective bandwidth between processes and machines (no multi-process "
        "measurement yet); intra_link_gbs is the memory bandwidth and nic_gbps is 0, so a "
        "multi-node plan with this file asks for --nic-gbps");
    // Other processes on the cores make every rate low; say so rather than write a slow machine.
    double load[1] = {0};
    if (getloadavg(load, 1) == 1 && load[0] > num_threads() + 0.5)
      cal.lines.push_back(fmt::format(
          "warning: the load average was {:.1f} with {} threads measuring: other processes shared "
          "the cores and these numbers are likely low; run again on a quiet machine",
          load[0], num_threads()));
    cal.device = d;
  }
  return cal;
}

}  // namespace

void plan_calibrate(int threads, double seconds, int rounds, const std::string& output, bool json) {
  set_num_threads(threads);
  if (seconds <= 0) fail("--seconds must be positive");
  if (rounds < 1) fail("--rounds must be at least 1");
  Calibration cal = measure(seconds, rounds);
  std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::string comment =
      fmt::format("This machine, measured by `kiln plan --calibrate` on {} ({} threads).\n", date,
                  num_threads());
  for (const auto& l : cal.lines) comment += l + "\n";
  comment += "Power (tdp_w) is an estimate, not a measurement.";
  cal.device.source = fmt::format("kiln plan --calibrate, {}", date);
  std::string text = hardware_toml(cal.device, comment);
  if (output != "-") {
    const fs::path out(output);
    if (out.has_parent_path()) fs::create_directories(out.parent_path());
    write_file_atomic(output, text);
  }
  if (json) {
    nlohmann::json j = {{"peak_tflops_fp32", cal.device.peak_tflops_32},
                        {"peak_tflops_bf16", cal.device.peak_tflops_16 > 0
                                                 ? nlohmann::json(cal.device.peak_tflops_16)
                                                 : nlohmann::json()},
                        {"bf16_native", matmul_bf16_native()},
                        {"matmul_efficiency", cal.device.matmul_efficiency},
                        {"sustained", cal.device.sustained},
                        {"mem_bw_gbs", cal.device.mem_bw_gbs},
                        {"cache_mib", cal.device.cache_mib},
                        {"cache_bw_gbs", cal.device.cache_bw_gbs},
                        {"kernel_overhead_us", cal.device.kernel_overhead_us},
                        {"memory_gib", cal.device.memory_gib},
                        {"threads", num_threads()},
                        {"output", output}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  for (const auto& l : cal.lines) fmt::print("{}\n", l);
  if (output == "-")
    fmt::print("\n{}", text);
  else
    fmt::print(
        "\nwrote {}; use it with: kiln plan --config CONFIG --hardware {} --layout "
        "mb=<train.batch_size>\n",
        output, output);
}

}  // namespace kiln::cli
