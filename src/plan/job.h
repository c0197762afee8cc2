// A training job: what is trained, in which precision and with which kernels, and the prices
// of time, energy and carbon.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "plan/hardware.h"
#include "plan/software.h"

namespace kiln::plan {

struct JobSpec {
  int seq_len = 0;                  // s
  int64_t global_batch_tokens = 0;  // tokens per optimizer step
  double train_tokens = 0;          // tokens of the whole run
  Dtype dtype = Dtype::bf16;
  // What runs the job (--software): kernel rates, fusion, gradient dtype (plan/software.h).
  SoftwareProfile software = find_software("megatron");
  // The dtype gradients are kept and reduced in over data parallelism (--grad-reduce): FSDP's
  // MixedPrecision(reduce_dtype=...), Megatron-LM's accumulate_allreduce_grads_in_fp32. Unset:
  // the software profile's; fp32 training keeps fp32 gradients whatever this says.
  std::optional<Dtype> grad_reduce;
  // How context parallelism moves keys and values (--cp-comm): round a ring of cp ranks, each
  // pass during a chunk's attention (Megatron-Core's --cp-comm-type p2p, Transformer Engine's
  // default), or all-gathered before attention and reduce-scattered after its backward, exposed
  // (--cp-comm-type allgather; Llama 3's choice, section 3.3.2 of its paper).
  enum class CpComm { ring, all_gather };
  CpComm cp_comm = CpComm::ring;
  // The attention kernel whose published benchmark replaces the profile's flash-attention rate
  // (--attention-kernel: flash2, flash1, xformers, openai-triton); empty: the profile's.
  std::string attention_kernel;
  // The model unpads queries, keys and values for a variable-length flash kernel and pads its
  // output back, every layer (--attention-unpad: flash-attn's bert_padding unpad_input and
  // pad_input, as llm-foundry's attn_impl: flash calls them): gathers and scatters on the
  // compute stream.
  bool attention_unpad = false;
  // fp8 only: ZeRO's weight all-gathers move the fp8 weights, 1 byte per parameter
  // (--fp8-param-gather: Megatron-Core's --fp8-param-gather, torchtitan's
  // enable_fsdp_float8_all_gather).
  bool fp8_param_gather = false;
  // Flash attention (Dao et al. 2022) keeps no (s, s) score matrix and skips the masked half of
  // a causal product; unfused attention materialises scores and probabilities (kiln's CPU
  // trainer, Megatron-LM in 2021).
  bool flash_attention = true;
  // Data-parallel and ZeRO collectives overlap with backward (gradients) and with the next
  // forward (parameter all-gathers), as Megatron-LM's --overlap-grad-reduce/--overlap-param-gather
  // and DeepSpeed do; off: they run after backward (Megatron-LM's local DDP in 2021).
  bool overlap_dp = true;
  // Allowance for allocator fragmentation and buffers not counted: required memory is
  // (1 + allowance) × counted + the device's reserved memory.
  double mem_allowance = 0.10;
  double usd_per_gpu_hour = 0;  // 0: no cost figure
  // Other ways to pay (plan/economics.h); 0: not priced. Spot: the share of nodes the provider
  // reclaims in a month (AWS's "frequency of interruption") and the minutes until the job runs
  // again after one (< 0: restart_minutes). Owned: capital per device, its years of
  // depreciation, the share of them it runs jobs, and electricity.
  double reserved_usd_per_gpu_hour = 0;
  double spot_usd_per_gpu_hour = 0;
  double spot_monthly_interruption = 0.05;
  double spot_restart_minutes = -1;
  double capex_usd_per_gpu = 0;
  double depreciation_years = 5;
  double utilisation = 1;
  double usd_per_kwh = 0;
  double gpu_power_w = 0;       // average draw per device; 0: the device's TDP
  double node_overhead_w = -1;  // the rest of a server; < 0: the device's catalog figure
  double pue = 1.2;             // data-centre power usage effectiveness
  double gco2_per_kwh = 480;    // grid carbon intensity; the world in 2023 (Ember, 2024)
  // Goodput (plan/goodput.h): interruptions per device-hour (default Llama 3's), the time from
  // a failure to training again, each node's checkpoint write bandwidth (0: one NIC's line
  // rate) and the storage's aggregate (default Llama 3's Tectonic, sustained).
  double failures_per_gpu_hour = 419.0 / (54.0 * 24.0 * 16384.0);
  double restart_minutes = 10;
  double ckpt_write_gbs = 0;  // GB/s per node
  double storage_gbs = 2000;  // GB/s in all

  // Bytes per gradient element as kept and reduced, and the dtype's name.
  double grad_bytes() const;
  std::string grad_reduce_name() const;
  int64_t global_batch_seqs() const { return seq_len > 0 ? global_batch_tokens / seq_len : 0; }
  // Optimizer steps of the run: ceil(train_tokens / global_batch_tokens).
  int64_t steps() const;
  // Throws kiln::Error naming the flag when a value is impossible.
  void validate() const;
};

// A count with an optional suffix: "2e12", "300B", "4M" (decimal: K, M, B or G, T) or "4Mi"
// (binary: Ki, Mi, Gi, Ti; Llama's "4M tokens" batch is 4Mi = 4,194,304). Throws kiln::Error
// naming `flag` when the text is not a positive count.
double parse_count(const std::string& text, const std::string& flag);

// Sets j's attention kernel (--attention-kernel): its name, and its published rates in place of
// the software profile's flash-attention rates.
void use_attention_kernel(JobSpec& j, const std::string& name);
// Why j cannot run on `d` with its attention kernel ("" when it can): no benchmark of the kernel
// on the device's architecture, or unfused attention.
std::string attention_kernel_problem(const DeviceSpec& d, const JobSpec& j);

JobSpec::CpComm parse_cp_comm(const std::string& s);  // "ring" or "all-gather"
const char* cp_comm_name(JobSpec::CpComm c);

}  // namespace kiln::plan
