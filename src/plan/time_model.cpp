#include "plan/time_model.h"

#include <algorithm>
#include <vector>

#include "plan/collectives.h"
#include "plan/memory_model.h"
#include "plan/recompute.h"
#include "plan/stages.h"

namespace kiln::plan {
namespace {

// What one device sustains under the job's software, in FLOP/s, bytes/s and seconds.
struct Rates {
  double flops = 0, linear_flops = 0, attn_flops = 0, bw = 0, cache_bytes = 0;
  double cache_bw = 0, overhead = 0, mm_overhead = 0, e = 2;
  // fp8: the block's linear layers run at the fp8 rate, each of their tensors cast first.
  bool fp8 = false;
  double cast_bytes = 0;  // per element cast
  int cast_kernels = 1;

  const DeviceSpec* device = nullptr;
  const SoftwareProfile* software = nullptr;

  Rates(const DeviceSpec& d, const JobSpec& j) {
    const Dtype dt = j.dtype;
    flops = d.peak_tflops(dt) * 1e12 * d.matmul_efficiency;
    linear_flops = d.linear_flops(dt);
    // Unfused attention runs batched GEMMs; a flash kernel runs at the software's published
    // rate on the device's architecture, or (no figure) at the unfused rate.
    attn_flops = flops * d.attention_efficiency;
    device = &d, software = &j.software;
    bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency;
    cache_bytes = d.cache_mib * double(1 << 20);
    cache_bw = d.cache_bw_gbs * 1e9;
    overhead = d.kernel_overhead_us * 1e-6;
    mm_overhead = d.matmul_overhead_us > 0 ? d.matmul_overhead_us * 1e-6 : overhead;
    e = activation_bytes(dt);
    fp8 = dt == Dtype::fp8;
    cast_bytes = j.software.fp8_cast_bytes_per_e * e + j.software.fp8_cast_bytes_fixed;
    cast_kernels = std::max(1, j.software.fp8_cast_kernels);
  }

