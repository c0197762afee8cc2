#include "plan/software.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "core/closest_name.h"
#include "core/error.h"

namespace kiln::plan {

double FlashRate::at(double tokens) const {
  if (points.empty()) return 0;
  if (tokens <= points.front().first) return points.front().second;
  for (size_t i = 1; i < points.size(); i++) {
    const auto [t0, f0] = points[i - 1];
    const auto [t1, f1] = points[i];
    if (tokens <= t1) return f0 + (f1 - f0) * std::log2(tokens / t0) / std::log2(t1 / t0);
  }
  return points.back().second;
}

double SoftwareProfile::flash_flops(const DeviceSpec& d, double tokens) const {
  for (const FlashRate& r : flash_of_peak)
    if (r.arch == d.arch) return r.at(tokens) * d.peak_tflops_16 * 1e12;
  return 0;
}

double SoftwareProfile::grad_bytes(Dtype dt) const {
  if (dt == Dtype::fp32) return 4;
  return dt == Dtype::fp16 ? grad_bytes_fp16 : grad_bytes_bf16;
}

std::vector<std::string> SoftwareProfile::precisions() const {
  std::vector<std::string> out;
  for (Dtype x : {Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::fp8})
    if (trains_in(x)) out.push_back(dtype_name(x));
  return out;
}

int SoftwareProfile::zero_as_run(const Layout& l, Dtype dt) const {
  if (runs_bf16_optimizer(l, dt)) return 1;
  return fsdp_pp_once_per_step && l.pp > 1 && l.zero >= 2 ? 1 : l.zero;
}

// The numbers, each with its source (docs/planner.md, "Software profiles", has the arithmetic):
//
// Flash attention, forward + backward, causal, head dimension 128, as a fraction of the dense
// 16-bit peak:
//   FlashAttention-2 on A100 and H100: the forward + backward benchmark of its paper (Dao 2023,
//     arXiv:2307.08691), as the repository publishes it (Dao-AILab/flash-attention,
//     assets/flash2_a100_fwd_bwd_benchmark.png and flash2_h100_fwd_bwd_benchmark.png, panel (d):
//     causal, head dimension 128), in TFLOP/s at 512, 1K, 2K, 4K, 8K and 16K tokens:
//       A100 80GB SXM4 (312 peak): 99, 133, 155, 173, 182, 189;
//       H100 80GB SXM5 (989 peak): 163, 221, 265, 294, 308, 328.
//     At 16K tokens the H100 figure is 0.33 of peak, as the FlashAttention-3 paper's abstract
//     puts it ("FlashAttention-2 achieving only 35% utilization on the H100"); beyond 16K the
//     last point holds.
//   cuDNN fused attention under Transformer Engine on H100 (Megatron-Core's default on Hopper):
//     0.50 — the same paper's cuDNN and FA3 curves: forward about 0.6 of peak at 8K tokens,
//     backward 1.5–1.75× FlashAttention-2's; with backward's 2.5× forward's FLOPs,
//     3.5 / (1/0.6 + 2.5/0.47) ≈ 0.50.
// Eager composites, counted from the op sequence (bytes for e = 2):
//   RMSNorm x·rsqrt(mean(x²) + ε)·w computed in fp32 (torchtitan's and Llama's reference
//     RMSNorm): float(), pow, mean, rsqrt, mul, type_as, mul by the weight: 7 kernels, 36 bytes
//     per element against a fused kernel's 4: 9×.
//   Rotary via view_as_complex in fp32 (the Llama reference apply_rotary_emb): float(), complex
//     multiply, type_as: 3 kernels, 20 bytes against 4: 5×.
//   SwiGLU silu(x₁)·x₃: silu, mul: 2 kernels, 5e against a fused kernel's 3e: 5/3×.
//   PyTorch's native layer_norm and gelu are single kernels in eager mode as well.
// Gradients: Megatron-LM sets accumulate_allreduce_grads_in_fp32 for bf16
//   (megatron/training/arguments.py), so gradients are kept and reduced in fp32 (fp16 runs keep
//   16-bit gradients); torchtitan's FSDP2 reduces in mixed_precision_reduce = "float32" (its
//   default, torchtitan/config_manager.py); PyTorch FSDP under Composer (llm-foundry's PURE, and
//   DEFAULT from Composer 0.13.5 to 0.16) and DeepSpeed reduce in the 16-bit training dtype;
//   Composer 0.17's DEFAULT reduces in fp32, which a job says with --grad-reduce (JobSpec).
// Pipeline sends. Megatron-LM scatters the boundary activation and its gradient over the tp ranks
//   and gathers them on arrival (scatter_gather_tensors_in_pipeline; with sequence parallelism
//   they are split already), and sends and receives in batched pairs (send_forward_recv_backward).
//   DeepSpeed's pipeline engine (deepspeed/runtime/pipe/engine.py) partitions the activation over
//   the tp ranks (is_pipe_partitioned, since the engine's first version, 2020-09) and the receiver
//   gathers it (PartitionedTensor.full()); it partitions the gradient as well since "Big science
//   related changes" (#1407, 2021-09-29; before it is_grad_partitioned was False, and EleutherAI's
//   DeeperSpeed fork of 2021-09 that GPT-NeoX-20B names still sends it whole). Its p2p.send and
//   p2p.recv are blocking dist.send/recv (or a broadcast in a group of two), and TrainSchedule
//   (pipe/schedule.py) issues RecvActivation and SendGrad, or SendActivation and RecvGrad, one
//   after the other before each pass (SendGrad before RecvActivation since #2862, 2023): four
//   transfers on a middle stage's path per micro-batch where Megatron's pairs cost two. A replay
//   of TrainSchedule's steps with blocking rendezvous (tests/plan/software_test.cpp) gives 2m
//   transfers per step at p = 2 and 4m − 2 to 4m + 2(p − 4) from p = 3; kiln charges 2 or 4 a
//   micro-batch, in the bubble as well. Before each backward a stage also gathers its own
//   partitioned output back (part_output.full()).
// fp8 casts, per element of each tensor cast (a linear layer's input, weight and output
//   gradient), bytes = a·e + b:
//   Transformer Engine (delayed scaling, amax from history): one fused cast-transpose kernel
//     reads the tensor and writes the fp8 copy and its transpose: e + 2, 1 kernel.
//   torchao Float8Linear, dynamic tensor-wise scaling, eager: abs, max (amax), mul by the
//     scale, clamp, cast to fp8, a transposed copy: 7e + 3, 6 kernels.
//   The same under torch.compile: an amax read, then one kernel writing the cast and its
//     transpose: 2e + 2, 2 kernels.
// Asynchronous tensor parallelism: Megatron-Core's --tp-comm-overlap (Transformer Engine's
//   userbuffers, megatron/training/arguments.py) and torchtitan's enable_async_tensor_parallel,
//   which torchtitan refuses without torch.compile (its parallelize_llama checks
//   compile.enable); Megatron-DeepSpeed, PyTorch FSDP and kiln's trainer have no such mode.
// FSDP2 under pipeline parallelism (torchtitan): torchtitan/distributed/fsdp.py,
//   get_fsdp_reshard_after_forward_policy, resolves the "default" policy to
//   reshard_after_forward = not pp_enabled, "to avoid per-microbatch all-gathers"; PyTorch's
//   pipelining stage (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync) turns
//   gradient sync and resharding after backward off for every micro-batch but the last. So a
//   stage gathers its weights once per step (first forward), keeps them and the unsharded
//   gradients through the micro-batches, and reduce-scatters once: ZeRO-1's traffic and memory.
namespace {

// A benchmark row: TFLOP/s at 512, 1K, 2K, 4K, 8K and 16K tokens on a device of `peak`.
FlashRate of_peak(std::string arch, double peak, std::vector<double> tflops) {
  FlashRate r{std::move(arch), {}};
  for (size_t i = 0; i < tflops.size(); i++)
    r.points.push_back({512.0 * double(1 << i), tflops[i] / peak});
  return r;
}

// The entry of `list` called `name`, or an error naming the flag, the closest name and the list.
template <class T>
const T& find_named(const std::vector<T>& list, const std::string& name, const char* flag,
                    const char* what) {
  std::vector<std::string> names;
  for (const T& x : list) {
    if (x.name == name) return x;
    names.push_back(x.name);
  }
  const std::string close = closest_name(name, names);
  fail("unknown {} '{}'{}; {} are: {}", flag, name,
       close.empty() ? "" : " (did you mean '" + close + "'?)", what, join_names(names));
}

// FlashAttention-2's paper benchmark, causal, head dimension 128 (sources above).
const FlashRate& fa2_a100() {
  static const FlashRate r = of_peak("ampere", 312, {99, 133, 155, 173, 182, 189});
  return r;
}
const FlashRate& fa2_h100() {
  static const FlashRate r = of_peak("hopper", 989, {163, 221, 265, 294, 308, 328});
  return r;
}

}  // namespace

// The same charts give the kernels FlashAttention-2 was compared with (panel (d), causal, head
// dimension 128): on A100 FlashAttention 55, 62, 69, 76, 80, 83; xformers 58, 72, 82, 87, 91, 92;
// Triton 50, 61, 68, 74, 78, 80 TFLOP/s; on H100 FlashAttention 98, 109, 108, 126, 135, 137 (the
// H100 chart has no xformers or Triton bars). The charts' "Triton" is OpenAI Triton's fused
// attention (triton.ops.flash_attention: benchmarks/benchmark_flash_attention.py at 60499abc,
// which imports it), not the Triton FlashAttention llm-foundry's attn_impl: triton runs
// (HazyResearch's flash_attn_triton.py, whose header puts its forward + backward slightly below
// FlashAttention 1's; plan such runs with flash1).
const std::vector<AttentionKernel>& attention_kernels() {
  static const std::vector<AttentionKernel> k = {
      {"flash2", "FlashAttention-2 (Dao 2023)", {fa2_a100(), fa2_h100()}},
      {"flash1",
       "FlashAttention (Dao et al. 2022), flash-attn 1.x",
       {of_peak("ampere", 312, {55, 62, 69, 76, 80, 83}),
        of_peak("hopper", 989, {98, 109, 108, 126, 135, 137})}},
      {"xformers",
       "xformers memory-efficient attention (Llama 1)",
       {of_peak("ampere", 312, {58, 72, 82, 87, 91, 92})}},
      {"openai-triton",
       "OpenAI Triton's fused attention (triton.ops.flash_attention, 2023; llm-foundry's "
       "attn_impl: triton is another kernel, planned as flash1)",
       {of_peak("ampere", 312, {50, 61, 68, 74, 78, 80})}},
  };
  return k;
}

const AttentionKernel& find_attention_kernel(const std::string& name) {
  return find_named(attention_kernels(), name, "--attention-kernel",
                    "the kernels with a published benchmark");
}

const std::vector<SoftwareProfile>& software_catalog() {
  static const std::vector<SoftwareProfile> cat = [] {
    const std::vector<FlashRate> fa2 = {fa2_a100(), fa2_h100()};
    const Composite rmsnorm_eager{9, 7}, rotary_eager{5, 3}, swiglu_eager{5.0 / 3, 2};
    std::vector<SoftwareProfile> c;
    SoftwareProfile megatron;
    megatron.name = "megatron";
    megatron.description =
        "Megatron-LM / Megatron-Core: fused kernels, Transformer Engine (cuDNN attention on "
        "Hopper), fp32 gradient reduction for bf16, the backward's input-gradient collectives "
        "beside the weight-gradient matmuls";
    megatron.source =
        "NVIDIA/Megatron-LM (arguments.py: accumulate_allreduce_grads_in_fp32 for bf16; "
        "core/tensor_parallel/layers.py: LinearWithGradAccumulationAndAsyncCommunication); "
        "FlashAttention-2 and -3 papers";
    megatron.flash_of_peak = {fa2_a100(), FlashRate{"hopper", {{8192, 0.50}}}};
    // CUDA; ROCm through AMD's ROCm/Megatron-LM; Ascend through Huawei's MindSpeed, which runs
    // Megatron-LM's code on torch_npu.
    megatron.platforms = {"nvidia", "amd", "ascend"};
    megatron.grad_bytes_bf16 = 4;
    megatron.fp8_cast_bytes_per_e = 1, megatron.fp8_cast_bytes_fixed = 2;
    megatron.fp8_cast_kernels = 1;
    megatron.async_tp = true;
    megatron.tp_dgrad_overlap = true;
    megatron.selective_reruns_flash = true;
    megatron.async_tp_userbuffers = true;
    // Transformer Engine's fused LayerNorm + column-parallel linear (QKV, MLP up) writes its fp8
    // output and gathers that under sequence parallelism (module/layernorm_linear.py: ln_out of
    // torch.uint8 under fp8, gather_along_first_dim(ln_out); the backward regathers the saved fp8
    // copy for the weight gradient), and the row-parallel layers' backward casts the output
    // gradient to fp8 before its gather (module/base.py, grad_output_preprocess); the same in TE
    // 1.2, 1.5 and 1.8. The reduce-scatters stay 16-bit.
    megatron.tp_fp8_gathers = true;
    megatron.fp8_saves_fp8_inputs = true;  // Transformer Engine (software.h)
    // Megatron-Core's VocabParallelCrossEntropy (tensor_parallel/cross_entropy.py; the fused
    // variant needs --cross-entropy-loss-fusion): forward logits.float() (e in, 4 out), max (4),
    // subtract in place (8), exp in place (8), sum (4), divide in place (8); backward multiply in
    // place by the output gradient (8) and the cast back to 16 bits (4 in, e out).
    megatron.loss_bytes_per_e = 2, megatron.loss_bytes_fixed = 48, megatron.loss_kernels = 8;
    c.push_back(megatron);
    SoftwareProfile nemo = megatron;
    nemo.name = "nemo";
    nemo.description = "NVIDIA NeMo: runs Megatron-Core, the megatron profile";
    nemo.platforms = {"nvidia"};  // NVIDIA's framework, released for CUDA
    c.push_back(nemo);
    // Megatron-LM as of the SC'21 paper (Narayanan et al., arXiv:2104.04473, measured before
    // 2021-09-02, when the branch slym/allreduce_custom merged ColumnParallelLinearWith-
    // AsyncAllreduce into main): every tensor-parallel collective waits.
    SoftwareProfile megatron21 = megatron;
    megatron21.name = "megatron-2021";
    megatron21.platforms = {"nvidia"};  // the SC'21 code, CUDA only
    megatron21.description =
        "Megatron-LM of early 2021 (the SC'21 paper's): no overlap of the backward's "
        "tensor-parallel collectives";
    megatron21.source =
        "NVIDIA/Megatron-LM before 6e1bde1e0f (2021-09-02); Narayanan et al. 2021 "
        "(arXiv:2104.04473)";
    megatron21.tp_dgrad_overlap = false;
    megatron21.selective_reruns_flash = false;  // the legacy model (above)
    megatron21.async_tp_userbuffers = false;
    megatron21.tp_fp8_gathers = false;     // no Transformer Engine in 2021
    megatron21.async_tp = false;           // Transformer Engine's userbuffers came in 2023
    megatron21.sequence_parallel = false;  // Korthikanti et al. 2022 (Megatron-LM, 2022-03)
    megatron21.fp8 = false;                // fp8 came with Hopper and Transformer Engine (2022)
    megatron21.precisions_why = "it predates fp8 training";
    megatron21.fp8_saves_fp8_inputs = false;
    c.push_back(megatron21);
    SoftwareProfile ds = megatron;
    // The Megatron-DeepSpeed forks of the published DeepSpeed runs (BigScience's of 2022, MT-NLG's
    // and EleutherAI's of 2021) wait for every tensor-parallel collective; Microsoft's fork has
    // overlapped the backward's since its rebase on upstream Megatron-LM (2023-07-04, 9e72d571),
    // which this profile leaves out.
    ds.tp_dgrad_overlap = false;
    ds.selective_reruns_flash = false;  // Megatron-DeepSpeed runs the legacy model
    ds.async_tp_userbuffers = false;
    // Megatron's own layers, no Transformer Engine: BigScience's fork has no fp8, and Microsoft's
    // gained it (--fp8-*, transformer_impl transformer_engine) only with the 2023 rebase that this
    // profile leaves out.
    ds.tp_fp8_gathers = false;
    ds.fp8_saves_fp8_inputs = false;
    ds.fp8 = false;
    ds.precisions_why = "it predates fp8 training";
    ds.name = "deepspeed";
    // DeepSpeed's accelerators (deepspeed/accelerator/): cuda (ROCm builds too) and npu (Ascend).
    ds.platforms = {"nvidia", "amd", "ascend"};
    ds.description =
        "Megatron-DeepSpeed: Megatron's fused kernels, DeepSpeed's pipeline engine (activations "
        "and gradients partitioned over the tp ranks, blocking sends and receives), ZeRO "
        "reducing in the training dtype";
    ds.source =
        "microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py, p2p.py, schedule.py; "
        "FlashAttention-2 papers";
    ds.flash_of_peak = fa2;
    ds.grad_bytes_bf16 = 2;
    ds.p2p_serial = true;
    ds.p2p_rebuild_output = true;  // part_output.full() before each backward
    ds.dp_after_last_microbatch = true;
    ds.max_zero_with_pp = 1;    // pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
                                // parallelism"
    ds.interleaved_pp = false;  // PipelineModule places one stage per rank; TrainSchedule is 1F1B
    ds.bf16_optimizer = true;
    ds.async_tp = false;
    // deepspeed/runtime/zero/config.py: stage3_max_reuse_distance defaults to 1e9.
    ds.zero3_reuse_numel = 1e9;
    ds.zero3_max_live_numel = 1e9;  // stage3_max_live_parameters
    c.push_back(ds);
    SoftwareProfile ds2021 = ds;
    ds2021.name = "deepspeed-2021";
    ds2021.platforms = {"nvidia", "amd"};  // before DeepSpeed's accelerator abstraction (2022)
    ds2021.description =
        "DeepSpeed's pipeline engine before September 2021 (and EleutherAI's DeeperSpeed of "
        "then): as deepspeed, but every tp rank sends the whole activation gradient";
    ds2021.p2p_grads_split_tp = false;
    ds2021.bf16_optimizer = false;     // BF16_Optimizer came with #1801, 2022-04
    ds2021.sequence_parallel = false;  // the Megatron forks of 2021 had none
    c.push_back(ds2021);
    SoftwareProfile fsdp;
    fsdp.name = "fsdp";
    // PyTorch's FSDP runs wherever torch.distributed has a backend: NCCL (CUDA), RCCL (ROCm),
    // HCCL (torch_npu, Ascend) and Gloo (CPUs). On a TPU, PyTorch/XLA's FSDP is another
    // implementation, not planned as this one.
    fsdp.platforms = {"nvidia", "amd", "ascend", "cpu"};
    fsdp.description =
        "PyTorch FSDP, eager (Composer/llm-foundry, metaseq): FlashAttention-2, RMSNorm, rotary "
        "and SwiGLU as separate kernels, gradients reduced in the training dtype";
    fsdp.source = "PyTorch FSDP MixedPrecision; FlashAttention-2 paper; Llama reference model";
    fsdp.flash_of_peak = fa2;
    fsdp.rmsnorm = rmsnorm_eager, fsdp.rotary = rotary_eager, fsdp.swiglu = swiglu_eager;
    fsdp.fp8_cast_bytes_per_e = 1, fsdp.fp8_cast_bytes_fixed = 2;  // Transformer Engine (amp_fp8)
    fsdp.fp8_cast_kernels = 1;
    // Composer's amp_fp8 runs Transformer Engine's te.Linear (llm-foundry's fc_type: te).
    fsdp.fp8_saves_fp8_inputs = true;
    fsdp.zero2_unit_gathers = true;
    // Composer applies activation checkpointing inside the FSDP units (FSDP(CheckpointWrapper(
    // block))), metaseq likewise (fsdp_wrap(checkpoint_wrapper(layer))): the recomputed forward
    // never re-enters FSDP's pre-forward; the pre-backward gather serves it.
    fsdp.zero3_regathers_for_recompute = false;
    fsdp.zero1 = false;  // and so torchtitan's FSDP2, built on this profile below
    fsdp.fsdp_root_kept = true;
    fsdp.pipeline = false;  // Composer's parallelism is FSDP (and TP); metaseq's FSDP and TP
    // llm-foundry's MPT defaults to loss_fn: fused_crossentropy (llmfoundry/models/mpt/
    // modeling_mpt.py: flash-attn's fused cross-entropy): a forward kernel reads the logits and a
    // backward kernel reads them again and writes their gradient.
    fsdp.loss_bytes_per_e = 3, fsdp.loss_bytes_fixed = 0, fsdp.loss_kernels = 2;
    fsdp.fused_loss = true;  // flash_attn/ops/triton/cross_entropy.py: logits saved, a new dlogits
    c.push_back(fsdp);
    SoftwareProfile fsdp_c = fsdp;
    fsdp_c.name = "fsdp-compile";
    fsdp_c.description = "PyTorch FSDP under torch.compile: element-wise chains fused";
    fsdp_c.rmsnorm = fsdp_c.rotary = fsdp_c.swiglu = Composite{};
    c.push_back(fsdp_c);
    SoftwareProfile tt = fsdp;
    tt.pipeline = true;  // torch.distributed.pipelining, with looped (interleaved) schedules
    tt.name = "torchtitan";
    tt.platforms = {"nvidia", "amd"};  // its README: tested on NVIDIA and AMD (ROCm) GPUs
    tt.description =
        "torchtitan, eager: FSDP2 reducing gradients in fp32, SDPA's FlashAttention-2, eager "
        "RMSNorm/rotary/SwiGLU, torchao Float8 with dynamic scaling";
    tt.source = "pytorch/torchtitan (config_manager.py, models/llama/model.py); pytorch/ao float8";
    tt.grad_bytes_bf16 = tt.grad_bytes_fp16 = 4;
    tt.fp8_cast_bytes_per_e = 7, tt.fp8_cast_bytes_fixed = 3, tt.fp8_cast_kernels = 6;
    tt.fsdp_pp_once_per_step = true;
    // FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): the all-gather output is
    // split into the parameters by foreach_all_gather_copy_out on the current stream, after
    // current_stream().wait_event(all_gather_event).
    tt.fsdp_copy_out = true;
    // parallelize_llama.py (apply_tp) with float8: PrepareFloat8ModuleInput, Float8ColwiseParallel
    // and Float8RowwiseParallel (torchao/float8/float8_tensor_parallel.py): the input is cast to
    // fp8 before its Shard -> Replicate redistribution, "so that ... we perform fp8 allgather only
    // once"; the row-parallel output's gradient is cast (_NoopFwToFloat8BwDynamic) before the
    // backward's gather. The LM head is a plain ColwiseParallel (16-bit).
    tt.tp_fp8_gathers = true;
    // torchao's Float8Linear (float8_linear.py, matmul_with_hp_or_float8_args) saves the input it
    // is given: 16-bit, except under the fp8 TP plan, which casts every linear's input first
    // (tp_keeps_gathered_inputs below).
    tt.fp8_saves_fp8_inputs = false;
    // parallelize_llama.py (apply_tp): "attention" and "feed_forward" get PrepareModuleInput
    // (Shard(1) -> Replicate()), and wq/wk/wv and w1/w3 are ColwiseParallel linears of that
    // replicated input, which autograd keeps for their weight gradients (memory_model.cpp).
    tt.tp_keeps_gathered_inputs = true;
    // models/norms.py at 9dec370: RMSNorm.forward is `self._norm(x.float()).type_as(x) * weight`
    // (norm_type "rmsnorm" in every Llama 3 config), eager here; compiled, Inductor fuses it and
    // its partitioner chooses what to keep, which kiln does not model (the 16-bit input).
    tt.norm_keeps_fp32_input = true;
    // config_manager.py: --training.mixed_precision_param chooses bfloat16 or float32 only.
    tt.fp16 = false;
    tt.precisions_why = "its --training.mixed_precision_param has no float16";
    // train.py: cross_entropy(pred.flatten(0, 1).float(), labels), eager under both profiles
    // ("compiling loss function causes CUDA errors, turning off for now"): the cast (e in, 4
    // out), log_softmax (reads the row three times: max, sum of exp, output; writes it: 16);
    // backward the zeroed gradient of nll_loss (4), log_softmax's backward (sum pass, then
    // gradient and output in, gradient out: 16) and the cast back (4 in, e out).
    tt.loss_bytes_per_e = 2, tt.loss_bytes_fixed = 44, tt.loss_kernels = 6;
    tt.fused_loss = false;
    c.push_back(tt);
    SoftwareProfile tt_c = tt;
    tt_c.name = "torchtitan-compile";
    tt_c.description = "torchtitan with torch.compile: element-wise chains and fp8 casts fused";
    tt_c.rmsnorm = tt_c.rotary = tt_c.swiglu = Composite{};
    tt_c.norm_keeps_fp32_input = false;
    tt_c.fp8_cast_bytes_per_e = 2, tt_c.fp8_cast_bytes_fixed = 2, tt_c.fp8_cast_kernels = 2;
    tt_c.async_tp = true;
    // torch/_inductor/fx_passes/micro_pipeline_tp.py (torch at 1963fc8, the runs' commit):
    // fuse_matmul_reduce_scatter needs the reduce-scatter's input to come from one matmul
    // (_find_producer_matmul); torchtitan's TP plan (parallelize_llama.py) gathers each block's
    // input once for wq/wk/wv and once for w1/w3, so in backward the partial input gradients
    // are summed first.
    tt_c.async_tp_dgrad_rs = false;
    // torch/distributed/_symmetric_memory/__init__.py: _pipelined_all_gather_and_consume copies
    // the local shard with copy_ on the compute stream (late 2024: into the gathered output, the
    // p2p buffer's copy on a side stream; later versions both on the compute stream);
    // _fused_matmul_reduce_scatter_impl computes tp chunk matmuls into stacked_partials, pulls
    // the peers' chunks, then reduce_fn(stacked_partials) sums them in one kernel.
    tt_c.async_tp_symm_mem = true;
    c.push_back(tt_c);
    // MaxText (google/maxtext MaxText/configs/base.yml at 01c78bb): XLA compiles the step, so
    // element-wise chains are fused into one kernel each; weight_dtype float32 keeps the weights,
    // and so the gradients XLA reduces, in fp32 under bf16 activations; FSDP over the ICI axes by
    // default. No forward + backward benchmark of a TPU attention kernel is published, so
    // attention runs at the matmul rate (no figure for the architecture).
    SoftwareProfile maxtext;
    maxtext.name = "maxtext";
    maxtext.description =
        "MaxText on XLA (the tpu-v4 default): XLA-fused element-wise work, fp32 weights and "
        "gradients, attention at the matmul rate (no TPU kernel benchmark published)";
    maxtext.source = "google/maxtext MaxText/configs/base.yml (weight_dtype: float32)";
    maxtext.platforms = {"tpu", "nvidia"};  // JAX on TPUs and on NVIDIA GPUs (its README)
    maxtext.grad_bytes_bf16 = maxtext.grad_bytes_fp16 = 4;
    maxtext.fp8_cast_bytes_per_e = 1, maxtext.fp8_cast_bytes_fixed = 2;  // casts fused, as XLA
    maxtext.fp8_cast_kernels = 1;                                        // fuses element-wise
    maxtext.loss_bytes_per_e = 3, maxtext.loss_bytes_fixed = 0, maxtext.loss_kernels = 2;  // fused
    maxtext.async_tp = false;
    // No loss scaling anywhere in MaxText (google/maxtext at e64f6813, 2024-10: no loss_scale in
    // its Python or configs), so no fp16 training; fp8 (`quantization: "fp8"`, layers/
    // quantizations.py) runs on NVIDIA GPUs, and the device refuses it on a TPU.
    maxtext.fp16 = false;
    maxtext.precisions_why = "it has no loss scaling";
    c.push_back(maxtext);
    SoftwareProfile kiln;
    kiln.name = "kiln";
    kiln.description =
        "kiln's own trainer: its fused kernels, attention at the device's measured "
        "attention_efficiency, gradients in the training dtype";
    kiln.source = "src/model, src/train; docs/performance.md";
    // The trainer's train.dtype is fp32 or bf16 (src/train/config.h, docs/training.md).
    kiln.fp8 = kiln.fp16 = false;
    kiln.precisions_why = "its train.dtype";
    c.push_back(kiln);
    return c;
  }();
  return cat;
}

const SoftwareProfile& find_software(const std::string& name) {
  return find_named(software_catalog(), name, "--software", "the profiles");
}

std::string software_device_problem(const SoftwareProfile& software, const DeviceSpec& d) {
  const std::string platform = d.platform();
  auto runs_on = [&](const SoftwareProfile& s) {
    return s.platforms.empty() ||
           std::find(s.platforms.begin(), s.platforms.end(), platform) != s.platforms.end();
  };
  if (platform.empty() || runs_on(software)) return "";
  auto pretty = [](const std::string& p) -> std::string {
    if (p == "nvidia") return "NVIDIA";
    if (p == "ascend") return "Ascend";
    std::string up = p;
    for (char& ch : up) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    return up;  // AMD, TPU, CPU
  };
  std::vector<std::string> where, fit;
  for (const std::string& p : software.platforms) where.push_back(pretty(p));
  // kiln's own trainer runs on CPUs today: named for a CPU, not offered for an accelerator.
  for (const SoftwareProfile& s : software_catalog())
    if (runs_on(s) && (!s.platforms.empty() || platform == "cpu")) fit.push_back(s.name);
  return fmt::format(
      "--software {} runs on {} devices, and {} is a{} {} device: plan it with "
      "--software {}",
      software.name, join_names(where, "and"), d.name,
      platform == "amd" || platform == "ascend" || platform == "nvidia" ? "n" : "",
      pretty(platform), join_names(fit, "or"));
}

std::string software_precision_problem(const SoftwareProfile& software, Dtype dt,
                                       const DeviceSpec* device) {
  if (software.trains_in(dt)) return "";
  const std::vector<std::string> in = software.precisions();
  std::vector<std::string> fit, here;
  for (const std::string& x : in)
    if (!device || precision_problem(*device, parse_dtype(x)).empty()) here.push_back(x);
  for (const SoftwareProfile& s : software_catalog())
    if (s.trains_in(dt) && (!device || software_device_problem(s, *device).empty()))
      fit.push_back(s.name);
  const std::string why =
      software.precisions_why.empty() ? "" : " (" + software.precisions_why + ")";
  std::string out = fmt::format("--software {} trains in {}{}, not {}", software.name,
                                join_names(in, "or"), why, dtype_name(dt));
  std::vector<std::string> ways;
  if (!fit.empty())
    ways.push_back(fmt::format("plan --dtype {} with --software {}{}", dtype_name(dt),
                               join_names(fit, "or"),
                               device ? " (the profiles that run on " + device->name + ")" : ""));
  if (!here.empty())
    ways.push_back(fmt::format("this software with --dtype {}", join_names(here, "or")));
  if (ways.empty()) return out + fmt::format(", and it trains in nothing {} has", device->name);
  return out + ": " + ways[0] + (ways.size() > 1 ? "; or " + ways[1] : "");
}

}  // namespace kiln::plan
