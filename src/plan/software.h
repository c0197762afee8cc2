// What runs the job (`kiln plan --software NAME`): the framework's kernels and collectives set
// the efficiency terms the hardware alone does not. Each number is counted from the framework's
// source or taken from a published kernel measurement; docs/planner.md ("Software profiles")
// gives every source. None is fitted to a training run.
//
//   attention    flash attention's forward + backward rate as a fraction of the device's dense
//                16-bit peak, per device architecture and against sequence length where a
//                benchmark gives it (FlashAttention-2 on Ampere and Hopper,
//                cuDNN's fused attention under Transformer Engine on Hopper); an architecture
//                the profile does not list runs attention at the matmul rate × the device's
//                attention_efficiency, as before profiles existed
//   composites   eager PyTorch composes RMSNorm, rotary embeddings and SwiGLU from several ops,
//                each a kernel that reads and writes memory: bytes and kernels relative to one
//                fused kernel (1 and 1 for Megatron-LM's fused kernels and torch.compile)
//   grad bytes   bytes per gradient element as kept and reduced over data parallelism in 16-bit
//                training (Megatron-LM and torchtitan reduce bf16 runs' gradients in fp32)
//   p2p split    pipeline sends split over the tp ranks (Megatron-LM's scatter-gather, or
//                sequence parallelism); DeepSpeed's pipeline engine sends every rank's copy
//   fp8 casts    with --dtype fp8, the bytes moved per element of each tensor cast to fp8 for a
//                matmul (scale from amax, cast, transposed copy), eager or fused
//   async TP     whether the framework runs asynchronous tensor parallelism (layout asynctp=1):
//                Megatron-Core's --tp-comm-overlap, torchtitan's enable_async_tensor_parallel
//                (which needs torch.compile); the search tries it only where this is set
//   FSDP under PP torchtitan's FSDP2 with pipeline parallelism keeps a stage's weights gathered
//                through all its micro-batches and reduce-scatters the gradients once, after the
//                last backward: ZeRO-2/3 then holds and moves what ZeRO-1 does
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "plan/hardware.h"
#include "plan/layout.h"

