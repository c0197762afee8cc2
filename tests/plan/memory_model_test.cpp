#include "plan/memory_model.h"

#include <gtest/gtest.h>

#include "plan/planner.h"
#include "plan/stages.h"

namespace kiln::plan {
namespace {

struct Planned {
  ModelSpec model;
  ClusterSpec cluster;
  JobSpec job;
};

Planned planned(const std::string& model, const std::string& gpu, int nodes, Dtype dtype,
                bool flash) {
  Planned s{find_preset(model).model, default_cluster(find_device(gpu), nodes), JobSpec{}};
  s.job.seq_len = find_preset(model).seq_len;
  s.job.global_batch_tokens = find_preset(model).global_batch_tokens;
  s.job.train_tokens = 1e12;
  s.job.dtype = dtype;
  s.job.flash_attention = flash;
  return s;
}

// Mixed-precision Adam keeps 16 bytes per parameter (ZeRO paper, section 3.1: 2 + 2 + 12):
// a 7B model needs 16 × 6.74e9 bytes of model state on one device, and ZeRO-3 over 8 devices
// divides all of it by 8; ZeRO-1 only the 12 optimizer bytes, ZeRO-2 also the 2 gradient bytes.
// (Software that keeps 16-bit gradients, as FSDP does; Megatron-LM's bf16 runs keep fp32 ones,
// below.)
TEST(PlanMemoryModel, MixedPrecisionAdamIs16BytesPerParameterAndZeroDividesIt) {
  Planned s = planned("llama2-7b", "a100-80gb", 1, Dtype::bf16, true);
  s.job.software = find_software("fsdp");
  const double P = double(count_params(s.model).total);
  Layout l;
  l.dp = 1;
  EXPECT_DOUBLE_EQ(memory_per_gpu(s.model, s.cluster, s.job, l, 1).model_state(), 16 * P);
  l.dp = 8;
  const double expect[] = {16 * P, (2 + 2 + 12.0 / 8) * P, (2 + 14.0 / 8) * P, 16 * P / 8};
  for (int zero = 0; zero <= 3; zero++) {
    l.zero = zero;
    EXPECT_DOUBLE_EQ(memory_per_gpu(s.model, s.cluster, s.job, l, 1).model_state(), expect[zero])
        << "zero=" << zero;
  }
  // fp32 Adam: 4 + 4 + 8 bytes.
  s.job.dtype = Dtype::fp32;
  l.zero = 0;
  const MemoryBreakdown m = memory_per_gpu(s.model, s.cluster, s.job, l, 1);
  EXPECT_DOUBLE_EQ(m.weights, 4 * P);
  EXPECT_DOUBLE_EQ(m.optimizer, 8 * P);
}

// Megatron-LM accumulates and reduces bf16 runs' gradients in fp32 (arguments.py sets
// accumulate_allreduce_grads_in_fp32): 18 bytes per parameter; fp16 runs keep 16-bit gradients.
// fp8 adds the weights' fp8 copy to bf16 mixed precision.
TEST(PlanMemoryModel, SoftwareSetsTheGradientBytesAndFp8AddsAWeightCopy) {
  Planned s = planned("llama2-7b", "a100-80gb", 1, Dtype::bf16, true);
  s.job.software = find_software("megatron");
  const double P = double(count_params(s.model).total);
  Layout l;
  l.dp = 1;
  EXPECT_DOUBLE_EQ(memory_per_gpu(s.model, s.cluster, s.job, l, 1).model_state(), 18 * P);
  s.job.dtype = Dtype::fp16;
  EXPECT_DOUBLE_EQ(memory_per_gpu(s.model, s.cluster, s.job, l, 1).model_state(), 16 * P);
  s.job.software = find_software("torchtitan");  // FSDP2 reduces in fp32 by default
  s.job.dtype = Dtype::bf16;
  EXPECT_DOUBLE_EQ(state_bytes(s.job).grads, 4);
  s.job.dtype = Dtype::fp8;
  const StateBytes sb = state_bytes(s.job);
  EXPECT_DOUBLE_EQ(sb.weights, 3);
  EXPECT_DOUBLE_EQ(sb.gathered, 2);  // ZeRO-3 gathers the bf16 weights
}

// The loss's logits: the eager and vocabulary-parallel losses keep an fp32 copy beside the
// 16-bit logits (e + 4 bytes per element), llm-foundry's fused loss (the fsdp profile) keeps
// the 16-bit logits and writes their gradient into a new tensor (2e): 2 bytes per logit less
// in bf16, on the one micro-batch the last stage holds in its loss.
TEST(PlanMemoryModel, AFusedLossKeepsNoFp32CopyOfTheLogits) {
  Planned s = planned("llama2-7b", "a100-80gb", 1, Dtype::bf16, true);
  s.job.software = find_software("fsdp");
  EXPECT_TRUE(s.job.software.fused_loss);
  EXPECT_FALSE(find_software("megatron").fused_loss);
  EXPECT_FALSE(find_software("torchtitan").fused_loss);
  Layout l;
  l.dp = 8, l.mb = 2;
  const double fused = memory_per_gpu(s.model, s.cluster, s.job, l, 1).activations;
  s.job.software.fused_loss = false;
  const double eager = memory_per_gpu(s.model, s.cluster, s.job, l, 1).activations;
  const double logits = 2.0 * s.job.seq_len * s.model.vocab;  // mb 2 sequences
  EXPECT_DOUBLE_EQ(eager - fused, 2 * logits);
}

// Korthikanti et al. 2022, section 4 (GPT-3 175B shapes, 16-bit activations, dropout, attention
// scores kept): bytes per layer s·b·h·(10 + 24/t + 5as/(ht)) with tensor parallelism,
// s·b·h·(34/t + 5as/(ht)) with sequence parallelism too, 34·s·b·h/t with selective recompute,
// 2·s·b·h with full recompute.
TEST(PlanMemoryModel, ActivationsMatchKorthikanti) {
  Planned s = planned("gpt3-175b", "a100-80gb", 1, Dtype::fp16, false);
  const double S = 2048, b = 2, h = 12288, a = 96, t = 8;
  Layout l;
  l.tp = 8, l.mb = 2, l.dp = 1;
  const double sbh = S * b * h;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::none),
                   sbh * (10 + 24 / t + 5 * a * S / (h * t)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::full), 2 * sbh);
  l.sp = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::none),
                   sbh * (34 / t + 5 * a * S / (h * t)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::attention), 34 * sbh / t);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::full), 2 * sbh / t);
  // Flash attention keeps no score matrix: selective recompute saves nothing more.
  s.job.flash_attention = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::none),
                   layer_activation_bytes(s.model, s.job, l, Recompute::attention));
}

