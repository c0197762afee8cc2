#include "plan/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "core/closest_name.h"
#include "core/error.h"
#include "plan/recompute.h"
#include "plan/stages.h"

namespace kiln::plan {
namespace {

std::vector<int> divisors(int64_t n, int64_t cap) {
  std::vector<int> out;
  for (int64_t k = 1; k <= std::min(n, cap); k++)
    if (n % k == 0) out.push_back(int(k));
  return out;
}

std::string list_ints(const std::vector<int>& v) {
  std::vector<std::string> names;
  for (int x : v) names.push_back(std::to_string(x));
  return join_names(names, "or");
}

// Tensor-parallel degrees that divide the node, the heads, the key/value heads and the MLP.
std::vector<int> tp_options(const ModelSpec& m, const ClusterSpec& c) {
  std::vector<int> out;
  const int domain = c.tp_domain();
  for (int t : divisors(domain, domain))
    if (m.n_head % t == 0 && kv_heads_per_rank(m, t) > 0 && m.ffn_hidden % t == 0) out.push_back(t);
  return out;
}

// Context-parallel degrees the search tries on a cluster of `devices` (0: any): cp ≥ 2 dividing
// the devices, with flash attention, the sequence a multiple of 2·cp (two chunks per rank) and at
// least `min_tokens` of it on each rank.
std::vector<int> cp_options(int64_t devices, const JobSpec& j, int64_t min_tokens) {
  std::vector<int> out;
  if (!j.flash_attention) return out;
  for (int64_t cp = 2; cp <= kCpMax && j.seq_len / cp >= min_tokens; cp++)
    if ((devices == 0 || devices % cp == 0) && j.seq_len % (2 * cp) == 0) out.push_back(int(cp));
  return out;
}

double gib(double bytes) {
  return bytes / double(1 << 30);
}

}  // namespace

namespace {

// What is wrong with tp alone (it must divide the node, the heads and the MLP), or "".
std::string tp_problem(const ModelSpec& m, const ClusterSpec& c, const Layout& l) {
  const std::vector<int> tps = tp_options(m, c);
  if (m.n_head % l.tp != 0)
    return fmt::format("tp={} does not divide the {} attention heads of {}; tp can be {}", l.tp,
                       m.n_head, m.name, list_ints(tps));
  if (kv_heads_per_rank(m, l.tp) == 0)
    return fmt::format(
        "tp={} neither divides the {} key/value heads of {} nor is a multiple of them (each rank "
        "would hold part of a head); tp can be {}",
        l.tp, m.n_kv_head, m.name, list_ints(tps));
  if (m.ffn_hidden % l.tp != 0)
    return fmt::format("tp={} does not divide the MLP width {} of {}; tp can be {}", l.tp,
                       m.ffn_hidden, m.name, list_ints(tps));
  const int domain = c.tp_domain();
  const char* where = c.topology == Topology::torus ? "the x axis of the slice" : "a node";
  if (l.tp > domain)
    return fmt::format(
        "tp={} spans more than {} ({} devices); kiln keeps tensor parallelism on the fast link; "
        "tp can be {}",
        l.tp, where, domain, list_ints(tps));
  if (domain % l.tp != 0)
    return fmt::format("tp={} does not divide the {} devices of {}; tp can be {}", l.tp, domain,
                       where, list_ints(tps));
  return "";
}

}  // namespace

double ranked_step_seconds(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return seconds;
  const double mag = std::pow(10.0, std::floor(std::log10(seconds)) - 2);
  return std::round(seconds / mag) * mag;
}

std::string layout_problem(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                           const Layout& l) {
  if (std::string p = software_device_problem(j.software, c.device); !p.empty()) return p;
  if (std::string p = precision_problem(c.device, j.dtype); !p.empty()) return p;
  if (std::string p = software_precision_problem(j.software, j.dtype, &c.device); !p.empty())
    return p;
  if (std::string p = c.size_problem(); !p.empty()) return p;
  std::string tp = tp_problem(m, c, l);
  if (!tp.empty()) return tp;
  const int total = c.total_gpus();
  const int model_ranks = l.tp * l.cp * l.pp;  // one data-parallel replica
  const std::string mr = l.cp > 1 ? "tp×cp×pp" : "tp×pp";
  if (int64_t(model_ranks) * l.dp != total) {
    if (total % model_ranks == 0)
      return fmt::format("{}×dp = {} but the cluster has {} devices ({}); use dp={}", mr,
                         int64_t(model_ranks) * l.dp, total, c.describe(), total / model_ranks);
    return fmt::format("{} = {} does not divide the cluster's {} devices", mr, model_ranks, total);
  }
  if (l.shard > 0) {
    const int group = l.dp_cp();
    if (group % l.shard != 0)
      return fmt::format(
          "shard={} does not divide the {} data-parallel ranks{} (hybrid sharding splits them "
          "into replicas of shard ranks each)",
          l.shard, group, l.cp > 1 ? " (dp×cp)" : "");
    if (l.cp > 1 && l.shard % l.cp != 0)
      return fmt::format(
          "shard={} splits a context-parallel group of {}; with cp > 1 shard is a multiple of "
          "cp",
          l.shard, l.cp);
    if (l.shard < group && l.zero == 0)
      return fmt::format(
          "shard={} shards ZeRO state over replicas, and zero=0 has none; use zero=1, 2 or 3",
          l.shard);
  }
  if (l.sp && l.tp > 1 && !j.software.sequence_parallel)
    return fmt::format("sp=1: {} has no sequence parallelism; use sp=0 or another --software",
                       j.software.name);
  if (l.async_tp && (l.tp == 1 || !l.sp))
    return "asynctp=1 overlaps sequence parallelism's all-gathers and reduce-scatters with the "
           "matmuls; it needs tp > 1 with sp";
  if (l.cp > 1 && !j.flash_attention)
    return "context parallelism (cp > 1) passes keys and values round a ring of flash-attention "
           "kernels; it needs --attention flash";
  if (l.cp > 1 && j.seq_len % (2 * l.cp) != 0)
    return fmt::format(
        "cp={} splits each sequence into 2·cp = {} chunks (two per rank, to balance the causal "
        "mask); --seq-len {} is not a multiple of {}",
        l.cp, 2 * l.cp, j.seq_len, 2 * l.cp);
  if (l.pp > m.n_layer)
    return fmt::format("pp={} is more stages than the {} layers of {}", l.pp, m.n_layer, m.name);
  if (l.pp > 1 && !j.software.pipeline)
    return fmt::format(
        "pp={}: {} has no pipeline parallelism; use pp=1, or --software torchtitan or megatron "
        "for a pipeline",
        l.pp, j.software.name);
  if (l.vpp > 1 && !j.software.interleaved_pp)
    return fmt::format(
        "vpp={}: {}'s pipeline engine runs one stage per rank (1F1B, no interleaved "
        "schedule); use vpp=1, or --software megatron or torchtitan for interleaving",
        l.vpp, j.software.name);
  if (l.zero == 1 && !j.software.zero1)
    return fmt::format(
        "zero=1: {} has no ZeRO-1 (FSDP shards nothing, NO_SHARD = zero=0; the gradients and "
        "optimizer state, SHARD_GRAD_OP = zero=2; or everything, FULL_SHARD = zero=3); use "
        "zero=0, 2 or 3",
        j.software.name);
  if (l.pp > 1 && l.zero > j.software.max_zero_with_pp)
    return fmt::format(
        "zero={} with pp={}: {}'s pipeline engine runs ZeRO up to stage {} (\"ZeRO-2 and "
        "ZeRO-3 are incompatible with pipeline parallelism\"); use zero={} or pp=1",
        l.zero, l.pp, j.software.name, j.software.max_zero_with_pp, j.software.max_zero_with_pp);
  if (l.recompute_op && !j.flash_attention)
    return "recompute=op (torchtitan's per-op checkpointing) keeps the flash-attention kernel's "
           "output; it needs --attention flash";
  if (l.full_every > m.n_layer)
    return fmt::format(
        "recompute=full/{} checkpoints one block in {}, more than the {} layers of {}",
        l.full_every, l.full_every, m.n_layer, m.name);
  const int64_t seqs = j.global_batch_seqs();
  if (seqs % (int64_t(l.dp) * l.mb) != 0) {
    std::vector<int> mbs;
    if (seqs % l.dp == 0) mbs = divisors(seqs / l.dp, 64);
    if (mbs.empty())
      return fmt::format("the global batch of {} sequences does not split over dp={}", seqs, l.dp);
    return fmt::format(
        "the global batch of {} sequences does not split into dp×mb = {}×{}; mb "
        "can be {}",
        seqs, l.dp, l.mb, list_ints(mbs));
  }
  const int64_t micro = seqs / (int64_t(l.dp) * l.mb);
  if (l.vpp > 1) {
    if (l.pp == 1) return "vpp (interleaved virtual stages) needs pp > 1";
    if (m.n_layer < l.pp * l.vpp)
      return fmt::format("vpp={}: the {} layers do not make pp×vpp = {} chunks", l.vpp, m.n_layer,
                         l.pp * l.vpp);
    if (micro % l.pp != 0)
      return fmt::format(
          "the interleaved schedule needs the micro-batches per step (m = {}) to be "
          "a multiple of pp = {} (Megatron-LM's rule)",
          micro, l.pp);
  }
  return "";
}

Layout complete_layout(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, Layout l,
                       const std::string& as_given) {
  if (l.tp == 1) l.sp = false;
  auto quoted = [&] { return as_given.empty() ? l.to_string() : as_given; };
  std::string tp = tp_problem(m, c, l);
  if (!tp.empty()) fail("--layout {}: {}", quoted(), tp);
  if (l.dp == 0) {
    const int total = c.total_gpus(), model_ranks = l.tp * l.cp * l.pp;
    if (total % model_ranks != 0)
      fail("--layout{}: {} = {} does not divide the {} devices of {}",
           as_given.empty() ? "" : " " + as_given, l.cp > 1 ? "tp×cp×pp" : "tp×pp", model_ranks,
           total, c.describe());
    l.dp = total / model_ranks;
  }
  if (l.tp == 1) l.sp = false;
  std::string problem = layout_problem(m, c, j, l);
  if (!problem.empty()) fail("--layout {}: {}", quoted(), problem);
  return l;
}

Estimate evaluate(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, const Layout& l) {
  Estimate e;
  e.layout = l;
  e.invalid = layout_problem(m, c, j, l);
  if (!e.valid()) return e;
  const int64_t seqs = j.global_batch_seqs();
  e.micro_batches = seqs / (int64_t(l.dp) * l.mb);
  e.memory = memory_per_gpu(m, c, j, l, e.micro_batches);
  e.time = step_time(m, c, j, l, e.micro_batches);
  if (l.recompute == Recompute::attention && j.flash_attention)
    e.notes.push_back(
        "attention recompute does nothing with flash attention, which keeps no "
        "attention scores");
  if (l.zero > 0 && l.dp_cp() == 1) e.notes.push_back("ZeRO shards nothing with dp=1");
  if (j.software.runs_bf16_optimizer(l, j.dtype))
    e.notes.push_back(
        "DeepSpeed runs bf16 without ZeRO with its BF16_Optimizer: optimizer state sharded over "
        "dp, each micro-batch's gradients added into fp32 copies, the fp32 gradients "
        "all-reduced");
  else if (j.software.zero_as_run(l, j.dtype) != l.zero)
    e.notes.push_back(fmt::format(
        "{} keeps each pipeline stage's weights gathered and its gradients unsharded through "
        "the step's micro-batches (FSDP's reshard_after_forward off under pp): ZeRO-{} holds "
        "and moves what ZeRO-1 does",
        j.software.name, l.zero));
  if (l.tp > 1 && !l.sp)
    e.notes.push_back(
        "without sequence parallelism norms and dropout keep full activations on "
        "every tp rank");

  const int N = c.total_gpus();
  e.tokens_per_step = double(seqs) * j.seq_len;
  e.tokens_per_s = e.tokens_per_step / e.time.step;
  const double fpt = model_flops_per_token(m, j.seq_len);
  const double hw = fpt + recompute_flops_per_token(m, j, l);
  if (j.flash_attention) {
    // The FLOPs counted run attention over the whole sequence; a causal kernel skips half.
    const double masked = 1.5 * kiln::attention_core_forward_flops_per_token(m, j.seq_len) / fpt;
    if (masked >= 0.2)
      e.notes.push_back(fmt::format(
          "model and hardware FLOPs count attention over the whole sequence (Megatron-LM's and "
          "PaLM's convention); the causal kernel skips the masked half, {:.0f}% of the FLOPs "
          "counted, so MFU can exceed the rate the device sustains",
          100 * masked));
  }
  e.tflops_per_gpu_model = fpt * e.tokens_per_s / N * 1e-12;
  e.tflops_per_gpu_hw = hw * e.tokens_per_s / N * 1e-12;
  const double peak = c.device.peak_tflops(j.dtype);
  e.mfu = e.tflops_per_gpu_model / peak;
  e.hfu = e.tflops_per_gpu_hw / peak;
  e.steps = j.steps();
  const double seconds = double(e.steps) * e.time.step;
  e.days = seconds / 86400;
  e.gpu_hours = seconds / 3600 * N;
  e.cost_usd = e.gpu_hours * j.usd_per_gpu_hour;
  const double gpu_w = j.gpu_power_w > 0 ? j.gpu_power_w : c.device.tdp_w;
  const double node_w = j.node_overhead_w >= 0 ? j.node_overhead_w : c.device.node_overhead_w;
  const double it_kw = (N * gpu_w + c.nodes * node_w) / 1000;
  e.energy_kwh = it_kw * seconds / 3600 * j.pue;
  e.co2_t = e.energy_kwh * j.gco2_per_kwh * 1e-6;
  return e;
}

SearchResult search(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                    const FixedFields& fixed) {
  SearchResult out;
  std::vector<Estimate> oom;
  const int N = c.total_gpus();
  const int64_t seqs = j.global_batch_seqs();
  const LayoutKeys& k = fixed.keys;
  const Layout& v = fixed.values;
  // The recompute policies the software runs: the trainer's modes, and torchtitan's per-op and
  // every-second-block checkpointing with torchtitan (plan/recompute.h).
  std::vector<Layout> recomputes(2);
  recomputes[1].recompute = Recompute::full;
  if (!j.flash_attention) recomputes.insert(recomputes.begin() + 1, Layout{});
  if (!j.flash_attention) recomputes[1].recompute = Recompute::attention;
  if (j.software.name.rfind("torchtitan", 0) == 0 && j.flash_attention) {
    recomputes.push_back(Layout{});
    recomputes.back().recompute_op = true;
    recomputes.push_back(recomputes[1]);
    recomputes.back().full_every = 2;
  }
  if (k.recompute) recomputes = {v};
  const std::vector<int> tps = k.tp ? std::vector<int>{v.tp} : tp_options(m, c);
  // Asynchronous TP where the software runs it. Both kinds add work beside what they hide
  // (plan/time_model.cpp): Transformer Engine's userbuffers chunk the GEMMs and run reduction
  // kernels on SMs; PyTorch's SymmetricMemory ops add own-shard copies, partial-sum reductions and
  // chunk matmuls on the compute stream. On small matmuls that can cost more than it hides, so
  // the search tries both.
  // Only on NVIDIA GPUs: Megatron-LM's --tp-comm-overlap is Transformer Engine's CUDA
  // userbuffers and torchtitan's is PyTorch's CUDA SymmetricMemory. No Ascend counterpart is
  // sourced, and ROCm's Transformer Engine merged userbuffers only in 2026
  // (ROCm/TransformerEngine#367), its overlap kernels for gfx950 (MI350, not in the catalog).
  const bool no_async_here = !c.device.nvidia();
  const bool async_tp = k.async_tp ? v.async_tp : j.software.async_tp && !no_async_here;
  const bool try_both_async = async_tp && !k.async_tp;
  auto one_cp = [&](int cp) {
    for (int tp : tps) {
      const int max_pp = j.software.pipeline ? m.n_layer : 1;
      for (int pp = k.pp ? v.pp : 1; pp <= (k.pp ? v.pp : max_pp); pp++) {
        if (N % (tp * cp * pp) != 0) continue;
        const int dp = N / (tp * cp * pp);
        if (k.dp && dp != v.dp) continue;
        if (seqs % dp != 0) continue;
        const std::vector<int> mbs = k.mb ? std::vector<int>{v.mb} : divisors(seqs / dp, 64);
        for (int mb : mbs) {
          if (seqs % (int64_t(dp) * mb) != 0) continue;
          const int64_t micro = seqs / (int64_t(dp) * mb);
          std::vector<int> vpps = {1};
          // Interleaving with as many layers per chunk in every chunk (uneven splits are allowed
          // for --layout, but the search keeps to the even ones Megatron-LM runs by default).
          for (int x = 2; pp > 1 && j.software.interleaved_pp && x <= 8; x++)
            if (m.n_layer % (pp * x) == 0 && micro % pp == 0) vpps.push_back(x);
          if (k.vpp) vpps = {v.vpp};
          std::vector<int> zeros;
          const int max_zero = pp > 1 ? j.software.max_zero_with_pp : 3;
          for (int z = 0; z <= (dp * cp > 1 ? max_zero : 0); z++)
            if (z != 1 || j.software.zero1) zeros.push_back(z);
          if (k.zero) zeros = {v.zero};
          // Hybrid sharding where the cluster has slices (ZeRO inside each, replicas across the
          // data-centre network, as MaxText shards), or as given.
          std::vector<int> shards = {0};
          if (c.slices > 1 && (dp * cp) % c.slices == 0) shards.push_back(dp * cp / c.slices);
          if (k.shard) shards = {v.shard};
          for (int vpp : vpps)
            for (int zero : zeros)
              for (int shard : shards)
                for (const Layout& rc : recomputes) {
                  if (shard > 0 && zero == 0 && !k.shard) continue;
                  Layout l;
                  l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.mb = mb, l.vpp = vpp, l.zero = zero;
                  l.shard = shard;
                  l.recompute = rc.recompute;
                  l.recompute_op = rc.recompute_op;
                  l.full_every = rc.full_every;
                  l.sp = tp > 1 && j.software.sequence_parallel && (!k.sp || v.sp);
                  // Asynchronous TP needs sequence parallelism; under SymmetricMemory
                  // software both settings are tried, since its ops can cost more than they
                  // hide.
                  const std::vector<bool> asyncs = try_both_async && l.sp
                                                       ? std::vector<bool>{false, true}
                                                       : std::vector<bool>{async_tp && l.sp};
                  for (const bool a : asyncs) {
                    l.async_tp = a;
                    Estimate e = evaluate(m, c, j, l);
                    if (!e.valid()) continue;
                    out.considered++;
                    if (out.considered == 1 || e.memory.total < out.least_memory.memory.total)
                      out.least_memory = e;
                    (e.fits() ? out.fitting : oom).push_back(std::move(e));
                  }
                }
        }
      }
    }
  };
  std::vector<int> cps_tried;
  if (k.cp) {
    one_cp(v.cp);
  } else {
    one_cp(1);
    // Context parallelism for long sequences (each rank keeping at least kCpMinTokens of every
    // sequence), or, when nothing fits without it, down to kCpMinTokensForced per rank.
    const bool long_seq = j.seq_len >= kCpLongSeq;
    if (long_seq || out.fitting.empty())
      cps_tried = cp_options(c.total_gpus(), j, long_seq ? kCpMinTokens : kCpMinTokensForced);
    for (int cp : cps_tried) one_cp(cp);
  }

  // What decided each field.
  auto field = [&](bool given, const std::string& key, const std::string& value,
                   const std::string& tried) {
    if (given)
      out.fixed.push_back({key, value});
    else
      out.searched.push_back({key, tried});
  };
  std::vector<std::string> tp_text;
  for (int t : tps) tp_text.push_back(std::to_string(t));
  std::vector<std::string> rc_text;
  for (const Layout& rc : recomputes) rc_text.push_back(rc.recompute_text());
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + v[i];
    return s;
  };
  field(k.tp, "tp", std::to_string(v.tp), join(tp_text));
  if (!k.pp && !j.software.pipeline)
    out.not_searched.push_back(
        {"pp", fmt::format("1 ({} has no pipeline parallelism)", j.software.name)});
  else
    field(k.pp, "pp", std::to_string(v.pp), fmt::format("1–{}", m.n_layer));
  field(k.dp, "dp", std::to_string(v.dp), "the devices left by tp·cp·pp");
  field(k.mb, "mb", std::to_string(v.mb), "divisors of a replica's batch up to 64");
  if (!k.vpp && !j.software.pipeline)
    out.not_searched.push_back(
        {"vpp", fmt::format("1 ({} has no pipeline parallelism)", j.software.name)});
  else if (!k.vpp && k.pp && v.pp == 1)
    out.not_searched.push_back({"vpp", "1 (pp=1: no pipeline to interleave)"});
  else if (!k.vpp && !j.software.interleaved_pp)
    out.not_searched.push_back(
        {"vpp", fmt::format("1 ({}'s pipeline has no interleaved schedule)", j.software.name)});
  else
    field(k.vpp, "vpp", std::to_string(v.vpp), "1–8 where the layers split evenly");
  field(k.zero, "zero", std::to_string(v.zero),
        j.software.max_zero_with_pp < 3
            ? fmt::format("0–3, 0–{} with pp > 1 ({}'s pipeline engine)",
                          j.software.max_zero_with_pp, j.software.name)
        : j.software.zero1 ? std::string("0–3")
                           : fmt::format("0, 2 and 3; {} has no ZeRO-1", j.software.name));
  field(k.recompute, "recompute", v.recompute_text(), join(rc_text));
  if (k.shard)
    out.fixed.push_back({"shard", std::to_string(v.shard)});
  else if (c.slices > 1)
    out.searched.push_back({"shard", "all of dp, or one slice's share for hybrid sharding"});
  if (k.cp) {
    out.fixed.push_back({"cp", std::to_string(v.cp)});
  } else if (!cps_tried.empty()) {
    std::vector<std::string> t = {"1"};
    for (int cp : cps_tried) t.push_back(std::to_string(cp));
    out.searched.push_back({"cp", join(t)});
  } else {
    out.not_searched.push_back(
        {"cp", !j.flash_attention ? "1 (context parallelism needs flash attention)"
                                  : fmt::format("1 (--seq-len {} is below {} and layouts fit "
                                                "without context parallelism)",
                                                j.seq_len, kCpLongSeq)});
  }
  if (k.sp)
    out.fixed.push_back({"sp", v.sp ? "1" : "0"});
  else if (!j.software.sequence_parallel)
    out.not_searched.push_back(
        {"sp", fmt::format("0 ({} has no sequence parallelism)", j.software.name)});
  else
    out.not_searched.push_back({"sp", "1 wherever tp > 1 (it saves memory at the same traffic)"});
  if (k.async_tp)
    out.fixed.push_back({"asynctp", v.async_tp ? "1" : "0"});
  else if (j.software.async_tp && no_async_here)
    out.not_searched.push_back(
        {"asynctp", fmt::format("0 ({}'s overlap is CUDA's; none is modelled on {})",
                                j.software.name, c.device.name)});
  else if (j.software.async_tp)
    out.searched.push_back(
        {"asynctp",
         fmt::format("0 and 1 wherever tp > 1: {}'s {} add work beside what they hide, which "
                     "can outweigh it",
                     j.software.name,
                     j.software.async_tp_symm_mem
                         ? "SymmetricMemory ops"
                         : "userbuffers (chunked GEMMs, reduction kernels on SMs)")});
  else
    out.not_searched.push_back(
        {"asynctp", fmt::format("0 ({} does not run asynchronous TP)", j.software.name)});
  // Fastest first; step times equal to 3 significant digits rank the lower ZeRO stage first
  // (less traffic to go wrong), then the smaller memory.
  auto key = [](const Estimate& e) {
    return std::tuple(ranked_step_seconds(e.time.step), e.layout.zero, e.memory.total);
  };
  auto faster = [&](const Estimate& a, const Estimate& b) { return key(a) < key(b); };
  std::sort(out.fitting.begin(), out.fitting.end(), faster);
  // Out-of-memory layouts faster than the best fit, one per layout apart from its ZeRO stage:
  // the one needing the least memory.
  std::sort(oom.begin(), oom.end(), [&](const Estimate& a, const Estimate& b) {
    return std::tuple(std::get<0>(key(a)), a.memory.total) <
           std::tuple(std::get<0>(key(b)), b.memory.total);
  });
  for (auto& e : oom) {
    // Only those at least 1% faster: a layout as fast as the best is no reason to buy memory.
    if (!out.fitting.empty() && e.time.step >= 0.99 * out.fitting.front().time.step) break;
    const bool seen =
        std::any_of(out.faster_oom.begin(), out.faster_oom.end(),
                    [&](const Estimate& k) { return same_but_zero(k.layout, e.layout); });
    if (!seen) out.faster_oom.push_back(std::move(e));
  }
  return out;
}