namespace kiln::plan {

// An element-wise operation made of several eager kernels: bytes moved and kernels launched
// relative to one fused kernel.
struct Composite {
  double traffic = 1;
  int kernels = 1;
};

// Flash attention's forward + backward rate on one device architecture against the kernel's
// sequence length: (tokens, fraction of the dense 16-bit peak) points in increasing tokens,
// interpolated in log2(tokens) and held flat beyond the first and last (one point: a constant).
struct FlashRate {
  std::string arch;
  std::vector<std::pair<double, double>> points;
  double at(double tokens) const;
};

struct SoftwareProfile {
  std::string name;  // --software value
  std::string description;
  std::string source;
  // The device families it runs on (DeviceSpec::platform(): nvidia, amd, ascend, tpu, cpu);
  // empty: any. A device of unknown family (a hardware file without a known arch) is not checked.
  std::vector<std::string> platforms;
  std::vector<FlashRate> flash_of_peak;
  Composite rmsnorm, rotary, swiglu;
  double grad_bytes_bf16 = 2;  // gradients kept and reduced, bytes per element, bf16 training
  double grad_bytes_fp16 = 2;  //   and fp16 training (fp32 training: always 4)
  // Pipeline sends: whether each tp rank sends its 1/tp slice of the boundary activation (and,
  // separately, of its gradient) and the receiver gathers the slices over the tp group, or sends
  // the whole tensor; whether every send and receive is its own blocking call (a middle stage's
  // micro-batch waits for four transfers) or a send and a receive go as one batched pair (two);
  // and whether a stage keeps only its slice of its own output and gathers it back before the
  // backward (DeepSpeed's partitioned outputs).
  bool p2p_split_tp = true, p2p_grads_split_tp = true;
  bool p2p_serial = false, p2p_rebuild_output = false;
  // The engine reduces gradients after a stage's last micro-batch (DeepSpeed's TrainSchedule
  // issues ReduceGrads after its last step): with pp > 1 a stage's data-parallel traffic hides
  // only in the other stages' remaining work, never beside its own compute.
  bool dp_after_last_microbatch = false;
  // The highest ZeRO stage the software runs with pp > 1 (DeepSpeed's pipeline engine asserts
  // ZeRO < 2).
  int max_zero_with_pp = 3;
  // Which pipeline schedules the software has: any pipeline parallelism (PyTorch FSDP under
  // Composer/llm-foundry and metaseq has none), and interleaved virtual stages (vpp > 1;
  // DeepSpeed's engine runs one stage per rank).
  bool pipeline = true, interleaved_pp = true;
  // fp8: bytes read and written per element of a tensor cast to fp8 for a matmul, relative to
  // the element's 16-bit size e: reads for amax and cast, the fp8 copy and its transpose.
  double fp8_cast_bytes_per_e = 0;  // bytes = this × e + fp8_cast_bytes_fixed, per element
  double fp8_cast_bytes_fixed = 0;
  int fp8_cast_kernels = 0;  // kernels per cast tensor
  bool async_tp = false;     // runs asynctp=1 (the search tries it only then)
  // The precisions the software trains in (--dtype); a job in another is refused.
  bool fp8 = true, fp16 = true;
  std::string precisions_why;  // why it lacks one, for the refusal ("its train.dtype")
  // Has sequence parallelism (Megatron-LM since 2022-03; the search takes sp=1 with tp > 1 only
  // then, and a layout asking for it under software without it is refused).
  bool sequence_parallel = true;
  // Without asynchronous TP: the column-parallel layers' backward input-gradient collective
  // runs beside their weight-gradient matmul (and, with sequence parallelism, the gather of
  // their saved input beside the input-gradient matmul), as Megatron-LM has since 2021-09.
  bool tp_dgrad_overlap = false;
  // Under asynchronous TP, whether the backward's reduce-scatters of the column-parallel layers'
  // input gradients (after QKV and MLP up) are micro-pipelined with their matmuls too. Megatron-
  // Core (Transformer Engine's userbuffers) fuses QKV, and gate and up, into one linear each and
  // overlaps their dgrad reduce-scatter; torchtitan's Llama has separate wq/wk/wv and w1/w3
  // behind one all-gather, so the gradient arriving at that all-gather is a sum of matmuls, which
  // PyTorch's micro-pipeline pass does not fuse with its reduce-scatter (it needs one producing
  // matmul): those two run as plain collectives, exposed as without async TP.
  bool async_tp_dgrad_rs = true;
  // Selective recomputation (recompute=attention) with a flash kernel runs the kernel's forward
  // again in backward: Megatron-Core checkpoints the core attention whatever its implementation
  // (megatron/core/transformer/attention.py, checkpoint_core_attention and
  // _checkpointed_attention_forward; recompute_modules defaults to ["core_attn"]). Megatron-LM's
  // legacy model on its own layers (the 2021 code, Megatron-DeepSpeed's forks) checkpoints only
  // the unfused core and calls its flash kernel outside the checkpoint, so selective recomputes
  // nothing there.
  bool selective_reruns_flash = false;
  // Asynchronous TP by PyTorch's SymmetricMemory ops (torch/distributed/_symmetric_memory,
  // torchtitan's enable_async_tensor_parallel): besides the overlapped peer copies, each fused
  // all-gather + matmul copies the rank's own shard on the compute stream, each fused matmul +
  // reduce-scatter sums the tp partial outputs it received in a separate reduction kernel (reads
  // the whole n·h output, writes the rank's 1/tp), and both run every matmul they feed as tp
  // chunk matmuls, each with its fixed cost. Megatron's userbuffers are not this. Since this can
  // cost more than it hides, the search tries asynctp=0 as well under such software.
  bool async_tp_symm_mem = false;
  // Asynchronous TP by Transformer Engine's userbuffers (Megatron-Core's --tp-comm-overlap):
  // the gathers go on the copy engines with each GEMM they feed run in tp chunks; the
  // reduce-scatters and the backward's bulk overlaps run reduction kernels on 16 SMs beside the
  // GEMMs, which slows them (time_model.cpp).
  bool async_tp_userbuffers = false;
  // In fp8 with sequence parallelism, the blocks' all-gathers move fp8 (1 byte an element): the
  // input of QKV and of the MLP's up projection is cast before it is gathered, and so is the
  // output gradient of the attention output and MLP down before the backward's gather (torchao's
  // PrepareFloat8ModuleInput and Float8RowwiseParallel, which torchtitan's TP plan uses;
  // Transformer Engine's LayerNormLinear and grad_output_preprocess, under Megatron-Core); the
  // reduce-scatters stay 16-bit.
  bool tp_fp8_gathers = false;
  // In fp8, the linear layers keep their fp8 input for the weight gradient instead of the 16-bit
  // one (Transformer Engine from 0.10 to 1.8: LayerNormLinear saves its fp8 ln_out, Linear its
  // fp8 input or its transpose), so the inputs of QKV, MLP up and MLP down are kept in 1 byte an
  // element, and the attention output, which the flash kernel keeps in 16 bits for its own
  // backward, gains the output projection's fp8 copy. torchao's Float8Linear keeps what it is
  // given: off (16-bit; under its TP plan, the plan's fp8 casts: tp_keeps_gathered_inputs).
  bool fp8_saves_fp8_inputs = false;
  // Tensor parallelism by DTensor (torchtitan): PrepareModuleInput gathers the attention's and
  // the MLP's input over the sequence, and the column-parallel linears keep that gathered tensor
  // for their weight gradients, where Megatron keeps its 1/tp shard and gathers it again. Under
  // fp8 with tp_fp8_gathers (torchao's TP plan) the linears keep the fp8 casts the plan makes.
  bool tp_keeps_gathered_inputs = false;
  // An eager RMSNorm that computes in fp32 (torchtitan's: `self._norm(x.float()).type_as(x)`)
  // keeps the fp32 copy of its input for the backward (pow and mul save it; the cast back saves
  // nothing), 4 bytes an element where a fused norm keeps its 16-bit input.
  bool norm_keeps_fp32_input = false;
  // ZeRO-2/3 with pp > 1 gathers once per step and reduce-scatters once per step (torchtitan:
  // reshard_after_forward off under PP, gradient sync on the last micro-batch only).
  bool fsdp_pp_once_per_step = false;
  // ZeRO-2 as FSDP's SHARD_GRAD_OP (and FSDP2 without resharding after forward) runs it: each
  // unit's weights are gathered before its forward, every micro-batch (outside no_sync), and
  // kept through its backward. Otherwise as DeepSpeed's ZeRO-2: whole 16-bit weights kept, gathered
  // once per step after the update.
  bool zero2_unit_gathers = false;
  // ZeRO-3 under full recomputation gathers a unit again for its recomputed forward, besides its
  // forward and its backward (kiln's charge before the profiles said otherwise; DeepSpeed's stage
  // 3 does unless the reuse window below keeps the weights from the one to the other).
  // PyTorch FSDP does not: the checkpointed block sits inside the FSDP unit, so the recomputed
  // forward runs within the unit's backward without re-entering FSDP's pre-forward (and the
  // composable fully_shard + checkpoint skips it explicitly: FSDP1's _pre_forward, FSDP2's
  // FSDPState._pre_forward); the pre-backward hook's one gather serves both.
  bool zero3_regathers_for_recompute = true;
  // Has a ZeRO-1 (optimizer state sharded, whole gradients reduced): Megatron's distributed
  // optimizer, DeepSpeed's stage 1. PyTorch FSDP's strategies shard nothing (NO_SHARD), the
  // gradients and optimizer state (SHARD_GRAD_OP) or everything (FULL_SHARD), and FSDP2 the same
  // two ways: zero=1 is refused under them and the search leaves it out.
  bool zero1 = true;
  // DeepSpeed's stage 3 keeps a module's weights gathered when its trace shows them used again
  // within this many parameters (stage3_max_reuse_distance, 1e9 by default; 0: every unit is
  // released after each use, as FSDP does). See kept_through_backward (stages.h).
  double zero3_reuse_numel = 0;
  // DeepSpeed's stage 3 prefetches the next parameters only while fewer than this many are
  // gathered (stage3_max_live_parameters, 1e9 by default; PartitionedParameterCoordinator's
  // fetch_sub_module budgets min(max live − available, prefetch bucket)): a layer holding a single
  // weight at least this large leaves no budget, so its gathers run unprefetched, exposed. 0: no
  // such limit.
  double zero3_max_live_numel = 0;
  // PyTorch FSDP's root unit, the parameters no block unit wraps (the embedding, final norm and,
  // in Composer's MPT tied to the embedding or in torchtitan, the head), is not resharded after
  // the forward (FSDP1's _post_forward_reshard skips the root; FSDP2 sets the root's
  // reshard_after_forward off): gathered once before the forward, kept through the backward, its
  // gradients reduce-scattered after the last of them.
  bool fsdp_root_kept = false;
  // FSDP2 (fully_shard) copies each gathered unit out of the all-gather buffer into its
  // parameters on the compute stream (foreach_all_gather_copy_out, after waiting for the
  // gather): the unit's gathered bytes read and written, once per gather. FSDP1 gathers into the
  // flat parameter the unit uses in place.
  bool fsdp_copy_out = false;
  // The loss over the vocabulary (softmax cross-entropy, forward and backward, with its casts):
  // bytes read and written per logit element, all kernels together, = loss_bytes_per_e × e +
  // loss_bytes_fixed for logits of e bytes, in loss_kernels kernels. The default (9e + 36 in 3
  // kernels) is what kiln charged every software before the profiles counted their own.
  double loss_bytes_per_e = 9, loss_bytes_fixed = 36;
  int loss_kernels = 3;
  double loss_bytes(double e) const { return loss_bytes_per_e * e + loss_bytes_fixed; }
  // A fused loss kernel keeps the 16-bit logits for its backward and writes their gradient
  // beside them (2e bytes per logit element); the eager and Megatron losses keep an fp32 copy
  // next to the 16-bit logits (e + 4).
  bool fused_loss = false;

