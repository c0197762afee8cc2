#include "plan/memory_model.h"

#include <algorithm>

#include "plan/recompute.h"
#include "plan/stages.h"

namespace kiln::plan {

StateBytes state_bytes(const JobSpec& j) {
  if (j.dtype == Dtype::fp32) return {4, 4, 8, 4};
  const double fp8_copy = j.dtype == Dtype::fp8 ? 1 : 0;
  // --fp8-param-gather: ZeRO's weight all-gathers move the fp8 copy (1 byte per parameter).
  return {2 + fp8_copy, j.grad_bytes(), 12, j.fp8_param_gather ? 1.0 : 2.0};
}

double layer_activation_bytes(const ModelSpec& m, const JobSpec& j, const Layout& l, Recompute r) {
  const double n = rank_tokens(j, l);
  const double e = activation_bytes(j.dtype);
  const double h = m.hidden, d = m.head_dim(), a = m.n_head;
  const double g_rank = kv_heads_per_rank(m, l.tp);  // key/value heads on this rank
  const double f = m.ffn_hidden, s = j.seq_len, t = l.tp;
  const double rep = l.sp ? 1.0 / t : 1.0;
  const double drop = m.dropout ? 1.0 : 0.0;
  if (r == Recompute::full) return n * h * e * rep;
  // The linear layers' kept inputs: 16-bit, or fp8 where the software keeps the fp8 cast
  // (Transformer Engine). torchao's Float8Linear keeps what it is given, which under torchtitan's
  // fp8 TP plan is the fp8 cast for every linear (PrepareFloat8ModuleInput before the gather,
  // Float8RowwiseParallel before the attention output and MLP down).
  const bool fp8 = j.dtype == Dtype::fp8;
  const bool fp8_kept = fp8 && j.software.fp8_saves_fp8_inputs;
  const bool dtensor_tp = j.software.tp_keeps_gathered_inputs && l.tp > 1;
  const bool fp8_row_kept = fp8_kept || (fp8 && j.software.tp_fp8_gathers && dtensor_tp);
  const double in = fp8_kept ? 1.0 : e, row_in = fp8_row_kept ? 1.0 : e;
  // The norms' outputs, the QKV and MLP-up inputs: with sequence parallelism each rank keeps its
  // 1/t of the sequence and gathers it again in backward (Megatron). DTensor TP keeps the gathered
  // whole for the linears (fp8 where the gather was), and torchtitan's eager RMSNorm keeps its
  // normalised output (sharded) for the weight's gradient besides.
  double norm_out = h * in * rep;
  if (dtensor_tp && l.sp) norm_out += h * (fp8 && j.software.tp_fp8_gathers ? 1.0 : e);
  // The two norms' inputs (the residual stream; an eager fp32 norm's fp32 copy of it) and
  // dropout's masks, split with sp.
  const double norm_in = j.software.norm_keeps_fp32_input ? 4.0 : e;
  const double replicated = 2 * h * norm_in + 2 * h * drop;
  // Q and K, V (K and V of replicated heads are whole on every rank) and the attention output,
  // which the output projection keeps as its input: the same tensor in 16 bits; in fp8 its own
  // fp8 copy, besides the 16-bit one a flash kernel keeps for its backward (not when the core
  // attention is recomputed, nor unfused, where only the projection keeps it).
  const bool flash_keeps_out =
      j.flash_attention && !(r == Recompute::attention && reruns_attention_core(j));
  const double out = fp8_row_kept ? 1.0 + (flash_keeps_out ? e : 0.0) : e;
  double split = (a * d * e + a * d * out) + t * (2 * g_rank * d * e);
  // The MLP's up projection output (both halves for SwiGLU) and the down projection's input.
  split += (m.ffn == FfnKind::swiglu ? 2 : 1) * f * e + f * row_in;
  if (j.flash_attention)
    split += a * 4;  // the fp32 log-sum-exp per query head and token
  else if (r == Recompute::none)
    split += a * s * (e + drop * (1 + e));
  return n * (replicated * rep + 2 * norm_out + split / t);
}

double kept_activation_bytes(const ModelSpec& m, const JobSpec& j, const Layout& l) {
  if (l.recompute_op) return op_policy_bytes(m, l, rank_tokens(j, l), activation_bytes(j.dtype));
  const double share = l.full_share();
  if (share <= 0 || share >= 1) return layer_activation_bytes(m, j, l, l.recompute);
  return share * layer_activation_bytes(m, j, l, Recompute::full) +
         (1 - share) * layer_activation_bytes(m, j, l, Recompute::none);
}

MemoryBreakdown memory_per_gpu(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                               const Layout& given, int64_t micro_batches) {
  Layout l = given;
  l.zero = j.software.zero_as_run(given, j.dtype);
  const StateBytes sb = state_bytes(j);
  const double e = activation_bytes(j.dtype);
  const double n = rank_tokens(j, l);
  const double rep = l.sp ? 1.0 / l.tp : 1.0;
  const double dp = l.zero_group();  // ZeRO shards over the ranks holding the same weights, or
                                     // over each replica's share of them (shard=)
  const double per_layer_slice = double(count_params(m).per_layer) / l.tp;
  const double act_layer = kept_activation_bytes(m, j, l);
  const double act_layer_full = layer_activation_bytes(m, j, l, Recompute::none);
  MemoryBreakdown best;
  best.total = -1;
  for (const Stage& st : pipeline_stages(m, l, micro_batches)) {
    MemoryBreakdown mb;
    mb.stage = st.index;
    mb.weights = st.params * sb.weights / (l.zero >= 3 ? dp : 1);
    // DeepSpeed's BF16_Optimizer keeps full fp32 gradient copies (4 bytes) beside the bf16
    // gradients (2), whatever --grad-reduce says.
    mb.grads = j.software.runs_bf16_optimizer(given, j.dtype)
                   ? st.params * 6
                   : st.params * sb.grads / (l.zero >= 2 ? dp : 1);
    mb.optimizer = st.params * sb.optimizer / (l.zero >= 1 ? dp : 1);
    mb.activations = st.in_flight_layers * act_layer;
    if (st.first && m.dropout) mb.activations += st.in_flight_microbatches * n * m.hidden * rep;
    if (st.last) {
      // Final norm input and output, and the logits of the micro-batch in its loss: the
      // vocabulary-parallel (or eager) cross-entropy keeps an fp32 copy next to 16-bit logits;
      // a fused loss keeps the logits and writes their gradient beside them.
      mb.activations += 2 * n * m.hidden * e * rep;
      const double per_logit = j.software.fused_loss ? 2 * e : e == 4 ? 4 : e + 4;
      mb.activations += n * double(m.vocab) / l.tp * per_logit;
    }
    // Backward needs the gradients of one layer's activations at a time (about one layer's
    // activations); full recompute also rebuilds one layer's activations; ZeRO-3 gathers the
    // 16-bit weights of the running layer and the next one, and one layer's gradients.
    mb.transient = act_layer_full;
    if (l.recompute == Recompute::full || l.recompute_op) mb.transient += act_layer_full;
    if (l.zero >= 3) {
      // DeepSpeed's reuse window keeps the units near the forward's end gathered into the
      // backward (stages.h): at the turn they are all live at once.
      double kept = 0;
      const std::vector<ZeroUnit> units = zero_units(m, l, st);
      const std::vector<bool> keep = kept_through_backward(units, j.software.zero3_reuse_numel);
      for (size_t k = 0; k < units.size(); k++) kept += keep[k] ? units[k].params : 0.0;
      // A tied head's table, gathered again at the forward's end, is live with them.
      if (!keep.empty() && keep.back())
        kept += tied_head_regather(m, st, units, j.software.zero3_reuse_numel);
      // FSDP's root unit (embedding, final norm, head) stays gathered through the step.
      const double root = j.software.fsdp_root_kept && st.first && st.last && units.size() > 1
                              ? units.front().params + units.back().params
                              : 0.0;
      mb.transient +=
          (std::max(2 * per_layer_slice, kept) + root) * sb.gathered + per_layer_slice * sb.grads;
    }
    // Context parallelism's ring: the key/value chunk being used and the one arriving.
    // (all-gather-based: the whole sequence's keys and values, and their gradients' buffer).
    if (l.cp > 1)
      mb.transient += (j.cp_comm == JobSpec::CpComm::all_gather ? 2.0 * l.cp : 2.0) * n * 2 *
                      kv_heads_per_rank(m, l.tp) * m.head_dim() * e;
    const double counted = mb.weights + mb.grads + mb.optimizer + mb.activations + mb.transient;
    mb.allowance = counted * j.mem_allowance;
    mb.reserved = c.device.reserved_gib * double(1 << 30);
    mb.total = counted + mb.allowance + mb.reserved;
    mb.capacity = c.device.memory_gib * double(1 << 30);
    if (mb.total > best.total) best = mb;
  }
  return best;
}

}  // namespace kiln::plan