namespace {

// The search's own test of a layout: it can run (layout_problem) and its largest stage fits in
// memory, exactly as evaluate() decides fits().
bool fits_on(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, const Layout& l) {
  if (!layout_problem(m, c, j, l).empty()) return false;
  const int64_t micro = j.global_batch_seqs() / (int64_t(l.dp) * l.mb);
  return memory_per_gpu(m, c, j, l, micro).fits();
}

}  // namespace

std::string fit_advice(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j) {
  // Candidate clusters are whole nodes of c's kind, up to a million devices, whose data
  // parallelism splits the global batch (dp must divide it, as the search requires). Each
  // suggestion is a layout the search itself tries (mb=1, vpp=1, full recompute, sp with tp > 1,
  // no ZeRO at dp=1) and that passes the search's checks, so `--nodes N --layout ...` as printed
  // is accepted.
  const int g = c.gpus_per_node;
  const int64_t seqs = j.global_batch_seqs();
  const int64_t max_devices = int64_t(1) << 20;
  const std::vector<int> dps = divisors(seqs, seqs);  // increasing
  auto on_nodes = [&](int64_t nodes) {
    ClusterSpec cc = c;
    cc.nodes = int(nodes);
    return cc;
  };
  const bool sp_ok = j.software.sequence_parallel;
  auto frugal = [sp_ok](int tp, int pp, int dp, int zero, int cp = 1) {
    Layout l;
    l.tp = tp, l.cp = cp, l.pp = pp, l.dp = dp, l.mb = 1, l.vpp = 1;
    l.zero = dp * cp > 1 ? zero : 0;
    l.recompute = Recompute::full;
    l.sp = tp > 1 && sp_ok;
    return l;
  };
  struct Way {
    int64_t devices = 0;
    Layout layout;
  };
  // ZeRO-3 data parallelism alone: the fewest devices (dp) on which it fits.
  Way z3;
  for (int dp : dps) {
    if (dp % g != 0) continue;
    if (dp > max_devices) break;
    const Layout l = frugal(1, 1, dp, 3);
    if (fits_on(m, on_nodes(dp / g), j, l)) {
      z3 = {dp, l};
      break;
    }
  }
  // Tensor, context and pipeline parallelism with ZeRO-1 over the data parallelism: for each
  // tp×cp×pp, the fewest devices on which it fits; the smallest cluster wins (then the smaller
  // tp×cp×pp). Context parallelism as the search tries it: cp ≥ 2 with flash attention, the
  // sequence in 2·cp chunks, each rank keeping at least kCpMinTokens of a long sequence (16K
  // tokens and more) or kCpMinTokensForced of a shorter one (the search then tries cp only when
  // nothing fits without it, which holds on the smallest cluster that fits with it).
  std::vector<int> cps = {1};
  for (int cp : cp_options(0, j, j.seq_len >= kCpLongSeq ? kCpMinTokens : kCpMinTokensForced))
    cps.push_back(cp);
  Way tpp;
  auto ranks = [](const Layout& l) { return int64_t(l.tp) * l.cp * l.pp; };
  for (int tp : tp_options(m, c))
    for (int cp : cps)
      for (int pp = 1; pp <= m.n_layer; pp++)
        for (int dp : dps) {
          const int64_t total = int64_t(tp) * cp * pp * dp;
          if (total > max_devices) break;
          if (tpp.devices > 0 && total > tpp.devices) break;
          if (total % g != 0) continue;
          const Layout l = frugal(tp, pp, dp, 1, cp);
          if (!fits_on(m, on_nodes(total / g), j, l)) continue;
          if (tpp.devices == 0 || total < tpp.devices ||
              (total == tpp.devices && ranks(l) < ranks(tpp.layout)))
            tpp = {total, l};
          break;
        }
  // "32 devices with ZeRO-3 (4 nodes: --nodes 4 --layout ...)": what to pass back to the planner.
  auto way = [&](const Way& w, const std::string& with) {
    const int64_t nodes = w.devices / g;
    return fmt::format("{} device{}{} ({} node{}: --nodes {} --layout {})", w.devices,
                       w.devices == 1 ? "" : "s", with, nodes, nodes == 1 ? "" : "s", nodes,
                       w.layout.to_string() + (w.layout.pp > 1 ? ",vpp=1" : ""));
  };
  std::vector<std::string> ways;
  if (z3.devices > 0) ways.push_back("at least " + way(z3, " with ZeRO-3"));
  if (tpp.devices > 0)
    ways.push_back(fmt::format("{} = {}{} on {}", tpp.layout.cp > 1 ? "tp×cp×pp" : "tp×pp",
                               ranks(tpp.layout), tpp.layout.dp_cp() > 1 ? " with ZeRO-1" : "",
                               way(tpp, "")));
  if (z3.devices == 0 && !ways.empty())
    ways.back() += fmt::format(
        " (ZeRO-3 data parallelism alone fits on no cluster of whole {}-device nodes whose dp "
        "divides the global batch of {} sequence{})",
        g, seqs, seqs == 1 ? "" : "s");
  if (ways.empty()) {
    // One sequence split as far as tensor and context parallelism go.
    Layout l;
    l.recompute = Recompute::full;
    l.dp = 1;
    l.tp = tp_options(m, c).back();
    l.sp = l.tp > 1 && sp_ok;
    l.cp = cps.back();
    JobSpec one = j;
    one.global_batch_tokens = j.seq_len;
    const double act = layer_activation_bytes(m, one, l, Recompute::full);
    if (act > c.device.memory_gib * double(1 << 30))
      return fmt::format(
          "{} fits on no layout even with a million devices: with full recompute, tp={} and "
          "cp={} a sequence of {} tokens still keeps {:.1f} GiB of activations per layer; "
          "shorten --seq-len or use devices with more memory",
          m.name, l.tp, l.cp, j.seq_len, gib(act));
    return fmt::format(
        "{} fits on no cluster of whole {}-device nodes (up to a million devices) whose data "
        "parallelism divides the global batch of {} sequences; raise --global-batch-tokens "
        "(more sequences allow more data parallelism) or use devices with more memory",
        m.name, g, seqs);
  }
  std::string s = fmt::format("needs {}", ways[0]);
  if (ways.size() > 1) s += fmt::format(", or {}", ways[1]);
  return s;
}