// Transformer Engine in fp8 keeps its linear layers' fp8 inputs for the weight gradient
// (LayerNormLinear's ln_out, Linear's input or its transpose), not the 16-bit tensors: with
// sequence parallelism the two norms' outputs (QKV and MLP-up inputs, h each, split over t) and
// the MLP-down input (4h for GPT-3's GELU MLP, split) drop from 2 bytes to 1, and the output
// projection adds a 1-byte copy of the attention output (h, split), which the flash kernel
// keeps in 16 bits: 2h/t + 4h/t − h/t = 5h/t bytes less per token and layer. A SwiGLU MLP's
// down input is the ffn width. Software that keeps 16 bits (torchao's Float8Linear under
// torchtitan), bf16 jobs and full recomputation do not change.
TEST(PlanMemoryModel, TransformerEngineKeepsFp8InputsForTheBackward) {
  Planned s = planned("gpt3-175b", "h100-sxm", 1, Dtype::fp8, true);
  s.job.software = find_software("megatron");
  ASSERT_TRUE(s.job.software.fp8_saves_fp8_inputs);
  const double S = 2048, b = 2, h = 12288, t = 8;
  Layout l;
  l.tp = 8, l.mb = 2, l.dp = 1, l.sp = true;
  JobSpec wide = s.job;
  wide.software.fp8_saves_fp8_inputs = false;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, wide, l, Recompute::none) -
                       layer_activation_bytes(s.model, s.job, l, Recompute::none),
                   S * b * 5 * h / t);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, wide, l, Recompute::full),
                   layer_activation_bytes(s.model, s.job, l, Recompute::full));
  // Megatron-Core's selective recomputation checkpoints the core attention, so no flash kernel
  // keeps its 16-bit output: the projection's fp8 copy is the only one, h/t saved instead of
  // h/t added.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, wide, l, Recompute::attention) -
                       layer_activation_bytes(s.model, s.job, l, Recompute::attention),
                   S * b * 7 * h / t);
  JobSpec bf16 = s.job, bf16_wide = wide;
  bf16.dtype = bf16_wide.dtype = Dtype::bf16;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, bf16, l, Recompute::none),
                   layer_activation_bytes(s.model, bf16_wide, l, Recompute::none));
  Planned llama = planned("llama3-8b", "h100-sxm", 1, Dtype::fp8, true);
  llama.job.software = find_software("fsdp");  // Composer's amp_fp8: TE's te.Linear
  ASSERT_TRUE(llama.job.software.fp8_saves_fp8_inputs);
  JobSpec llama_wide = llama.job;
  llama_wide.software.fp8_saves_fp8_inputs = false;
  Layout one;
  one.dp = 8, one.mb = 1;
  const double n = llama.job.seq_len, H = llama.model.hidden, F = llama.model.ffn_hidden;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(llama.model, llama_wide, one, Recompute::none) -
                       layer_activation_bytes(llama.model, llama.job, one, Recompute::none),
                   n * (2 * H + F - H));
  EXPECT_FALSE(find_software("torchtitan").fp8_saves_fp8_inputs);
  EXPECT_FALSE(find_software("megatron").tp_keeps_gathered_inputs);
  EXPECT_FALSE(find_software("torchtitan-compile").fp8_saves_fp8_inputs);
  EXPECT_TRUE(find_software("nemo").fp8_saves_fp8_inputs);
}