  // `count` products C(M,N) = A(M,K)·B(K,N) of one shape in one (batched) kernel: at the
  // matmul rate, or at the attention kernels' rate, or at `rate`.
  double matmul(double M, double N, double K, double count = 1) const {
    return product(M, N, K, count, flops);
  }
  // A transformer block's linear layer: fp8 when the job is.
  double linear(double M, double N, double K) const { return product(M, N, K, 1, linear_flops); }
  // Casting `elements` of a 16-bit tensor to fp8 for a matmul (amax, cast, transposed copy).
  double cast(double elements) const {
    return fp8 ? elementwise(elements * cast_bytes / cast_kernels, cast_kernels) : 0.0;
  }
  // A flash kernel over `tokens` keys and queries: the software's published rate for the
  // device's architecture, measured in a short burst, at the share of it the device sustains in
  // training (as its matmuls); or (no figure) the unfused attention rate.
  double flash(double tokens) const {
    const double f = software->flash_flops(*device, tokens);
    return f > 0 ? f * device->sustained : attn_flops;
  }
  double attention_matmul(double M, double N, double K, double count) const {
    return product(M, N, K, count, attn_flops);
  }
  double product(double M, double N, double K, double count, double rate) const {
    const double fl = 2 * M * N * K, bytes = e * (M * K + K * N + M * N);
    return mm_overhead + count * std::max(fl / rate, bytes / bw);
  }
  // `count` element-wise kernels moving `bytes` each.
  double elementwise(double bytes, double count = 1) const {
    const double b = cache_bytes > 0 && cache_bw > 0 && bytes <= cache_bytes ? cache_bw : bw;
    return count * (overhead + bytes / b);
  }
};

struct LayerTimes {
  double fwd = 0, bwd = 0;
  double attn_fwd = 0;  // the attention core's share of fwd (what selective recompute repeats)
  double ew_fwd = 0;    // the element-wise kernels' share of fwd
  double op_rec = 0;    // what torchtitan's "op" policy runs again (plan/recompute.h)
  // Forward time of each linear layer (QKV, attention output, MLP up, MLP down): what an
  // asynchronous-TP collective overlaps.
  std::vector<double> linear_fwd;
};

// One transformer layer, one micro-batch, on one device.
LayerTimes layer_times(const ModelSpec& m, const JobSpec& j, const Layout& l, const Rates& r) {
  const double n = rank_tokens(j, l), s = j.seq_len, t = l.tp, e = r.e;
  const double h = m.hidden, d = m.head_dim(), q = double(m.n_head) * d;
  const double kv = kv_heads_per_rank(m, l.tp) * d, f = m.ffn_hidden;  // kv: per rank
  const double rep = l.sp ? 1.0 / t : 1.0, drop = m.dropout ? 1.0 : 0.0;
  LayerTimes lt;
  // y(n, N) = x(n, K) · W(K, N); backward: dx = dy · Wᵀ and dW = xᵀ · dy. In fp8 all three run
  // on fp8 operands: x and W are cast in forward, dy in backward. Software that gathers fp8
  // under sequence parallelism (tp_fp8_gathers) casts a gathered tensor on the rank's 1/tp
  // shard, before the gather (the column-parallel layers' input, the row-parallel layers' output
  // gradient), and the weight gradient's matmul then needs the gathered fp8 tensor transposed:
  // a copy of its n·K one-byte elements, read and written, in the backward (once, whether or not
  // the forward is recomputed).
  const double shard =
      j.dtype == Dtype::fp8 && j.software.tp_fp8_gathers && l.sp && t > 1 ? 1.0 / t : 1.0;
  auto gathered_cast = [&](double elements) { return r.cast(elements * shard); };
  auto gathered_transpose = [&](double elements) {
    return shard < 1 ? r.elementwise(2 * elements) : 0.0;
  };
  auto linear = [&](double K, double N, bool in_gathered, bool grad_gathered) {
    lt.linear_fwd.push_back(r.linear(n, N, K));
    const double in = in_gathered ? gathered_cast(n * K) : r.cast(n * K);
    const double grad = grad_gathered ? gathered_cast(n * N) : r.cast(n * N);
    const double transposes = (in_gathered ? gathered_transpose(n * K) : 0.0) +
                              (grad_gathered ? gathered_transpose(n * N) : 0.0);
    lt.fwd += r.linear(n, N, K) + in + r.cast(K * N);
    lt.bwd += r.linear(n, K, N) + r.linear(K, N, n) + grad + transposes;
  };
  linear(h, q / t + 2 * kv, true, false);                              // QKV
  linear(q / t, h, false, true);                                       // attention output
  linear(h, f * (m.ffn == FfnKind::swiglu ? 2 : 1) / t, true, false);  // MLP up (gate, up)
  linear(f / t, h, false, true);                                       // MLP down
  const double heads = l.mb * m.n_head / t;
  if (j.flash_attention) {
    // Causal: the kernel skips the masked half. Backward runs 5 products of s·s·d per head
    // against forward's 2 (it recomputes the scores), so 2.5 × forward. Context parallelism:
    // each rank's s/cp queries meet all s keys, the causal work balanced over the ranks.
    // The kernel's rate is the benchmark's at the length of the blocks it works on (s, or a
    // ring step's s/cp).
    const double fl = heads * 0.5 * 4 * s * s * d / l.cp, rate = r.flash(s / l.cp);
    lt.attn_fwd = r.overhead + fl / rate;
    lt.bwd += r.overhead + 2.5 * fl / rate;
    if (j.attention_unpad) {
      // flash-attn's bert_padding around a variable-length kernel (llm-foundry's flash_attn_fn):
      // unpad_input gathers q, k and v (index_first_axis reads and writes each) after five small
      // kernels over the mask (sum, nonzero, max, cumsum, pad); pad_input zeroes an output and
      // scatters the attention's output into it. Backward gathers the output's gradient and, for
      // q, k and v, zeroes a padded gradient and scatters into it.
      const double qkv = n * (q / t + 2 * kv) * e, out = n * q / t * e;
      lt.ew_fwd += r.elementwise((2 * qkv + 3 * out) / 5, 5) + r.elementwise(0, 15);
      lt.bwd += r.elementwise((2 * out + 3 * qkv) / 7, 7);
    }
  } else {
    // Scores S = Q·Kᵀ (s×d · d×s) and O = P·V (s×s · s×d) per head; backward dP = dO·Vᵀ,
    // dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q. Softmax (and dropout) read and write the s×s matrix.
    lt.attn_fwd = r.attention_matmul(s, s, d, heads) + r.attention_matmul(s, d, s, heads);
    lt.bwd += r.attention_matmul(s, s, d, heads) + 3 * r.attention_matmul(s, d, s, heads);
    const double probs = n * (m.n_head / t) * s;
    lt.attn_fwd += r.elementwise(2 * e * probs);
    lt.bwd += r.elementwise(4 * e * probs);
    if (m.dropout) {
      lt.attn_fwd += r.elementwise((2 * e + 1) * probs);
      lt.bwd += r.elementwise(2 * (2 * e + 1) * probs);
    }
  }
  lt.fwd += lt.attn_fwd;
  // Element-wise kernels: two norms, two residual adds (with dropout), rotary, the activation;
  // `bytes` is what one fused kernel moves, and eager composites move more in more kernels.
  auto ew = [&](double bytes, double count, Composite c = {}) {
    lt.ew_fwd += r.elementwise(bytes * c.traffic / c.kernels, count * c.kernels);
    lt.bwd += r.elementwise(2 * bytes * c.traffic / c.kernels, count * c.kernels);
  };
  const SoftwareProfile& sw = j.software;
  ew(2 * n * h * e * rep, 2, m.norm == NormKind::rmsnorm ? sw.rmsnorm : Composite{});
  ew((3 * n * h * e + drop * n * h) * rep, 2);
  if (!m.learned_positions) ew(2 * n * (q / t + kv) * e, 1, sw.rotary);
  if (m.ffn == FfnKind::swiglu)
    ew(3 * n * f / t * e, 1, sw.swiglu);
  else
    ew(2 * n * f / t * e, 1);
  lt.fwd += lt.ew_fwd;
  // The "op" policy: the element-wise kernels and every second matmul again (with their casts).
  lt.op_rec = lt.ew_fwd;
  for (const BlockMatmul& mm : op_policy_matmuls(m)) {
    if (!mm.recomputed) continue;
    const double K = mm.row_parallel ? mm.K / t : mm.K;
    const double N = mm.row_parallel ? mm.N : mm.kv ? kv : mm.N / t;
    lt.op_rec += r.linear(n, N, K) + (mm.row_parallel ? r.cast(n * K) : gathered_cast(n * K)) +
                 r.cast(K * N);
  }
  return lt;
}

struct StageTimes {
  double compute = 0, recompute = 0, fwd = 0, bwd = 0, tp = 0, cp = 0, p2p = 0, zero = 0;
  double zero_hidden = 0;
  double tp_slow = 0;  // compute slowed beside the NCCL collectives of tp that it hides
  double total() const { return compute + tp + cp + p2p + zero + tp_slow; }
};

}  // namespace

double matmul_seconds(const DeviceSpec& d, Dtype dt, double M, double N, double K) {
  JobSpec j;
  j.dtype = dt;
  return Rates(d, j).matmul(M, N, K);
}

TimeBreakdown step_time(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                        const Layout& given, int64_t micro_batches) {
  Layout l = given;
  l.zero = j.software.zero_as_run(given, j.dtype);
  const Rates r(c.device, j);
  const StateBytes sb = state_bytes(j);
  const double n = rank_tokens(j, l), e = r.e, t = l.tp;
  const double rep = l.sp ? 1.0 / t : 1.0;
  const LayerTimes lt = layer_times(m, j, l, r);
  // Per layer, averaged over the layers (full/N recomputes one block in N).
  double rec = 0;
  if (l.recompute_op)
    rec = lt.op_rec;
  else if (l.recompute == Recompute::full)
    rec = lt.fwd * l.full_share();
  else if (l.recompute == Recompute::attention && reruns_attention_core(j))
    rec = lt.attn_fwd;

  // Tensor-parallel collectives of one activation (n·h·e bytes) inside the node.
  const GroupPath tpg = group_path(c, l, Dim::tp);
  const double act = n * m.hidden * e;
  const double tp_one = l.tp <= 1 ? 0.0
                        : l.sp    ? reduce_scatter_s(act, tpg) + all_gather_s(act, tpg)
                                  : all_reduce_s(act, tpg);
  // The blocks' gathers: of fp8 elements (1 byte) where the software casts before gathering.
  const double ag_bytes =
      j.dtype == Dtype::fp8 && j.software.tp_fp8_gathers ? n * m.hidden * 1.0 : act;
  const double tp_block = l.tp <= 1 ? 0.0
                          : l.sp    ? reduce_scatter_s(act, tpg) + all_gather_s(ag_bytes, tpg)
                                    : tp_one;
  double tp_layer = tp_block * (4 + 2 * l.full_share());
  // A column-parallel linear's backward collectives as Megatron runs them (below): the input
  // gradient's all-reduce (reduce-scatter with sp) and, with sp, the saved input's gather: of the
  // fp8 copy in a block whose forward gathered fp8 (the row-parallel layers' output-gradient
  // gathers likewise), 16-bit for the LM head (Megatron's own ColumnParallelLinear, not fp8).
  const double col_input_grad = l.sp ? reduce_scatter_s(act, tpg) : all_reduce_s(act, tpg);
  const double col_gather = l.sp ? all_gather_s(ag_bytes, tpg) : 0.0;
  const double head_gather = l.sp ? all_gather_s(act, tpg) : 0.0;
  double tp_layer_hidden = 0;  // NCCL collectives run beside a matmul (they slow it: contention)
  if (l.tp > 1 && !l.async_tp && j.software.tp_dgrad_overlap) {
    // Megatron-LM since 2021-09 (tensor_parallel/layers.py,
    // LinearWithGradAccumulationAndAsyncCommunication; Transformer Engine's Linear the same): a
    // column-parallel layer's backward (QKV, MLP up) launches its input-gradient collective
    // before the weight-gradient matmul and waits for it after, and with sequence parallelism
    // first gathers the layer's saved input for that matmul during the input-gradient matmul.
    // Those run beside matmuls of the forward's size; the row-parallel layers' gathers of the
    // output gradient (sequence parallelism) are needed first and stay exposed.
    const std::vector<double>& mm = lt.linear_fwd;
    double bwd = 0;
    for (double col : {mm[0], mm[2]}) {
      const double exposed = std::max(0.0, col_input_grad - col) + std::max(0.0, col_gather - col);
      bwd += exposed;
      tp_layer_hidden += col_input_grad + col_gather - exposed;
    }
    bwd += 2 * col_gather;  // the row-parallel layers' output-gradient gathers (sp)
    tp_layer = tp_block * 2 * (1 + l.full_share()) + bwd;
  }
  if (l.async_tp && l.tp > 1 && l.sp) {
    // Asynchronous TP (torchtitan's micro-pipelined all-gather + matmul and matmul +
    // reduce-scatter): each collective goes in tp steps, one chunk's transfer during the
    // previous chunk's matmul, so it exposes its first step and what the rest takes beyond its
    // matmul. Forward: all-gathers before QKV and MLP up, reduce-scatters after the attention
    // output and MLP down; backward the reverse, on the input-gradient matmuls (the same size).
    const double ag = all_gather_s(ag_bytes, tpg), rs = reduce_scatter_s(act, tpg);
    auto exposed = [&](double coll, double mm) {
      return coll / t + std::max(0.0, coll * (t - 1) / t - mm);
    };
    const std::vector<double>& mm = lt.linear_fwd;
    const bool dgrad_rs = j.software.async_tp_dgrad_rs;
    const bool ub = j.software.async_tp_userbuffers;
    // A transfer beside one GEMM exposes what it takes beyond it.
    auto bulk = [](double coll, double mm) { return std::max(0.0, coll - mm); };
    // Transformer Engine's userbuffers (Megatron-Core's --tp-comm-overlap; the defaults of
    // initialize_ub in transformer_engine/pytorch/module/base.py, unchanged from TE 1.2 to 1.8)
    // run the gathers feeding QKV and MLP up (forward) and the attention output's and MLP down's
    // input gradients (backward) as "ring_exchange", peer copies on the copy engines with each
    // GEMM in tp chunks: the micro-pipeline above. The forward's reduce-scatters after the
    // attention output and MLP down are "pipeline" (split_overlap_rs): the GEMM in 4 chunks, each
    // chunk's reduce-scatter beside the next chunk's GEMM and the last alone, so a quarter is
    // exposed and the rest beyond the GEMM. The backward's input-gradient reduce-scatters (beside
    // the weight-gradient GEMM) and the gathers of the column-parallel layers' saved inputs for it
    // (beside the input-gradient GEMM) are "bulk": one transfer beside one GEMM.
    auto rs_fwd = [&](double mm) { return ub ? rs / 4 + 0.75 * bulk(rs, mm) : exposed(rs, mm); };
    auto rs_bwd = [&](double mm) { return !dgrad_rs ? rs : ub ? bulk(rs, mm) : exposed(rs, mm); };
    double fwd = exposed(ag, mm[0]) + rs_fwd(mm[1]) + exposed(ag, mm[2]) + rs_fwd(mm[3]);
    double bwd = rs_bwd(mm[0]) + exposed(ag, mm[1]) + rs_bwd(mm[2]) + exposed(ag, mm[3]);
    // Software that keeps the column-parallel layers' inputs split (Megatron) gathers them again
    // for the weight gradients, beside the input-gradient matmuls; torchtitan saves the gathered
    // input.
    if (j.software.tp_dgrad_overlap) bwd += bulk(ag, mm[0]) + bulk(ag, mm[2]);
    if (ub) {
      // Each ring-exchange GEMM runs in tp chunks (t − 1 more fixed costs), each pipelined one in
      // 4 (3 more). Pipeline and bulk run on 16 SMs, ring exchange on 1 with the copy engines;
      // what runs on SMs slows the GEMM beside it. The overlap slowdown is NCCL's, whose
      // all-gather holds 24 of an H100's 132 SMs (the catalog's note); these kernels hold 16:
      // that share of it.
      const double ring = (t - 1) * r.mm_overhead, pipe = 3 * r.mm_overhead;
      fwd += 2 * ring + 2 * pipe;
      bwd += 2 * ring;
      double sm_bwd = dgrad_rs ? (rs - rs_bwd(mm[0])) + (rs - rs_bwd(mm[2])) : 0.0;
      if (j.software.tp_dgrad_overlap) sm_bwd += std::min(ag, mm[0]) + std::min(ag, mm[2]);
      const double sm_fwd = (rs - rs_fwd(mm[1])) + (rs - rs_fwd(mm[3]));
      tp_layer_hidden = 16.0 / 24 * (sm_fwd * (1 + l.full_share()) + sm_bwd);
    }
    if (j.software.async_tp_symm_mem) {
      // PyTorch's SymmetricMemory ops run more on the compute stream than the matmul: a fused
      // gather copies the rank's own shard there (n/t tokens, read and written); a fused
      // reduce-scatter sums the t partial outputs it holds after the peer copies (all n tokens
      // read, the rank's n/t written); each runs every matmul it feeds as t chunk matmuls (t − 1
      // more fixed costs each). Forward: the gather feeding wq, wk, wv (three matmuls), the one
      // feeding the MLP's up projections (w1, w3 under SwiGLU), two reduce-scatters; backward:
      // the two output-gradient gathers and the input-gradient reduce-scatters it fuses.
      const double chunks = (t - 1) * r.mm_overhead;
      const double copy = r.elementwise(2 * ag_bytes / t);
      const double scatter = r.elementwise(act * (1 + 1 / t)) + chunks;
      const double up = m.ffn == FfnKind::swiglu ? 2 : 1;
      fwd += (copy + 3 * chunks) + (copy + up * chunks) + 2 * scatter;
      bwd += 2 * (copy + chunks) + (dgrad_rs ? 2 * scatter : 0.0);
    }
    tp_layer = fwd * (1 + l.full_share()) + bwd;
  }

  // The LM head and loss on the last stage; the embedding on the first.
  const double V = double(m.vocab);
  const double head_fwd = r.matmul(n, V / t, m.hidden) + r.elementwise(2 * n * m.hidden * e * rep);
  const double head_bwd =
      r.matmul(n, m.hidden, V / t) + r.matmul(m.hidden, V / t, n) +
      r.elementwise(4 * n * m.hidden * e * rep) +
      r.elementwise(n * V / t * j.software.loss_bytes(e) / j.software.loss_kernels,
                    j.software.loss_kernels);
  const double embed = r.elementwise(n * m.hidden * e, 1) + r.elementwise(2 * n * m.hidden * e, 1);
  // The head is a column-parallel linear: its forward gathers its input (sp), its backward
  // reduces the input gradient. Under Megatron (its own ColumnParallelLinear, with or without
  // asynchronous TP) the backward's collectives run beside the head's weight-gradient and
  // input-gradient matmuls, as the blocks' do.
  double head_tp = tp_one, head_tp_hidden = 0;
  if (l.tp > 1 && j.software.tp_dgrad_overlap) {
    const double dgrad = r.matmul(n, m.hidden, V / t), wgrad = r.matmul(m.hidden, V / t, n);
    const double exposed =
        std::max(0.0, col_input_grad - wgrad) + std::max(0.0, head_gather - dgrad);
    head_tp = head_gather + exposed;
    head_tp_hidden = col_input_grad + head_gather - exposed;
  }

  // Pipeline sends, once per virtual stage: the boundary activation forward and its gradient
  // backward, each split over the tp ranks (sequence parallelism, Megatron-LM's scatter-gather,
  // DeepSpeed's partitioned tensors) or every rank's whole copy, as the software sends them. A
  // split tensor that is not sequence-parallel is gathered over the tp group on arrival, and
  // DeepSpeed gathers its own partitioned output back before the backward. Blocking sends and
  // receives (DeepSpeed's engine) put both of a pass's transfers, the one in and the one out, on
  // a middle stage's path (pp ≥ 3); a batched send-and-receive pair costs one transfer.
  const SoftwareProfile& sw = j.software;
  const bool gathered = !l.sp && t > 1;
  auto transfer = [&](bool split) { return p2p_s(split ? act / t : act, c, l); };
  const double gather = gathered ? all_gather_s(act, tpg) : 0.0;
  const double gathers = (sw.p2p_split_tp ? 1 : 0) + (sw.p2p_grads_split_tp ? 1 : 0) +
                         (sw.p2p_split_tp && sw.p2p_rebuild_output ? 1 : 0);
  const double p2p_mb =
      l.pp > 1 ? l.vpp * ((sw.p2p_serial && l.pp >= 3 ? 2.0 : 1.0) *
                              (transfer(sw.p2p_split_tp) + transfer(sw.p2p_grads_split_tp)) +
                          gathers * gather)
               : 0.0;

  // Context parallelism: a ring of cp ranks passes each key/value chunk (n tokens' K and V on a
  // tp rank) cp − 1 times per layer, each pass during one chunk's attention (Megatron-Core and
  // Transformer Engine's ring attention); backward passes the chunk again and its gradient.
  double cp_layer = 0;
  // Forward passes of the attention core per layer: once, again under full recomputation, and
  // again under selective recomputation where the core runs again (its ring or gather is inside).
  const double core_passes =
      1 + l.full_share() + (l.recompute == Recompute::attention && reruns_attention_core(j));
  if (l.cp > 1 && j.cp_comm == JobSpec::CpComm::all_gather) {
    // All-gather-based context parallelism: every rank gathers the whole sequence's keys and
    // values before its attention, and backward gathers them again and reduce-scatters their
    // gradients; none of it overlaps (Llama 3, section 3.3.2, which chose it over a ring and
    // leaves the all-gather's latency exposed on the critical path).
    const GroupPath cpg = group_path(c, l, Dim::cp);
    const double kv_all = l.cp * n * 2 * kv_heads_per_rank(m, l.tp) * m.head_dim() * e;
    const double ag = all_gather_s(kv_all, cpg), rs = reduce_scatter_s(kv_all, cpg);
    cp_layer = ag * core_passes + ag + rs;
  } else if (l.cp > 1) {
    const GroupPath cpg = group_path(c, l, Dim::cp);
    const double chunk = n * 2 * kv_heads_per_rank(m, l.tp) * m.head_dim() * e;
    const double pass =
        cpg.nodes > 1 ? cpg.net_lat + chunk / cpg.net_bw : cpg.intra_lat + chunk / cpg.intra_bw;
    const double attn_step = lt.attn_fwd / l.cp;
    const double fwd = (l.cp - 1) * std::max(0.0, pass - attn_step);
    const double bwd = (l.cp - 1) * std::max(0.0, 2 * pass - 2.5 * attn_step);
    cp_layer = fwd * core_passes + bwd;
  }

  // ZeRO's collectives run over its shard group (all of dp·cp, or one replica's with shard=);
  // hybrid sharding then all-reduces each shard's gradients across the replicas.
  const GroupPath dpg = group_path(c, l, Dim::dp);
  const GroupPath zg = group_path(c, l, Dim::shard), rg = group_path(c, l, Dim::replica);
  const double z_ranks = l.zero_group();
  auto reduce_grads = [&](double bytes) {  // ZeRO's reduce-scatter, then across the replicas
    return reduce_scatter_s(bytes, zg) + all_reduce_s(bytes / z_ranks, rg);
  };
  const bool bf16_opt = j.software.runs_bf16_optimizer(given, j.dtype);
  // Bytes per parameter of the gradients the step reduces and the optimizer reads: the training
  // dtype's, or BF16_Optimizer's fp32 copies.
  const double step_grad_bytes = bf16_opt ? 4.0 : sb.grads;
  const std::vector<Stage> stages = pipeline_stages(m, l, micro_batches);
  std::vector<StageTimes> st(stages.size());
  for (size_t i = 0; i < stages.size(); i++) {
    const Stage& s = stages[i];
    StageTimes& x = st[i];
    x.fwd = s.layers * lt.fwd + (s.first ? embed / 3 : 0) + (s.last ? head_fwd : 0);
    x.bwd = s.layers * lt.bwd + (s.first ? 2 * embed / 3 : 0) + (s.last ? head_bwd : 0);
    x.recompute = s.layers * rec;
    if (bf16_opt) {
      // After each backward, every parameter tensor's bf16 gradient is cast to fp32 (2 bytes
      // read, 4 written) and added into its fp32 copy (8 read, 4 written): two kernels a tensor.
      const double tensors =
          s.layers * (m.bias ? 12.0 : 6.0) + (s.first ? 1 : 0) + (s.last ? 2 : 0);
      x.bwd += r.elementwise(s.params * 18 / (2 * tensors), 2 * tensors);
    }
    x.compute = x.fwd + x.bwd + x.recompute;
    x.tp = s.layers * tp_layer + (s.first ? tp_one : 0) + (s.last ? head_tp : 0);
    x.tp_slow =
        c.device.overlap_slowdown * (s.layers * tp_layer_hidden + (s.last ? head_tp_hidden : 0));
    x.cp = s.layers * cp_layer;
    x.p2p = p2p_mb;
    if (l.dp_cp() > 1 && l.zero >= 2) {
      // ZeRO-2/3 (FSDP) work unit by unit: a layer, or the embedding / the head with their
      // tables. Each unit's weights are gathered just before its forward and again before its
      // backward (ZeRO-3), the next unit's gather running during this one's compute (prefetch
      // one ahead, as FSDP and DeepSpeed do); each unit's gradients are reduce-scattered after
      // its backward, during the next unit's. So every unit pays its collective's latency (a
      // ring's N − 1 steps), and a pass exposes its first gather, whatever of each later one the
      // previous unit's compute does not cover, and (backward) the last reduce-scatter.
      struct Unit {
        double params, fwd, bwd;
      };
      const std::vector<ZeroUnit> zu = zero_units(m, l, s);
      std::vector<Unit> units;
      for (size_t k = 0; k < zu.size(); k++) {
        const bool embedding = s.first && k == 0, head = s.last && k + 1 == zu.size();
        units.push_back({zu[k].params,
                         embedding ? embed / 3
                         : head    ? head_fwd
                                   : lt.fwd,
                         embedding ? 2 * embed / 3
                         : head    ? head_bwd
                                   : lt.bwd + rec});
      }
      // FSDP's ZeRO-2 (SHARD_GRAD_OP) gathers each unit before its forward and keeps it
      // through backward; ZeRO-3 gathers it again for backward (and, where the software does,
      // for a full recompute) unless DeepSpeed's reuse window keeps it (stages.h).
      const bool z3 = l.zero >= 3, fwd_gathers = z3 || j.software.zero2_unit_gathers;
      const double reuse = j.software.zero3_reuse_numel;
      const std::vector<bool> kept = kept_through_backward(zu, z3 ? reuse : 0.0);
      const size_t n_units = units.size();
      // FSDP's root unit (the embedding, final norm and head, which no block unit wraps) is
      // gathered before the forward, kept through the backward and reduce-scattered after it,
      // as one unit: fold the head into unit 0.
      const bool root = j.software.fsdp_root_kept && s.first && s.last && n_units > 1;
      std::vector<double> unit_params(n_units);
      for (size_t k = 0; k < n_units; k++) unit_params[k] = units[k].params;
      if (root) unit_params[0] += unit_params[n_units - 1], unit_params[n_units - 1] = 0;
      std::vector<double> ag(n_units), rs(n_units), gathers_bwd(n_units, 0.0);
      // A tied head gathers the embedding's table again past DeepSpeed's reuse window.
      const double regather_table = z3 ? tied_head_regather(m, s, zu, reuse) : 0.0;
      for (size_t k = 0; k < n_units; k++) {
        ag[k] = fwd_gathers && unit_params[k] > 0 ? all_gather_s(unit_params[k] * sb.gathered, zg)
                                                  : 0.0;
        if (k + 1 == n_units && regather_table > 0)
          ag[k] += all_gather_s(regather_table * sb.gathered, zg);
        rs[k] = unit_params[k] > 0 ? reduce_grads(unit_params[k] * sb.grads) : 0.0;
        // The recomputed forward's gather serves the backward too when the unit's own modules,
        // run again and then backward, fit in DeepSpeed's reuse window.
        const bool regather =
            j.software.zero3_regathers_for_recompute && !(reuse > 0 && 2 * zu[k].params < reuse);
        const bool root_unit = root && (k == 0 || k + 1 == n_units);
        if (z3 && !kept[k] && !root_unit) gathers_bwd[k] = 1 + (regather ? zu[k].recomputed : 0.0);
        if (j.software.fsdp_copy_out && unit_params[k] > 0) {
          // FSDP2 copies every gathered unit into its parameters on the compute stream.
          const double copy = r.elementwise(2 * unit_params[k] * sb.gathered);
          const double f = fwd_gathers ? copy : 0.0, b = gathers_bwd[k] * copy;
          x.fwd += f, x.bwd += b, x.compute += f + b;
        }
      }
      // DeepSpeed prefetches nothing while a single weight of the running layer fills its
      // live-parameter budget: every layer's gathers then wait, exposed.
      const double max_live = j.software.zero3_max_live_numel;
      const double largest_weight =
          m.hidden * std::max(m.ffn_hidden / t, (m.n_head * m.head_dim()) / t);
      const bool no_prefetch = z3 && max_live > 0 && largest_weight >= max_live;
      double exposed_fwd = 0, exposed_bwd = rs[0], serial = 0;  // unit 0's backward is last
      for (size_t k = 0; k < n_units; k++) {
        serial += ag[k] + gathers_bwd[k] * ag[k] + rs[k];
        // Forward, in unit order: the gather of unit k hides behind unit k − 1's forward.
        exposed_fwd += k == 0 || no_prefetch ? ag[k] : std::max(0.0, ag[k] - units[k - 1].fwd);
        // Backward, in reverse order: unit k's gathers and the reduce-scatter of unit k + 1
        // (finished just before) share the link during unit k + 1's backward; the last unit's
        // gathers come before any backward.
        exposed_bwd += k + 1 == n_units ? gathers_bwd[k] * ag[k]
                       : no_prefetch
                           ? gathers_bwd[k] * ag[k] + std::max(0.0, rs[k + 1] - units[k + 1].bwd)
                           : std::max(0.0, gathers_bwd[k] * ag[k] + rs[k + 1] - units[k + 1].bwd);
      }
      x.zero = j.overlap_dp ? exposed_fwd + exposed_bwd : serial;
      x.zero_hidden = serial - x.zero;
    }
  }
  size_t crit = 0;
  double sum = 0, mean_fwd = 0, mean_bwd = 0;
  for (size_t i = 0; i < st.size(); i++) {
    if (st[i].total() > st[crit].total()) crit = i;
    sum += st[i].total();
    mean_fwd += st[i].fwd / st.size();
    mean_bwd += st[i].bwd / st.size();
  }
  const double mean = sum / st.size();
  const double mbs = double(micro_batches);

  TimeBreakdown tb;
  tb.critical_stage = int(crit);
  tb.compute = mbs * st[crit].compute;
  tb.recompute = mbs * st[crit].recompute;
  tb.tp_comm = mbs * st[crit].tp;
  tb.cp_comm = mbs * st[crit].cp;
  tb.pp_p2p = mbs * st[crit].p2p;
  tb.zero_exposed = mbs * st[crit].zero;
  tb.bubble = double(l.pp - 1) / l.vpp * mean;

  // Once per step: all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1) of the gradients after the
  // last backward, all-gather of the updated 16-bit weights (ZeRO-1/2) before the next forward.
  // Stage k finishes its last backward k stage-backwards before stage 0 and starts its first
  // forward k stage-forwards after it, which is time its collectives can hide in.
  double dp_beside = 0;
  for (size_t i = 0; i < stages.size(); i++) {
    if (l.dp_cp() <= 1) break;
    const double grads = stages[i].params * sb.grads, weights = stages[i].params * sb.gathered;
    double after_bwd = 0, before_fwd = 0;
    if (l.zero == 0) after_bwd = all_reduce_s(grads, dpg);
    if (l.zero == 1) after_bwd = reduce_grads(grads);
    if (bf16_opt) after_bwd = all_reduce_s(stages[i].params * step_grad_bytes, dpg);
    if (l.zero == 1 || (l.zero == 2 && !j.software.zero2_unit_gathers))
      before_fwd = all_gather_s(weights, zg);
    const double k = double(i) / l.vpp;
    // After the last micro-batch (DeepSpeed's engine) only the other stages' work is left to
    // hide in; otherwise the stage's own last backward (and first forward) as well.
    const bool own = !(sw.dp_after_last_microbatch && l.pp > 1);
    const double bwd_window = (own ? st[i].bwd + st[i].recompute : 0.0) + k * mean_bwd;
    const double fwd_window = (own ? st[i].fwd : 0.0) + k * mean_fwd;
    const double exposed = j.overlap_dp ? std::max(0.0, after_bwd - bwd_window) +
                                              std::max(0.0, before_fwd - fwd_window)
                                        : after_bwd + before_fwd;
    tb.dp_comm = std::max(tb.dp_comm, after_bwd + before_fwd);
    tb.dp_exposed = std::max(tb.dp_exposed, exposed);
    // What of it runs beside this stage's compute, not beside its idle warm-up and cool-down:
    // the gradients' collective starts during the last backward, the weights' gather at the
    // step's start, k stage-forwards before this stage's first forward.
    if (j.overlap_dp && own)
      dp_beside = std::max(dp_beside, std::min(after_bwd, st[i].bwd + st[i].recompute) +
                                          std::clamp(before_fwd - k * mean_fwd, 0.0, st[i].fwd));
  }

  // The optimizer reads and writes its state, the weights and the gradients once (16-bit mixed:
  // fp32 master, m, v read and written, 16-bit weights written, gradients read), plus the
  // gradient-norm read and the zeroing write of the gradients.
  for (const Stage& s : stages) {
    const double shard = s.params / (l.zero >= 1 ? l.zero_group() : 1);
    const double per_param =
        2 * sb.optimizer + (j.dtype == Dtype::fp32 ? 2 : 1) * sb.weights + 3 * step_grad_bytes;
    tb.optimizer = std::max(tb.optimizer, r.elementwise(shard * per_param / 4, 4));
  }
  // The hidden data-parallel and ZeRO collectives ran beside compute, which ran
  // overlap_slowdown slower for as long as they did; so did Megatron's backward tensor-parallel
  // collectives (NCCL kernels too) and, at 16/24 of the rate, Transformer Engine's userbuffers'
  // reduction kernels (asynchronous TP under Megatron-Core), whose part is in the stages' time
  // each micro-batch (and so in the bubble) and is shown here with the rest. torchtitan's
  // SymmetricMemory copies (copy engines) and context parallelism's ring passes are not charged:
  // no measurement of their contention was found.
  const double beside = c.device.overlap_slowdown * (mbs * st[crit].zero_hidden + dp_beside);
  tb.contention = beside + mbs * st[crit].tp_slow;
  // A tied embedding under pp lives on the first stage and, as a copy, on the last; after the
  // last micro-batch their gradients are summed by an all-reduce of the two ranks (Megatron-Core's
  // finalize_model_grads, _allreduce_word_embedding_grads, on the main gradients; DeepSpeed's
  // ReduceTiedGrads), which waits for both: a two-rank all-reduce moves the tensor each way once,
  // what one send of it costs. Counted with the pipeline's traffic.
  double tied_sum = 0;
  if (l.pp > 1 && m.tied_embeddings)
    tied_sum = p2p_s(double(m.vocab) * m.hidden / t * step_grad_bytes, c, l);
  tb.pp_p2p += tied_sum;
  tb.step = mbs * st[crit].total() + tb.bubble + tb.dp_exposed + tb.optimizer + beside + tied_sum;
  return tb;
}

}  // namespace kiln::plan