std::vector<std::string> layout_fixes(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                                      const Layout& l) {
  std::vector<std::pair<std::string, Layout>> tries;
  auto with = [&](std::string what, auto change) {
    Layout x = l;
    change(x);
    tries.push_back({std::move(what), x});
  };
  if (l.recompute != Recompute::full) {
    if (l.recompute == Recompute::none && !j.flash_attention)
      with("recompute=attention", [](Layout& x) { x.recompute = Recompute::attention; });
    with("recompute=full", [](Layout& x) { x.recompute = Recompute::full; });
  }
  const bool sp_ok = j.software.sequence_parallel;
  if (l.tp > 1 && !l.sp && sp_ok) with("sp=1", [](Layout& x) { x.sp = true; });
  for (int z = l.zero + 1; z <= 3 && l.dp > 1; z++)
    with(fmt::format("zero={}", z), [z](Layout& x) { x.zero = z; });
  for (int mb = l.mb / 2; mb >= 1; mb /= 2)
    with(fmt::format("mb={}", mb), [mb](Layout& x) { x.mb = mb; });
  if (l.dp % 2 == 0) {
    with(fmt::format("pp={} (dp={})", l.pp * 2, l.dp / 2), [](Layout& x) { x.pp *= 2, x.dp /= 2; });
    with(fmt::format("tp={} (dp={})", l.tp * 2, l.dp / 2),
         [sp_ok](Layout& x) { x.tp *= 2, x.dp /= 2, x.sp = sp_ok; });
    // Context parallelism splits each sequence's activations (a layout check refuses it without
    // flash attention or with a sequence that does not split into 2·cp chunks).
    with(fmt::format("cp={} (dp={})", l.cp * 2, l.dp / 2), [](Layout& x) { x.cp *= 2, x.dp /= 2; });
  }
  std::vector<std::string> out;
  for (auto& [what, x] : tries) {
    Estimate e = evaluate(m, c, j, x);
    if (e.fits())
      out.push_back(
          fmt::format("{} ({:.1f} GiB, {:.3g} s/step)", what, gib(e.memory.total), e.time.step));
  }
  return out;
}

std::string limiter(const Estimate& e) {
  const TimeBreakdown& t = e.time;
  std::vector<std::pair<double, const char*>> parts = {
      {t.bubble, "bubble"},       {t.tp_comm, "TP comm"},     {t.cp_comm, "CP comm"},
      {t.pp_p2p, "PP sends"},     {t.dp_exposed, "DP comm"},  {t.zero_exposed, "ZeRO comm"},
      {t.recompute, "recompute"}, {t.optimizer, "optimizer"}, {t.contention, "overlap contention"},
  };
  std::sort(parts.begin(), parts.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::string s;
  int shown = 0;
  for (auto& [sec, what] : parts) {
    const double share = sec / t.step;
    if (share < 0.02 || shown == 2) break;
    s += fmt::format("{}{} {:.0f}%", shown ? ", " : "", what, 100 * share);
    shown++;
  }
  if (s.empty())
    s = fmt::format("compute-bound ({:.0f}%)", 100 * (t.compute - t.recompute) / t.step);
  return s;
}

}  // namespace kiln::plan