// torchtitan's TP plan (DTensor) gathers the attention's and the MLP's input over the sequence
// (PrepareModuleInput, Shard(1) -> Replicate()) and its column-parallel linears keep that whole
// tensor for their weight gradients, while its eager RMSNorm keeps its sharded normalised output
// for the weight's gradient: with sequence parallelism the two gathered inputs add 2h·e per token
// to what Megatron keeps (its 1/t shard). Under fp8 torchao's plan casts before it gathers (the
// gathered tensor is 1 byte) and casts the attention output and the MLP-down input before their
// row-parallel linears, which keep those fp8 casts: the MLP-down input drops from e to 1 byte and
// the attention output adds a 1-byte copy beside the flash kernel's. Without tensor parallelism
// nothing changes.
TEST(PlanMemoryModel, TorchtitanKeepsTheGatheredBlockInputs) {
  Planned s = planned("llama3-70b", "h100-sxm", 1, Dtype::bf16, true);
  s.job.software = find_software("torchtitan");
  ASSERT_TRUE(s.job.software.tp_keeps_gathered_inputs);
  JobSpec split = s.job;
  split.software.tp_keeps_gathered_inputs = false;
  Layout l;
  l.tp = 8, l.mb = 1, l.dp = 1, l.sp = true;
  const double n = s.job.seq_len, h = s.model.hidden, f = s.model.ffn_hidden, t = 8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::none) -
                       layer_activation_bytes(s.model, split, l, Recompute::none),
                   n * 2 * h * 2);
  JobSpec fp8 = s.job, fp8_split = split;
  fp8.dtype = fp8_split.dtype = Dtype::fp8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, fp8, l, Recompute::none) -
                       layer_activation_bytes(s.model, fp8_split, l, Recompute::none),
                   n * (2 * h * 1 + f / t * (1 - 2) + h / t * 1));
  Layout one;
  one.dp = 8, one.mb = 1;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, one, Recompute::none),
                   layer_activation_bytes(s.model, split, one, Recompute::none));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, fp8, one, Recompute::none),
                   layer_activation_bytes(s.model, fp8_split, one, Recompute::none));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::full),
                   layer_activation_bytes(s.model, split, l, Recompute::full));
}

// torchtitan's eager RMSNorm (`_norm(x.float()).type_as(x)`) keeps the fp32 copy of its input:
// two norms a layer, 4 bytes an element where a fused norm keeps the 16-bit input (2), split over
// the sequence with sp. Compiled, kiln keeps the fused count; fully recomputed, only the layer's
// input is kept.
TEST(PlanMemoryModel, EagerRmsNormKeepsItsFp32Input) {
  Planned s = planned("llama3-8b", "h100-sxm", 1, Dtype::bf16, true);
  s.job.software = find_software("torchtitan");
  ASSERT_TRUE(s.job.software.norm_keeps_fp32_input);
  ASSERT_FALSE(find_software("torchtitan-compile").norm_keeps_fp32_input);
  JobSpec fused = s.job;
  fused.software.norm_keeps_fp32_input = false;
  const double n = s.job.seq_len, h = s.model.hidden;
  Layout l;
  l.dp = 8, l.mb = 1;
  for (Recompute r : {Recompute::none, Recompute::attention})
    EXPECT_DOUBLE_EQ(
        layer_activation_bytes(s.model, s.job, l, r) - layer_activation_bytes(s.model, fused, l, r),
        n * 2 * h * (4 - 2));
  l.tp = 4, l.dp = 2, l.sp = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::none) -
                       layer_activation_bytes(s.model, fused, l, Recompute::none),
                   n * 2 * h * (4 - 2) / 4);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(s.model, s.job, l, Recompute::full),
                   layer_activation_bytes(s.model, fused, l, Recompute::full));
}