  // Flash attention's rate on `d` for a kernel over `tokens` keys and queries, in FLOP/s, or 0
  // when the profile has no figure for its architecture.
  double flash_flops(const DeviceSpec& d, double tokens) const;
  double grad_bytes(Dtype dt) const;
  // DeepSpeed's BF16_Optimizer (deepspeed/runtime/bf16_optimizer.py), which DeepSpeed runs for
  // bf16 without ZeRO (under its pipeline engine from #1801; without a pipeline too since
  // engine.py's get_data_types accumulates bf16 gradients in fp32 when ZeRO is off): fp32 master
  // weights and Adam state sharded over dp (its own stage 1), every micro-batch's bf16 gradients
  // added into full fp32 copies in a separate pass, the fp32 gradients all-reduced over dp after
  // the last micro-batch, the updated bf16 weights all-gathered.
  bool bf16_optimizer = false;
  bool runs_bf16_optimizer(const Layout& l, Dtype dt) const {
    return bf16_optimizer && dt == Dtype::bf16 && l.zero == 0;
  }
  // The ZeRO stage `l` runs as under this software in dtype `dt`: what its ranks hold and when
  // they communicate (1 for ZeRO-2/3 under pipeline parallelism where fsdp_pp_once_per_step, and
  // for DeepSpeed's BF16_Optimizer's sharding).
  int zero_as_run(const Layout& l, Dtype dt) const;
  // Whether the software trains in `dt` (fp8, fp16) and the precisions it trains in, by name.
  bool trains_in(Dtype dt) const {
    return dt == Dtype::fp8 ? fp8 : dt == Dtype::fp16 ? fp16 : true;
  }
  std::vector<std::string> precisions() const;
};

// Attention kernels with a published forward + backward benchmark (--attention-kernel):
// flash2 (FlashAttention-2), flash1 (FlashAttention), xformers (memory-efficient attention) and
// openai-triton (OpenAI Triton's fused attention), each with the curves of the architectures it
// was measured on. Throws kiln::Error listing the kernels when `name` is unknown.
struct AttentionKernel {
  std::string name, description;
  std::vector<FlashRate> rates;
};
const std::vector<AttentionKernel>& attention_kernels();
const AttentionKernel& find_attention_kernel(const std::string& name);

const std::vector<SoftwareProfile>& software_catalog();
// Throws kiln::Error listing the profiles (and the closest name) when `name` is unknown.
const SoftwareProfile& find_software(const std::string& name);
// Why `software` cannot plan a job on `d` ("" when it can): the software does not run on the
// device's family; the message names the profiles that do.
std::string software_device_problem(const SoftwareProfile& software, const DeviceSpec& d);
// Why `software` cannot train in `dt` ("" when it can); the message names the profiles that do
// (those that run on `device`, when given) and the precisions this software trains in that the
// device has.
std::string software_precision_problem(const SoftwareProfile& software, Dtype dt,
                                       const DeviceSpec* device = nullptr);

}  // namespace kiln::plan