// 1F1B: stage k keeps min(m, p − k) micro-batches, so the first stage holds p × L/p = L layers'
// worth; the interleaved schedule multiplies that by 1 + (p − 1)/(p·v) (Korthikanti et al.,
// section 4.2.3).
TEST(PlanMemoryModel, PipelineKeepsMicroBatchesInFlight) {
  const ModelSpec m = find_preset("gpt3-175b").model;  // 96 layers
  Layout l;
  l.tp = 8, l.pp = 16;
  std::vector<Stage> st = pipeline_stages(m, l, 64);
  EXPECT_DOUBLE_EQ(st[0].in_flight_layers, 96);
  EXPECT_DOUBLE_EQ(st[15].in_flight_layers, 6);
  EXPECT_DOUBLE_EQ(pipeline_stages(m, l, 4)[0].in_flight_layers, 4 * 6);  // m < p
  l.vpp = 2;
  st = pipeline_stages(m, l, 64);
  EXPECT_DOUBLE_EQ(st[0].in_flight_layers, 96 * (1 + 15.0 / (16 * 2)));
}

TEST(PlanMemoryModel, UnevenPipelineGivesTheExtraLayersToMiddleStages) {
  // Llama 3 405B on 16 stages: 126 layers, the first and last stage one layer short.
  std::vector<int> layers = split_layers(126, 16, 1);
  EXPECT_EQ(layers.front(), 7);
  EXPECT_EQ(layers.back(), 7);
  for (int s = 1; s < 15; s++) EXPECT_EQ(layers[s], 8);
  EXPECT_EQ(split_layers(96, 16, 2), std::vector<int>(16, 6));
}

// The allowance and the reservation are stated: total = (counted) × (1 + allowance) + reserved.
TEST(PlanMemoryModel, AllowanceAndReservationAreAddedAsStated) {
  Planned s = planned("llama2-7b", "a100-80gb", 1, Dtype::bf16, true);
  s.job.mem_allowance = 0.25;
  Layout l;
  l.dp = 8, l.zero = 1, l.recompute = Recompute::full;
  const MemoryBreakdown m = memory_per_gpu(s.model, s.cluster, s.job, l, 128);
  const double counted = m.weights + m.grads + m.optimizer + m.activations + m.transient;
  EXPECT_DOUBLE_EQ(m.allowance, 0.25 * counted);
  EXPECT_DOUBLE_EQ(m.reserved, 2.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(m.total, counted * 1.25 + m.reserved);
  EXPECT_DOUBLE_EQ(m.capacity, 80.0 * (1 << 30));  // nvidia-smi: 81,920 MiB
}

// Multi-query attention under tensor parallelism (StarCoder: 1 key/value head, tp = 4): every
// rank holds the whole K and V projection, as BigCode's Megatron-LM replicates the head, so its
// weights and its K and V activations are not divided by tp.
TEST(PlanMemoryModel, MultiQueryAttentionReplicatesTheHeadUnderTp) {
  ModelSpec m = find_preset("gpt2-1.5b").model;
  m.n_head = 24, m.hidden = 1536, m.n_kv_head = 1, m.dropout = false;
  EXPECT_DOUBLE_EQ(kv_heads_per_rank(m, 4), 1);
  m.n_kv_head = 8;
  EXPECT_DOUBLE_EQ(kv_heads_per_rank(m, 4), 2);
  m.n_kv_head = 3;
  EXPECT_DOUBLE_EQ(kv_heads_per_rank(m, 4), 0);  // neither divides the other: refused
  m.n_kv_head = 1;
  JobSpec j;
  j.seq_len = 1024, j.global_batch_tokens = 8 * 1024, j.train_tokens = 1e12;
  Layout one = parse_layout("tp=1,dp=1,mb=1"), four = parse_layout("tp=4,dp=1,mb=1,sp=0");
  const double d = 64, kv_w = 2 * d * (m.hidden + 1);  // K and V projections with biases
  const double p1 = pipeline_stages(m, one, 1)[0].params,
               p4 = pipeline_stages(m, four, 1)[0].params;
  EXPECT_NEAR(p4, p1 / 4 + m.n_layer * kv_w * 3 / 4, 1.0);
  // K and V activations: 2·d·e per token on every rank, not 2·d·e/4.
  Layout four_sp = four;
  const double a1 = layer_activation_bytes(m, j, one, Recompute::none);
  const double a4 = layer_activation_bytes(m, j, four_sp, Recompute::none);
  const double n = 1024, e = 2, h = m.hidden;
  const double rep = n * (4 * h * e), kv_bytes = n * 2 * d * e;
  EXPECT_NEAR(a4, rep + (a1 - rep - kv_bytes) / 4 + kv_bytes, 1.0);
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  EXPECT_EQ(layout_problem(m, c, j, parse_layout("tp=4,dp=2,mb=1")), "");
}

}  // namespace
}  // namespace kiln::plan
