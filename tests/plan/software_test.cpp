// Software profiles (--software): each term a framework sets, checked on its own.
#include "plan/software.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "plan/collectives.h"
#include "plan/planner.h"
#include "plan/stages.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

JobSpec job_with(const std::string& software, int seq = 4096, int64_t seqs = 64) {
  JobSpec j;
  j.seq_len = seq;
  j.global_batch_tokens = seqs * seq;
  j.train_tokens = 1e12;
  j.software = find_software(software);
  return j;
}

Layout layout(int tp, int pp, int dp, int zero = 0) {
  Layout l;
  l.tp = tp, l.pp = pp, l.dp = dp, l.zero = zero, l.sp = tp > 1;
  return l;
}

// Flash attention runs at the profile's published rate on the device's architecture:
// FlashAttention-2 at its paper's benchmark against sequence length (A100 and H100, causal, head
// dimension 128), cuDNN's attention under Megatron-Core at 50% of H100's peak. An architecture
// without a figure: 0 (the time model then keeps the device's own attention rate).
// Sequence parallelism came to Megatron-LM in 2022-03: the 2021 profiles neither search it nor
// accept it, and say why.
TEST(PlanSoftware, SequenceParallelOnlyWhereTheSoftwareHasIt) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  for (const char* sw : {"megatron-2021", "deepspeed-2021"}) {
    JobSpec j = job_with(sw, 2048, 256);
    j.flash_attention = false;
    const SearchResult r = search(m, c, j);
    ASSERT_FALSE(r.fitting.empty()) << sw;
    bool tp = false;
    for (const Estimate& e : r.fitting) {
      EXPECT_FALSE(e.layout.sp) << sw << " " << e.layout.to_string();
      tp = tp || e.layout.tp > 1;
    }
    EXPECT_TRUE(tp) << sw;
    bool said = false;
    for (const SearchField& f : r.not_searched)
      said = said || (f.key == "sp" && f.how.find("no sequence parallelism") != std::string::npos);
    EXPECT_TRUE(said) << sw;
    EXPECT_NE(
        layout_problem(m, c, j, parse_layout("tp=8,pp=8,dp=2,mb=1,zero=1,recompute=full,sp=1"))
            .find("has no sequence parallelism"),
        std::string::npos)
        << sw;
  }
  EXPECT_TRUE(find_software("megatron").sequence_parallel);
}

TEST(PlanSoftware, FlashAttentionRateIsTheProfilesFractionOfPeak) {
  const DeviceSpec& h100 = find_device("h100-sxm");
  const DeviceSpec& a100 = find_device("a100-80gb");
  // The benchmark's points (causal, head dimension 128), between them log-interpolated, beyond
  // them held.
  EXPECT_NEAR(find_software("torchtitan").flash_flops(h100, 2048), 265e12, 1e9);
  EXPECT_NEAR(find_software("torchtitan").flash_flops(h100, 8192), 308e12, 1e9);
  EXPECT_NEAR(find_software("torchtitan").flash_flops(h100, 131072), 328e12, 1e9);
  EXPECT_NEAR(find_software("torchtitan").flash_flops(h100, 256), 163e12, 1e9);
  EXPECT_NEAR(find_software("torchtitan").flash_flops(h100, 2048 * std::sqrt(2.0)),
              (265e12 + 294e12) / 2, 1e9);
  EXPECT_NEAR(find_software("fsdp").flash_flops(a100, 4096), 173e12, 1e9);
  EXPECT_NEAR(find_software("megatron").flash_flops(a100, 16384), 189e12, 1e9);
  EXPECT_DOUBLE_EQ(find_software("megatron").flash_flops(h100, 4096), 0.50 * 989e12);
  EXPECT_EQ(find_software("megatron").flash_flops(find_device("mi300x"), 4096), 0);
  // A slower attention kernel costs time in proportion to the attention share of the step.
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(h100, 1);
  JobSpec fast = job_with("torchtitan-compile", 8192, 16), slow = fast;
  fast.software.flash_of_peak = {FlashRate{"hopper", {{8192, 0.70}}}};
  const TimeBreakdown tf = step_time(m, c, fast, layout(1, 1, 8, 3), 2);
  const TimeBreakdown ts = step_time(m, c, slow, layout(1, 1, 8, 3), 2);
  EXPECT_GT(ts.compute, tf.compute * 1.05);
}

// Eager PyTorch's RMSNorm (7 kernels, 9× the bytes of a fused one), rotary (3 kernels, 5×) and
// SwiGLU (2 kernels, 5/3×) make a Llama layer slower than under torch.compile; a GPT-2-shaped
// model (native layer_norm and gelu, learned positions) runs the same either way.
TEST(PlanSoftware, EagerCompositesCostOnlyTheOpsTheyCompose) {
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  const ModelSpec llama = find_preset("llama3-8b").model;
  const TimeBreakdown eager = step_time(llama, c, job_with("torchtitan"), layout(1, 1, 8, 3), 8);
  const TimeBreakdown compiled =
      step_time(llama, c, job_with("torchtitan-compile"), layout(1, 1, 8, 3), 8);
  EXPECT_GT(eager.compute, compiled.compute * 1.03);
  const ModelSpec gpt2 = find_preset("gpt2-1.5b").model;
  const JobSpec e2 = job_with("fsdp", 1024), c2 = job_with("fsdp-compile", 1024);
  EXPECT_DOUBLE_EQ(step_time(gpt2, c, e2, layout(1, 1, 8, 3), 8).compute,
                   step_time(gpt2, c, c2, layout(1, 1, 8, 3), 8).compute);
}

// DeepSpeed's TrainSchedule (deepspeed/runtime/pipe/schedule.py), step by step: stage s runs
// forward on steps of its own parity and backward on the others, first its blocking transfers
// (RecvActivation then SendGrad before a forward, SendActivation then RecvGrad before a backward),
// each a rendezvous with the neighbour, then its pass. Returns the makespan.
double deepspeed_train_schedule(int m, int p, double fwd, double bwd, double transfer) {
  enum Op { recv_act, send_grad, send_act, recv_grad, pass };
  struct Cmd {
    Op op;
    int mb;
    bool forward;
  };
  std::vector<std::vector<Cmd>> cmds(p);
  for (int s = 0; s < p; s++) {
    int prev = -1;
    auto valid = [&](int mb) { return mb >= 0 && mb < m; };
    for (int step = 0; step < 2 * (m + p - 1); step++) {
      const bool forward = step % 2 == s % 2;
      int mb = forward
                   ? (step - s % 2) / 2 - s / 2
                   : (step % 2 == 0 ? step / 2 - p + (s + 1) / 2 : (step - 1) / 2 - p + 1 + s / 2);
      if (forward) {
        if (valid(mb) && s > 0) cmds[s].push_back({recv_act, mb, true});
        if (valid(prev) && s > 0) cmds[s].push_back({send_grad, prev, true});
      } else {
        if (valid(prev) && s < p - 1) cmds[s].push_back({send_act, prev, false});
        if (valid(mb) && s < p - 1) cmds[s].push_back({recv_grad, mb, false});
      }
      if (valid(mb)) cmds[s].push_back({pass, mb, forward});
      prev = mb;
    }
  }
  std::vector<size_t> at(p, 0);
  std::vector<double> clock(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; s++) {
      while (at[s] < cmds[s].size()) {
        const Cmd c = cmds[s][at[s]];
        if (c.op == pass) {
          clock[s] += c.forward ? fwd : bwd;
          at[s]++, moved = true;
          continue;
        }
        const int peer = c.op == send_act || c.op == recv_grad ? s + 1 : s - 1;
        const Op want = c.op == recv_act    ? send_act
                        : c.op == send_act  ? recv_act
                        : c.op == send_grad ? recv_grad
                                            : send_grad;
        if (at[peer] >= cmds[peer].size() || cmds[peer][at[peer]].op != want ||
            cmds[peer][at[peer]].mb != c.mb)
          break;
        clock[s] = clock[peer] = std::max(clock[s], clock[peer]) + transfer;
        at[s]++, at[peer]++, moved = true;
      }
    }
  }
  for (int s = 0; s < p; s++) EXPECT_EQ(at[s], cmds[s].size()) << "stage " << s << " deadlocked";
  return *std::max_element(clock.begin(), clock.end());
}

// With free transfers the schedule is 1F1B's (m + p − 1)(f + b). Each transfer then adds 2m at
// p = 2 (the two stages only talk to each other) and 4m − 2 to 4m + 2(p − 4) from p = 3 (a middle
// stage receives and sends in both directions, one blocking call after the other): kiln charges
// the deepspeed profile 2 or 4 transfers a micro-batch, Megatron's batched pairs 2.
TEST(PlanSoftware, DeepSpeedSendsCostWhatItsTrainScheduleWaitsFor) {
  ModelSpec m = find_preset("gpt2-1.5b").model;
  m.tied_embeddings = false;  // the sends alone (PlanSoftware.TiedEmbeddingGradientsAreSummedOnce)
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec mega = job_with("megatron", 1024, 256), ds = job_with("deepspeed", 1024, 256);
  for (int p : {2, 3, 4, 8}) {
    const int m_mb = 32;
    EXPECT_DOUBLE_EQ(deepspeed_train_schedule(m_mb, p, 1, 3, 0), (m_mb + p - 1) * 4.0);
    const double x = 0.01;
    const double replay =
        (deepspeed_train_schedule(m_mb, p, 1, 3, x) - (m_mb + p - 1) * 4.0) / x / m_mb;
    // kiln, tp = 1 (no gathers): Megatron's two transfers a micro-batch against DeepSpeed's.
    const Layout l = layout(1, p, 32 / p);
    const double per_transfer = step_time(m, c, mega, l, 256).pp_p2p / 2;
    const double kiln = step_time(m, c, ds, l, 256).pp_p2p / per_transfer;
    EXPECT_DOUBLE_EQ(kiln, p == 2 ? 2.0 : 4.0) << p << " stages";
    EXPECT_NEAR(kiln, replay, 2.0 * p / m_mb) << p << " stages";
  }
}

// The sends as the sources run them, at tp = 8 without sequence parallelism, per micro-batch with
// T a 1/tp slice's transfer, W a whole tensor's and G a gather of the tensor over the tp group:
// Megatron 2T + 2G (each received slice gathered); DeepSpeed 4T + 3G (blocking, and the stage's
// own output gathered back before the backward); DeepSpeed of 2021 2(T + W) + 2G (the gradient
// sent whole from every rank).
TEST(PlanSoftware, DeepSpeedPipelineSendsArePartitionedAndBlocking) {
  ModelSpec m = find_preset("gpt3-175b").model;
  m.tied_embeddings = false;  // the sends alone
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  JobSpec mega = job_with("megatron", 2048, 256), ds = job_with("deepspeed", 2048, 256),
          old = job_with("deepspeed-2021", 2048, 256);
  mega.flash_attention = ds.flash_attention = old.flash_attention = false;
  Layout l = layout(8, 16, 1);
  l.sp = false;
  const int64_t mbs = 256;
  const double act = 2048.0 * m.hidden * 2;  // one sequence's boundary activation, bf16
  const double T = p2p_s(act / 8, c, l), W = p2p_s(act, c, l);
  const double G = all_gather_s(act, group_path(c, l, Dim::tp));
  EXPECT_NEAR(step_time(m, c, mega, l, mbs).pp_p2p / mbs, 2 * T + 2 * G, 1e-12);
  EXPECT_NEAR(step_time(m, c, ds, l, mbs).pp_p2p / mbs, 4 * T + 3 * G, 1e-12);
  EXPECT_NEAR(step_time(m, c, old, l, mbs).pp_p2p / mbs, 2 * (T + W) + 2 * G, 1e-12);
  EXPECT_GT(W, 6 * T);  // 8× the bytes, the same latency
}

// A tied embedding's two copies (first stage, last stage) have their gradients summed once a
// step by a two-rank all-reduce: the vocabulary × hidden / tp gradient in the gradients' dtype
// (Megatron's fp32 main gradients), one send's worth each way; nothing without pp or untied.
TEST(PlanSoftware, TiedEmbeddingGradientsAreSummedOnce) {
  ModelSpec tied = find_preset("gpt3-175b").model, untied = tied;
  ASSERT_TRUE(tied.tied_embeddings);
  untied.tied_embeddings = false;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  const JobSpec mega = job_with("megatron", 2048, 256);
  const Layout l = layout(8, 8, 2, 1);
  const TimeBreakdown a = step_time(tied, c, mega, l, 128), b = step_time(untied, c, mega, l, 128);
  const double sum = p2p_s(double(tied.vocab) * tied.hidden / 8 * 4, c, l);
  // The last stage's copy is the size of the untied head it replaces, so nothing else moves.
  EXPECT_NEAR(a.pp_p2p - b.pp_p2p, sum, 1e-12);
  EXPECT_NEAR(a.step - b.step, sum, 1e-9);
  EXPECT_GT(sum, 0.005);  // 3.2 GB of fp32 gradient between two nodes
  const Layout no_pp = layout(8, 1, 16, 1);
  EXPECT_DOUBLE_EQ(step_time(tied, c, mega, no_pp, 128).pp_p2p, 0);
}

// DeepSpeed runs bf16 without ZeRO with BF16_Optimizer: the optimizer
// state sharded as ZeRO-1's, full fp32 gradient copies beside the bf16 gradients, every
// micro-batch's gradients added into them (18 bytes a parameter), the fp32 gradients all-reduced
// (twice a reduce-scatter's bytes at twice the width) and the bf16 weights all-gathered. The
// engine of 2021 had no such optimizer, and fp16 does not run it.
TEST(PlanSoftware, DeepSpeedBf16OptimizerAccumulatesAndReducesInFp32) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  JobSpec ds = job_with("deepspeed", 2048, 256);
  ds.overlap_dp = false;
  Layout z0 = layout(8, 8, 2, 0), z1 = layout(8, 8, 2, 1);
  const int64_t mbs = 128;
  ASSERT_TRUE(ds.software.runs_bf16_optimizer(z0, Dtype::bf16));
  EXPECT_FALSE(ds.software.runs_bf16_optimizer(z1, Dtype::bf16));
  EXPECT_FALSE(ds.software.runs_bf16_optimizer(z0, Dtype::fp16));
  EXPECT_TRUE(ds.software.runs_bf16_optimizer(layout(8, 1, 16, 0), Dtype::bf16));  // no pp too
  EXPECT_FALSE(find_software("deepspeed-2021").runs_bf16_optimizer(z0, Dtype::bf16));

  const MemoryBreakdown m0 = memory_per_gpu(m, c, ds, z0, mbs),
                        m1 = memory_per_gpu(m, c, ds, z1, mbs);
  EXPECT_DOUBLE_EQ(m0.optimizer, m1.optimizer);  // sharded over dp either way
  EXPECT_DOUBLE_EQ(m0.grads, 3 * m1.grads);      // fp32 copies (4) beside bf16 gradients (2)

  const TimeBreakdown t0 = step_time(m, c, ds, z0, mbs), t1 = step_time(m, c, ds, z1, mbs);
  // The pass after each backward, on the stage with the most parameters (the first: its layers
  // and the embedding), at the device's sustained memory bandwidth; kernel overheads on top.
  double most = 0;
  for (const Stage& s : pipeline_stages(m, z0, mbs)) most = std::max(most, s.params);
  const double bw = c.device.mem_bw_gbs * 1e9 * c.device.mem_bw_efficiency;
  const double pass = 18 * most / bw;
  EXPECT_GT(t0.compute - t1.compute, mbs * pass);
  EXPECT_LT(t0.compute - t1.compute, 1.2 * mbs * pass);
  // Traffic: all-reduce of 4 bytes + all-gather of 2 against reduce-scatter of 2 + all-gather of
  // 2, ring bandwidth terms (n − 1)/n alike: (2·4 + 2) / (2 + 2) = 2.5, less the latency shares.
  EXPECT_GT(t0.dp_comm, 2.3 * t1.dp_comm);
  EXPECT_LT(t0.dp_comm, 2.5 * t1.dp_comm);
}

// DeepSpeed's pipeline engine reduces gradients after a stage's last micro-batch: with overlap
// on, its data-parallel traffic hides only in the other stages' remaining work (stage 0, the
// last to finish, has none left), never beside its own compute, so nothing slows its kernels;
// Megatron's overlaps its own last backward.
TEST(PlanSoftware, DeepSpeedReducesAfterTheLastMicroBatch) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  JobSpec mega = job_with("megatron", 2048, 256), ds = job_with("deepspeed", 2048, 256);
  const Layout l = layout(8, 8, 2, 1);
  const TimeBreakdown d = step_time(m, c, ds, l, 128), g = step_time(m, c, mega, l, 128);
  EXPECT_DOUBLE_EQ(d.contention, 0);
  EXPECT_GT(g.contention, 0);
  EXPECT_GT(d.dp_exposed, 0);
  // Stage 0, the last to finish, has nothing left to hide in: overlap changes nothing.
  ds.overlap_dp = false;
  EXPECT_DOUBLE_EQ(step_time(m, c, ds, l, 128).dp_exposed, d.dp_exposed);
  EXPECT_LT(g.dp_exposed, d.dp_exposed * 4 / 2);  // Megatron's fp32 gradients, partly hidden
  // Without pp DeepSpeed's engine overlaps its reduction with the backward as any other.
  EXPECT_GT(step_time(m, c, job_with("deepspeed", 2048, 256), layout(8, 1, 16, 1), 128).contention,
            0);
}

// What each framework's pipeline can run: DeepSpeed's engine has no interleaved schedule and
// FSDP under Composer/metaseq no pipeline at all, so the search never proposes them and a given
// layout that asks for them is refused with what to use instead.
TEST(PlanSoftware, SearchKeepsToThePipelinesTheSoftwareHas) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 32);
  JobSpec mega = job_with("megatron", 2048, 1536), ds = job_with("deepspeed", 2048, 1536),
          fsdp = job_with("fsdp", 2048, 1536);
  auto any = [&](const JobSpec& j, auto pred) {
    const SearchResult r = search(m, c, j);
    EXPECT_FALSE(r.fitting.empty()) << j.software.name;
    for (const Estimate& e : r.fitting)
      if (pred(e.layout)) return true;
    return false;
  };
  EXPECT_TRUE(any(mega, [](const Layout& l) { return l.vpp > 1; }));
  EXPECT_FALSE(any(ds, [](const Layout& l) { return l.vpp > 1; }));
  EXPECT_TRUE(any(ds, [](const Layout& l) { return l.pp > 1; }));
  EXPECT_FALSE(any(fsdp, [](const Layout& l) { return l.pp > 1; }));

  Layout l = layout(8, 8, 4, 1);
  l.vpp = 2;
  EXPECT_EQ(layout_problem(m, c, mega, l), "");
  EXPECT_NE(layout_problem(m, c, ds, l).find("--software megatron or torchtitan for interleaving"),
            std::string::npos)
      << layout_problem(m, c, ds, l);
  l.vpp = 1;
  EXPECT_EQ(layout_problem(m, c, ds, l), "");
  // DeepSpeed's pipeline engine runs ZeRO-0/1 only; the search keeps to them.
  l.zero = 3;
  EXPECT_NE(layout_problem(m, c, ds, l).find("incompatible with pipeline parallelism"),
            std::string::npos)
      << layout_problem(m, c, ds, l);
  EXPECT_EQ(layout_problem(m, c, mega, l), "");
  EXPECT_FALSE(any(ds, [](const Layout& x) { return x.pp > 1 && x.zero > 1; }));
  l.zero = 1;
  EXPECT_NE(layout_problem(m, c, fsdp, l).find("fsdp has no pipeline parallelism"),
            std::string::npos)
      << layout_problem(m, c, fsdp, l);
}

// Gradients reduced in fp32 (torchtitan's FSDP2 default) move twice the bytes of bf16 ones
// (FSDP under Composer): with no overlap the ZeRO-2 reduce-scatters are what differ, their
// bandwidth term doubled and their ring latency (63 steps per layer here) the same. FSDP's ZeRO-2
// also gathers each unit's 16-bit weights before its forward, the same in both; ZeRO-3 gathers
// them once more (for backward), so that difference is the gathers.
TEST(PlanSoftware, Fp32GradientReductionMovesTwiceTheBytes) {
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 8);
  JobSpec bf16 = job_with("fsdp-compile", 4096, 64),
          fp32 = job_with("torchtitan-compile", 4096, 64);
  bf16.overlap_dp = fp32.overlap_dp = false;
  const Layout l = layout(1, 1, 64, 2), l3 = layout(1, 1, 64, 3);
  const double gathers =
      step_time(m, c, bf16, l3, 1).zero_exposed - step_time(m, c, bf16, l, 1).zero_exposed;
  EXPECT_NEAR(gathers,
              step_time(m, c, fp32, l3, 1).zero_exposed - step_time(m, c, fp32, l, 1).zero_exposed,
              1e-9 * gathers);
  const double z16 = step_time(m, c, bf16, l, 1).zero_exposed - gathers;
  const double z32 = step_time(m, c, fp32, l, 1).zero_exposed - gathers;
  EXPECT_GT(z32, 1.7 * z16);
  EXPECT_LT(z32, 2.0 * z16);
}

// torchtitan's fp8 TP plan (torchao's PrepareFloat8ModuleInput and Float8RowwiseParallel) casts
// before it gathers: each of a layer's all-gathers moves one byte an element, its reduce-scatters
// stay 16-bit. Without asynchronous TP every collective waits, so per layer with full recompute
// the six gathers (forward, recomputed forward, backward: two each) cost what a 16-bit gather
// of half the bytes costs; bf16 jobs and software that gathers 16-bit do not change.
TEST(PlanSoftware, TorchtitanGathersFp8UnderTensorParallelism) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec fp8 = job_with("torchtitan", 8192, 64);
  fp8.dtype = Dtype::fp8;
  Layout l = layout(8, 1, 4, 3);
  l.mb = 4, l.recompute = Recompute::full;  // each cast above the last-level cache
  ASSERT_TRUE(fp8.software.tp_fp8_gathers);
  const double with = step_time(m, c, fp8, l, 8).tp_comm;
  JobSpec wide = fp8;
  wide.software.tp_fp8_gathers = false;
  const double without = step_time(m, c, wide, l, 8).tp_comm;
  const GroupPath g = group_path(c, l, Dim::tp);
  const double act = 4.0 * 8192 * m.hidden * 2;  // a micro-batch's activation, 16-bit
  const double per_layer = 6 * (all_gather_s(act, g) - all_gather_s(act / 2, g));
  EXPECT_NEAR(without - with, 8 * m.n_layer * per_layer, 1e-9);
  // The casts before those gathers run on the rank's 1/8 shard: the QKV and MLP-up inputs
  // (forward and recomputed forward) and the attention-output and MLP-down output gradients,
  // each torchao's eager cast of 7e + 3 = 17 bytes per element in 6 kernels (their fixed costs
  // cancel in the difference), and each of the four gathered tensors is then transposed whole
  // for its weight gradient, once, in the backward (1 byte an element read and written, one more
  // kernel), not again for the recomputed forward.
  const DeviceSpec& d = c.device;
  const double bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency, k = d.kernel_overhead_us * 1e-6;
  const double elements = act / 2;
  const double cast_saved = 17 * elements * (1 - 1.0 / 8) / bw;
  const double transpose = k + 2 * elements / bw;
  EXPECT_NEAR(step_time(m, c, wide, l, 8).compute - step_time(m, c, fp8, l, 8).compute,
              8 * m.n_layer * (6 * cast_saved - 4 * transpose), 1e-9);
  JobSpec bf16 = fp8, bf16_wide = wide;
  bf16.dtype = bf16_wide.dtype = Dtype::bf16;
  EXPECT_DOUBLE_EQ(step_time(m, c, bf16, l, 8).tp_comm, step_time(m, c, bf16_wide, l, 8).tp_comm);
  EXPECT_TRUE(find_software("torchtitan-compile").tp_fp8_gathers);
}

// Transformer Engine under Megatron-Core gathers fp8 too: the fused LayerNorm writes the QKV and
// MLP-up inputs in fp8 and gathers those (forward, and again for the weight gradient), and the
// row-parallel layers' output gradients are cast before the backward's gather. Without
// asynchronous TP, Megatron's forward gathers and the backward's output-gradient gathers wait
// (four per layer), and the saved inputs' regathers run beside the input-gradient matmuls, so
// fp8 gathers save at least those four gathers' halves and at most six. The legacy profiles
// (no Transformer Engine) gather 16-bit.
TEST(PlanSoftware, MegatronGathersFp8UnderTransformerEngine) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec fp8 = job_with("megatron", 8192, 64);
  fp8.dtype = Dtype::fp8;
  Layout l = layout(8, 1, 4, 1);
  l.mb = 4;
  l.sp = true;
  ASSERT_TRUE(fp8.software.tp_fp8_gathers);
  ASSERT_TRUE(fp8.software.tp_dgrad_overlap);
  JobSpec wide = fp8;
  wide.software.tp_fp8_gathers = false;
  const double with = step_time(m, c, fp8, l, 8).tp_comm;
  const double without = step_time(m, c, wide, l, 8).tp_comm;
  const GroupPath g = group_path(c, l, Dim::tp);
  const double act = 4.0 * 8192 * m.hidden * 2;  // a micro-batch's activation, 16-bit
  const double half = all_gather_s(act, g) - all_gather_s(act / 2, g);
  EXPECT_GE(without - with, 8 * m.n_layer * 4 * half * (1 - 1e-12));
  EXPECT_LE(without - with, 8 * m.n_layer * 6 * half * (1 + 1e-12));
  // On a link so slow that every gather outlasts the matmul beside it, each of the six gathers
  // per layer is exposed beyond that matmul, so fp8 saves exactly six halves per layer; the LM
  // head (Megatron's own ColumnParallelLinear) gathers 16 bits either way.
  ClusterSpec slow = c;
  slow.intra_link_gbs = 0.5;
  const GroupPath gs = group_path(slow, l, Dim::tp);
  const double slow_half = all_gather_s(act, gs) - all_gather_s(act / 2, gs);
  EXPECT_NEAR(step_time(m, slow, wide, l, 8).tp_comm - step_time(m, slow, fp8, l, 8).tp_comm,
              8 * m.n_layer * 6 * slow_half, 1e-9 * step_time(m, slow, wide, l, 8).tp_comm);
  JobSpec bf16 = fp8, bf16_wide = wide;
  bf16.dtype = bf16_wide.dtype = Dtype::bf16;
  EXPECT_DOUBLE_EQ(step_time(m, c, bf16, l, 8).tp_comm, step_time(m, c, bf16_wide, l, 8).tp_comm);
  for (const char* legacy : {"megatron-2021", "deepspeed", "deepspeed-2021"})
    EXPECT_FALSE(find_software(legacy).tp_fp8_gathers) << legacy;
  EXPECT_TRUE(find_software("nemo").tp_fp8_gathers);
}

// ZeRO-3 under full recomputation: a regathering profile gathers each recomputed layer again
// for its recomputed forward; PyTorch FSDP skips its pre-forward logic in the recomputed forward,
// so the pre-backward gather serves it. With the collectives in series (no overlap), full
// recomputation adds one gather per layer under a regathering profile (a layer's gather: what
// one more layer adds to ZeRO-3 over FSDP's ZeRO-2, which gathers once per forward) and nothing
// under FSDP. The embedding and the head are not recomputed.
TEST(PlanSoftware, FsdpGathersOnceForTheRecomputedForwardAndTheBackward) {
  ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec fsdp = job_with("fsdp", 4096, 64);
  fsdp.overlap_dp = false;
  EXPECT_FALSE(fsdp.software.zero3_regathers_for_recompute);
  EXPECT_TRUE(find_software("deepspeed").zero3_regathers_for_recompute);
  JobSpec regather = fsdp;
  regather.software.zero3_regathers_for_recompute = true;
  Layout none = layout(1, 1, 32, 3), full = none, z2 = layout(1, 1, 32, 2);
  full.recompute = Recompute::full;
  auto zero = [&](const ModelSpec& mm, const JobSpec& j, const Layout& l) {
    return step_time(mm, c, j, l, 2).zero_exposed;
  };
  EXPECT_DOUBLE_EQ(zero(m, fsdp, full), zero(m, fsdp, none));
  ModelSpec shorter = m;
  shorter.n_layer -= 1;
  const double layer_gather = (zero(m, regather, none) - zero(m, regather, z2)) -
                              (zero(shorter, regather, none) - zero(shorter, regather, z2));
  EXPECT_GT(layer_gather, 0);
  EXPECT_NEAR(zero(m, regather, full) - zero(m, regather, none), m.n_layer * layer_gather,
              1e-9 * m.n_layer * layer_gather);
}

// DeepSpeed's stage 3 keeps a module's weights when its trace uses them again within
// stage3_max_reuse_distance (1e9) parameters. Walking back from the forward's end, a unit is kept
// while the later units' forwards, recomputed forwards and backwards (and, recomputed, its own
// recomputed forward, which comes before its next use) stay inside the window.
TEST(PlanSoftware, DeepSpeedStage3KeepsWhatItsReuseWindowReaches) {
  EXPECT_EQ(find_software("deepspeed").zero3_reuse_numel, 1e9);
  EXPECT_EQ(find_software("fsdp").zero3_reuse_numel, 0);
  const std::vector<ZeroUnit> plain(4, ZeroUnit{1, 0}), recomputed(4, ZeroUnit{1, 1});
  // Between unit k's forward and its next use: 2 parameters per later unit, or 3 and its own 1.
  EXPECT_EQ(kept_through_backward(plain, 5), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(kept_through_backward(plain, 4), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(kept_through_backward(recomputed, 5), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(kept_through_backward(recomputed, 4), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(kept_through_backward(plain, 0), (std::vector<bool>(4, false)));

  // In time, with the collectives in series: a kept unit is not gathered for its backward; the
  // rest are gathered once (Llama 2 7B's layers, 2 × 0.2e9 parameters, fit the window, so the
  // recomputed forward's gather serves the backward).
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec ds = job_with("deepspeed", 4096, 64);
  ds.overlap_dp = false;
  JobSpec released = ds;  // every unit released and gathered once for its backward
  released.software.zero3_reuse_numel = 0;
  released.software.zero3_regathers_for_recompute = false;
  Layout l = layout(1, 1, 32, 3);
  l.recompute = Recompute::full;
  const GroupPath zg = group_path(c, l, Dim::shard);
  const std::vector<ZeroUnit> units = zero_units(m, l, pipeline_stages(m, l, 2)[0]);
  const std::vector<bool> kept = kept_through_backward(units, 1e9);
  double saved = 0;
  int n_kept = 0;
  for (size_t k = 0; k < units.size(); k++)
    if (kept[k]) saved += all_gather_s(units[k].params * 2, zg), n_kept++;
  EXPECT_EQ(n_kept, 2);  // the head and the last layer: the next layer's recompute is past 1e9
  // In memory, the kept units are gathered together at the turn from forward to backward
  // (without recomputation: the head and two layers, more than the two layers counted anyway).
  Layout plain_l = l;
  plain_l.recompute = Recompute::none;
  const std::vector<ZeroUnit> plain_units =
      zero_units(m, plain_l, pipeline_stages(m, plain_l, 2)[0]);
  const std::vector<bool> plain_kept = kept_through_backward(plain_units, 1e9);
  double kept_params = 0;
  for (size_t k = 0; k < plain_units.size(); k++)
    kept_params += plain_kept[k] ? plain_units[k].params : 0.0;
  const double layer_params = double(count_params(m).per_layer);
  ASSERT_GT(kept_params, 2 * layer_params);
  EXPECT_NEAR(memory_per_gpu(m, c, ds, plain_l, 2).transient -
                  memory_per_gpu(m, c, released, plain_l, 2).transient,
              (kept_params - 2 * layer_params) * 2, 1);
  EXPECT_LT(n_kept, m.n_layer);
  EXPECT_NEAR(step_time(m, c, released, l, 2).zero_exposed - step_time(m, c, ds, l, 2).zero_exposed,
              2 * saved, 1e-9);  // two micro-batches

  // Layers of more than half the window are gathered again for the recomputed forward: a 530B
  // layer holds 5e9 parameters on one tp rank. Without recomputation the last layer is kept
  // through its backward (its tied head is only the final norm); with it, its own recomputed
  // forward comes first and is past the window, so it is gathered twice for the backward: one
  // gather more for every layer, and two for the last.
  const ModelSpec big = find_preset("megatron-530b").model;
  Layout none = layout(1, 1, 32, 3), full = none;
  full.recompute = Recompute::full;
  const double layer = all_gather_s(double(count_params(big).per_layer) * 2, zg);
  EXPECT_NEAR(
      step_time(big, c, ds, full, 2).zero_exposed - step_time(big, c, ds, none, 2).zero_exposed,
      2 * (big.n_layer + 1) * layer, 1e-9 * big.n_layer * layer);
}

// FSDP2 copies each gathered unit into its parameters on the compute stream: per gather the
// unit's 16-bit weights read and written. ZeRO-3 without recomputation gathers every block twice a
// micro-batch (forward, backward), and the root unit (the embedding, the final norm and the head)
// once: FSDP keeps it through the backward.
TEST(PlanSoftware, Fsdp2CopiesEachGatherOutOnTheComputeStream) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const DeviceSpec d = find_device("h100-sxm");
  const ClusterSpec c = default_cluster(d, 2);
  JobSpec tt = job_with("torchtitan", 8192, 32);
  ASSERT_TRUE(tt.software.fsdp_copy_out);
  EXPECT_FALSE(find_software("fsdp").fsdp_copy_out);
  JobSpec plain = tt;
  plain.software.fsdp_copy_out = false;
  const Layout l = layout(1, 1, 16, 3);
  const double diff = step_time(m, c, tt, l, 2).compute - step_time(m, c, plain, l, 2).compute;
  const ParamCounts pc = count_params(m);
  const double bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency, k = d.kernel_overhead_us * 1e-6;
  auto copy = [&](double params) { return k + 2 * params * 2 / bw; };
  // The root unit (embedding, final norm, head) is gathered once and kept; each block twice.
  const double per_micro_batch = copy(double(pc.embedding + pc.head + pc.final_norm)) +
                                 2 * m.n_layer * copy(double(pc.per_layer));
  EXPECT_NEAR(diff, 2 * per_micro_batch, 1e-9);
}

// FSDP does not reshard its root unit (the embedding, final norm and head, which no block unit
// wraps) after the forward: with the collectives in series, a micro-batch gathers and
// reduce-scatters the root once, where separate embedding and head units would each be gathered
// twice and reduce-scattered once. And the root stays gathered in memory.
TEST(PlanSoftware, FsdpKeepsItsRootUnitThroughTheBackward) {
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec fsdp = job_with("fsdp", 4096, 64);
  fsdp.overlap_dp = false;
  ASSERT_TRUE(fsdp.software.fsdp_root_kept);
  EXPECT_FALSE(find_software("deepspeed").fsdp_root_kept);
  JobSpec split = fsdp;
  split.software.fsdp_root_kept = false;
  const Layout l = layout(1, 1, 32, 3);
  const GroupPath zg = group_path(c, l, Dim::shard);
  const ParamCounts pc = count_params(m);
  const double emb = double(pc.embedding), head = double(pc.head + pc.final_norm);
  auto ag = [&](double p) { return all_gather_s(p * 2, zg); };
  auto rs = [&](double p) { return reduce_scatter_s(p * 2, zg); };
  const double separate = 2 * ag(emb) + rs(emb) + 2 * ag(head) + rs(head);
  const double as_root = ag(emb + head) + rs(emb + head);
  EXPECT_NEAR(step_time(m, c, split, l, 2).zero_exposed - step_time(m, c, fsdp, l, 2).zero_exposed,
              2 * (separate - as_root), 1e-9);
  EXPECT_NEAR(
      memory_per_gpu(m, c, fsdp, l, 2).transient - memory_per_gpu(m, c, split, l, 2).transient,
      (emb + head) * 2, 1);
}

// torchtitan's FSDP2 under pipeline parallelism gathers a stage's weights once per step and
// reduce-scatters once (reshard_after_forward off under pp, gradient sync on the last
// micro-batch): ZeRO-3 there costs what ZeRO-1 does, in time and memory, and far less time
// than gathering for every micro-batch; without pp, or under a profile that reshards, ZeRO-3
// stays per micro-batch.
TEST(PlanSoftware, TorchtitanFsdpUnderPipelineGathersOncePerStep) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 32);
  const JobSpec tt = job_with("torchtitan-compile", 8192, 256);
  JobSpec resharding = tt;
  resharding.software.fsdp_pp_once_per_step = false;
  const Layout z3 = layout(8, 4, 8, 3), z1 = layout(8, 4, 8, 1);
  EXPECT_EQ(tt.software.zero_as_run(z3, Dtype::bf16), 1);
  EXPECT_EQ(tt.software.zero_as_run(layout(8, 1, 32, 3), Dtype::bf16), 3);
  EXPECT_EQ(find_software("fsdp").zero_as_run(z3, Dtype::bf16), 3);
  const int64_t mbs = 32;
  const TimeBreakdown once = step_time(m, c, tt, z3, mbs);
  EXPECT_DOUBLE_EQ(once.step, step_time(m, c, tt, z1, mbs).step);
  EXPECT_EQ(once.zero_exposed, 0);
  const TimeBreakdown every = step_time(m, c, resharding, z3, mbs);
  EXPECT_GT(every.zero_exposed, 0);
  EXPECT_GT(every.step, once.step);
  const MemoryBreakdown held = memory_per_gpu(m, c, tt, z3, mbs);
  EXPECT_DOUBLE_EQ(held.total, memory_per_gpu(m, c, tt, z1, mbs).total);
  EXPECT_GT(held.weights, memory_per_gpu(m, c, resharding, z3, mbs).weights * 7);
  // The report says why ZeRO-3 costs what ZeRO-1 does.
  const Estimate e = evaluate(m, c, tt, z3);
  bool said = false;
  for (const std::string& n : e.notes) said |= n.find("reshard_after_forward") != std::string::npos;
  EXPECT_TRUE(said);
}

// --grad-reduce overrides the profile's gradient dtype (FSDP's reduce_dtype): fp32 gradients
// under the fsdp profile take twice the memory and move twice the bytes of its bf16 default;
// fp32 training keeps fp32 gradients whatever it says, and fp8 is refused.
TEST(PlanSoftware, GradReduceOverridesTheProfilesGradientDtype) {
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 8);
  JobSpec bf16 = job_with("fsdp", 4096, 64), fp32 = bf16;
  fp32.grad_reduce = Dtype::fp32;
  EXPECT_EQ(bf16.grad_bytes(), 2);
  EXPECT_EQ(fp32.grad_bytes(), 4);
  EXPECT_EQ(bf16.grad_reduce_name(), "bf16");
  EXPECT_EQ(fp32.grad_reduce_name(), "fp32");
  JobSpec megatron_bf16 = job_with("megatron");
  megatron_bf16.grad_reduce = Dtype::bf16;
  EXPECT_EQ(megatron_bf16.grad_bytes(), 2);
  EXPECT_EQ(job_with("megatron").grad_bytes(), 4);
  JobSpec full = bf16;
  full.dtype = Dtype::fp32;
  full.grad_reduce = Dtype::bf16;
  EXPECT_EQ(full.grad_bytes(), 4);
  EXPECT_EQ(full.grad_reduce_name(), "fp32");
  JobSpec fp16 = bf16;
  fp16.dtype = Dtype::fp16;
  EXPECT_EQ(fp16.grad_reduce_name(), "fp16");
  fp16.grad_reduce = Dtype::bf16;
  EXPECT_EQ(fp16.grad_reduce_name(), "bf16");
  const Layout l = layout(1, 1, 64, 2);
  EXPECT_DOUBLE_EQ(memory_per_gpu(m, c, fp32, l, 1).grads,
                   2 * memory_per_gpu(m, c, bf16, l, 1).grads);
  bf16.overlap_dp = fp32.overlap_dp = false;
  const double gathers =  // FSDP's ZeRO-2 gathers, the same in both (see above)
      step_time(m, c, bf16, layout(1, 1, 64, 3), 1).zero_exposed -
      step_time(m, c, bf16, l, 1).zero_exposed;
  EXPECT_GT(step_time(m, c, fp32, l, 1).zero_exposed - gathers,
            1.7 * (step_time(m, c, bf16, l, 1).zero_exposed - gathers));
  JobSpec bad = bf16;
  bad.grad_reduce = Dtype::fp8;
  try {
    bad.validate();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-reduce must be bf16, fp16 or fp32"),
              std::string::npos)
        << e.what();
  }
  auto r = kiln::testing::run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --nodes 8 --software fsdp --grad-reduce fp32 "
      "--layout tp=1,pp=1,mb=1,zero=3,recompute=full,vpp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("software fsdp, gradients reduced in fp32"), std::string::npos)
      << r.output;
  r = kiln::testing::run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --nodes 8 --software fsdp --json --layout "
      "tp=1,pp=1,mb=1,zero=3,recompute=full,vpp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["job"]["grad_reduce"], "bf16");
  r = kiln::testing::run_kiln("plan --gpu a100-80gb --nodes 8 --grad-reduce fp32");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--grad-reduce plans a model"), std::string::npos) << r.output;
}

// --attention-kernel swaps the profile's flash-attention rate for another kernel's published
// benchmark (FlashAttention-2's paper charts: FlashAttention, xformers and the Triton kernel on
// A100, FlashAttention on H100): xformers at 2K tokens runs 82 of the A100's 312 TFLOP/s, so a
// Llama 7B step is slower than with FlashAttention-2 by the attention's extra time alone. A kernel
// without a benchmark on the device is refused by name, as is a fused kernel with unfused
// attention.
TEST(PlanSoftware, AttentionKernelUsesItsPublishedBenchmark) {
  const DeviceSpec& a100 = find_device("a100-80gb");
  const DeviceSpec& h100 = find_device("h100-sxm");
  JobSpec fa2 = job_with("megatron", 2048, 64), xf = fa2;
  use_attention_kernel(xf, "xformers");
  EXPECT_EQ(xf.attention_kernel, "xformers");
  EXPECT_NEAR(xf.software.flash_flops(a100, 2048), 82e12, 1e9);
  EXPECT_NEAR(fa2.software.flash_flops(a100, 2048), 155e12, 1e9);
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(a100, 8);
  const TimeBreakdown t2 = step_time(m, c, fa2, layout(1, 1, 64, 1), 1);
  const TimeBreakdown tx = step_time(m, c, xf, layout(1, 1, 64, 1), 1);
  EXPECT_GT(tx.compute, t2.compute);
  EXPECT_LT(tx.compute, 1.3 * t2.compute);
  EXPECT_EQ(attention_kernel_problem(a100, xf), "");
  EXPECT_NE(attention_kernel_problem(h100, xf).find("no published benchmark on h100-sxm (hopper)"),
            std::string::npos);
  JobSpec f1 = fa2;
  use_attention_kernel(f1, "flash1");
  EXPECT_NEAR(f1.software.flash_flops(h100, 8192), 135e12, 1e9);
  f1.flash_attention = false;
  EXPECT_NE(attention_kernel_problem(h100, f1).find("needs --attention flash"), std::string::npos);
  EXPECT_THROW(use_attention_kernel(f1, "xformer"), Error);
  auto r = kiln::testing::run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --nodes 8 --attention-kernel xformers --layout "
      "tp=1,pp=1,mb=1,zero=1,recompute=full,vpp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("attention kernel xformers"), std::string::npos) << r.output;
  r = kiln::testing::run_kiln("plan --model llama2-7b --gpu h100-sxm --attention-kernel xformers");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--attention-kernel xformers has no published benchmark"),
            std::string::npos)
      << r.output;
}

// --attention-unpad: flash-attn's bert_padding around a variable-length kernel (llm-foundry's
// attn_impl: flash). Per layer and micro-batch, counted here from the device's bandwidth:
// forward gathers q, k, v (each read and written) and pads the output (zeroed, then written
// from the kernel's output) in 5 kernels, after 15 small kernels over the mask; backward gathers
// the output's gradient and zeroes and scatters q's, k's and v's (7 kernels). A full recompute
// repeats the forward's part. Unfused attention has nothing to unpad: refused.
TEST(PlanSoftware, UnpaddedAttentionPaysItsGathersAndScatters) {
  const ModelSpec m = find_preset("llama3-8b").model;  // grouped-query: k and v narrower than q
  const DeviceSpec d = find_device("h100-sxm");
  const ClusterSpec c = default_cluster(d, 2);
  JobSpec j = job_with("fsdp", 2048, 256);
  Layout l = layout(1, 1, 16, 3);
  l.mb = 8, l.recompute = Recompute::full;
  const double base = step_time(m, c, j, l, 2).compute;
  j.attention_unpad = true;
  const double unpadded = step_time(m, c, j, l, 2).compute;
  const double n = 8.0 * 2048, e = 2, q = m.n_head * m.head_dim(), kv = m.n_kv_head * m.head_dim();
  const double qkv = n * (q + 2 * kv) * e, out = n * q * e;
  const double bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency, k = d.kernel_overhead_us * 1e-6;
  const double fwd = 5 * k + (2 * qkv + 3 * out) / bw + 15 * k;
  const double bwd = 7 * k + (2 * out + 3 * qkv) / bw;
  EXPECT_NEAR(unpadded - base, 2 * m.n_layer * (2 * fwd + bwd), 1e-9);
  j.flash_attention = false;
  EXPECT_NE(attention_kernel_problem(d, j).find("--attention-unpad"), std::string::npos);
  auto r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --nodes 2 --software fsdp --attention-unpad --layout "
      "tp=1,pp=1,mb=8,zero=3,recompute=full,vpp=1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(r.output)["job"]["attention_unpad"].get<bool>());
  r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --attention unfused --attention-unpad");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("it needs --attention flash"), std::string::npos) << r.output;
}

TEST(PlanSoftware, UnknownProfileNamesTheClosestAndTheList) {
  try {
    find_software("torchtitn");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("did you mean 'torchtitan'"), std::string::npos) << what;
    EXPECT_NE(what.find("megatron"), std::string::npos) << what;
  }
}

TEST(PlanSoftware, CliTakesTheProfileAndReportsIt) {
  auto r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --nodes 1 --software torchtitan --layout "
      "tp=1,pp=1,mb=2,zero=3,recompute=full,vpp=1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["job"]["software"], "torchtitan");
  r = kiln::testing::run_kiln("plan --list-software");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const SoftwareProfile& s : software_catalog())
    EXPECT_NE(r.output.find(s.name), std::string::npos) << s.name;
  r = kiln::testing::run_kiln("plan --model llama3-8b --gpu h100-sxm --software pytorch");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown --software 'pytorch'"), std::string::npos) << r.output;
}

// PyTorch FSDP (and torchtitan's FSDP2) has no ZeRO-1: its strategies shard nothing, the
// gradients and optimizer state, or everything. A layout asking for zero=1 under them is
// refused naming the strategies, and the search never tries it.
TEST(PlanSoftware, FsdpHasNoZero1) {
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  Layout l = layout(1, 1, 32, 1);
  for (const char* name : {"fsdp", "fsdp-compile", "torchtitan", "torchtitan-compile"}) {
    const JobSpec j = job_with(name);
    EXPECT_FALSE(j.software.zero1) << name;
    EXPECT_NE(layout_problem(m, c, j, l).find("has no ZeRO-1"), std::string::npos) << name;
    const SearchResult r = search(m, c, j);
    ASSERT_FALSE(r.fitting.empty()) << name;
    std::set<int> zeros;
    for (const Estimate& e : r.fitting) zeros.insert(e.layout.zero);
    EXPECT_EQ(zeros.count(1), 0u) << name;
    EXPECT_GT(zeros.count(2) + zeros.count(3), 0u) << name;
  }
  for (const char* name : {"megatron", "deepspeed"})
    EXPECT_EQ(layout_problem(m, c, job_with(name), l), "") << name;
}

// A head tied to the embedding on one stage uses the table again at the forward's end; DeepSpeed
// released it after the embedding's forward when the layers between outweigh its reuse window,
// so the head gathers it again (and holds it with the units kept into the backward). Not when
// the layers fit the window, not across pipeline stages, not untied, not under FSDP (no window;
// its root unit keeps the table).
TEST(PlanSoftware, DeepSpeedTiedHeadGathersTheTableAgainPastItsWindow) {
  ModelSpec m = find_preset("llama2-7b").model;
  m.tied_embeddings = true;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  const Layout l = layout(1, 1, 32, 3);
  const Stage whole = pipeline_stages(m, l, 2)[0];
  const std::vector<ZeroUnit> units = zero_units(m, l, whole);
  const double table = double(m.vocab) * m.hidden;
  ASSERT_DOUBLE_EQ(units.front().params, table);
  EXPECT_DOUBLE_EQ(tied_head_regather(m, whole, units, 1e9), table);  // 6.5B of layers between
  EXPECT_EQ(tied_head_regather(m, whole, units, 1e12), 0);
  EXPECT_EQ(tied_head_regather(m, whole, units, 0), 0);
  ModelSpec untied = m;
  untied.tied_embeddings = false;
  EXPECT_EQ(tied_head_regather(untied, whole, zero_units(untied, l, whole), 1e9), 0);
  const Layout piped = layout(1, 2, 16, 1);
  const Stage first = pipeline_stages(m, piped, 2)[0];
  EXPECT_EQ(tied_head_regather(m, first, zero_units(m, piped, first), 1e9), 0);
  // In memory the table is live with the units kept at the turn (the head among them).
  const JobSpec ds = job_with("deepspeed", 4096, 64);
  ASSERT_TRUE(kept_through_backward(units, 1e9).back());
  const std::vector<bool> kept = kept_through_backward(units, 1e9);
  double kept_params = 0;
  for (size_t k = 0; k < units.size(); k++) kept_params += kept[k] ? units[k].params : 0.0;
  const double layer = double(count_params(m).per_layer);
  const double transient = memory_per_gpu(m, c, ds, l, 2).transient;
  const double without_zero3 = memory_per_gpu(m, c, ds, layout(1, 1, 32, 2), 2).transient;
  EXPECT_NEAR(transient - without_zero3, (std::max(2 * layer, kept_params + table) + layer) * 2,
              1e3);
}

// DeepSpeed prefetches the next parameters only within stage3_max_live_parameters (1e9): a
// layer with one weight that large (Megatron's 530B at tp = 1: its MLP's 20480 × 81920 = 1.7e9)
// leaves no budget, so its gathers wait, exposed, where at tp = 2 (8.4e8) they hide behind the
// previous layer's compute. With overlap off, the same gathers run in series either way.
TEST(PlanSoftware, DeepSpeedPrefetchesNothingPastItsLiveParameterBudget) {
  EXPECT_EQ(find_software("deepspeed").zero3_max_live_numel, 1e9);
  EXPECT_EQ(find_software("fsdp").zero3_max_live_numel, 0);
  const ModelSpec m = find_preset("megatron-530b").model;
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 64);
  const JobSpec ds = job_with("deepspeed", 2048, 512);
  JobSpec unlimited = ds;
  unlimited.software.zero3_max_live_numel = 0;
  for (int tp : {1, 2}) {
    const Layout l = layout(tp, 1, 512 / tp, 3);
    const double limited = step_time(m, c, ds, l, 1).zero_exposed;
    const double free = step_time(m, c, unlimited, l, 1).zero_exposed;
    if (tp == 1)
      EXPECT_GT(limited, 1.5 * free) << "every gather waits";
    else
      EXPECT_DOUBLE_EQ(limited, free) << "8.4e8 per weight: prefetched";
    JobSpec serial = ds, serial_free = unlimited;
    serial.overlap_dp = serial_free.overlap_dp = false;
    EXPECT_DOUBLE_EQ(step_time(m, c, serial, l, 1).zero_exposed,
                     step_time(m, c, serial_free, l, 1).zero_exposed);
  }
}

// Software runs on the device families it was built for: a GPU framework on a TPU (or MaxText on
// an AMD part) is refused, naming the profiles that do run there; every catalog device has a
// framework besides kiln's own trainer, and a hardware file of unknown architecture is not
// checked.
TEST(PlanSoftware, EachProfileRunsOnItsOwnDevices) {
  const ModelSpec m = find_preset("llama2-7b").model;
  const DeviceSpec& tpu = find_device("tpu-v4");
  EXPECT_EQ(tpu.platform(), "tpu");
  const std::string mt = software_device_problem(find_software("megatron"), tpu);
  // kiln's own trainer runs on CPUs today: it is not offered for an accelerator.
  EXPECT_NE(mt.find("--software megatron runs on NVIDIA, AMD and Ascend devices, and tpu-v4 is a "
                    "TPU device: plan it with --software maxtext"),
            std::string::npos)
      << mt;
  const std::string amd = software_device_problem(find_software("maxtext"), find_device("mi300x"));
  EXPECT_NE(amd.find("mi300x is an AMD device"), std::string::npos) << amd;
  EXPECT_NE(software_device_problem(find_software("torchtitan"), find_device("ascend-910"))
                .find("--software megatron, deepspeed, fsdp or fsdp-compile"),
            std::string::npos);
  EXPECT_EQ(software_device_problem(find_software("fsdp"), find_device("cpu")), "");
  EXPECT_EQ(software_device_problem(find_software("maxtext"), find_device("h100-sxm")), "");
  // The planner's own checks refuse such a layout; the search finds nothing to run.
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  ClusterSpec on_tpu = c;
  on_tpu.device = tpu;
  Layout l = layout(1, 1, 32, 1);
  l.zero = 3;
  EXPECT_EQ(layout_problem(m, c, job_with("torchtitan"), l), "");
  EXPECT_NE(layout_problem(m, on_tpu, job_with("torchtitan"), l).find("is a TPU device"),
            std::string::npos);
  for (const DeviceSpec& d : device_catalog()) {
    int frameworks = 0;
    for (const SoftwareProfile& s : software_catalog())
      frameworks += s.name != "kiln" && software_device_problem(s, d).empty();
    EXPECT_GT(frameworks, 0) << d.name;
  }
  DeviceSpec custom = find_device("h100-sxm");
  custom.arch = "";
  EXPECT_EQ(custom.platform(), "");
  EXPECT_EQ(software_device_problem(find_software("nemo"), custom), "");
  auto r = kiln::testing::run_kiln("plan --model llama2-7b --gpu tpu-v4 --nodes 4 --software fsdp");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--software fsdp runs on NVIDIA, AMD, Ascend and CPU devices"),
            std::string::npos)
      << r.output;
}

// A profile plans only the precisions its software trains in: the 2021 codes and the Megatron-
// DeepSpeed forks the deepspeed profile models predate fp8 (Transformer Engine), torchtitan's
// mixed precision is bf16 or fp32, and kiln's own trainer takes train.dtype fp32 or bf16. The
// planner's check refuses such a layout, the CLI refuses the job naming the profiles that do
// train in it (on the device, when there is one) and what this software could do instead.
TEST(PlanSoftware, EachProfileTrainsInItsOwnPrecisions) {
  const std::string old = software_precision_problem(find_software("megatron-2021"), Dtype::fp8);
  EXPECT_EQ(old,
            "--software megatron-2021 trains in fp32, bf16 or fp16 (it predates fp8 training), "
            "not fp8: plan --dtype fp8 with --software megatron, nemo, fsdp, fsdp-compile, "
            "torchtitan, torchtitan-compile or maxtext; or this software with --dtype fp32, bf16 "
            "or fp16");
  for (const char* name : {"deepspeed", "deepspeed-2021", "kiln"})
    EXPECT_NE(software_precision_problem(find_software(name), Dtype::fp8), "") << name;
  for (const char* name : {"torchtitan", "torchtitan-compile", "kiln", "maxtext"})
    EXPECT_NE(software_precision_problem(find_software(name), Dtype::fp16), "") << name;
  EXPECT_EQ(
      software_precision_problem(find_software("maxtext"), Dtype::fp16),
      "--software maxtext trains in fp32, bf16 or fp8 (it has no loss scaling), not fp16: "
      "plan --dtype fp16 with --software megatron, nemo, megatron-2021, deepspeed, "
      "deepspeed-2021, fsdp or fsdp-compile; or this software with --dtype fp32, bf16 or fp8");
  const std::string kiln = software_precision_problem(find_software("kiln"), Dtype::fp16);
  EXPECT_NE(kiln.find("--software kiln trains in fp32 or bf16 (its train.dtype), not fp16"),
            std::string::npos)
      << kiln;
  // On a device: only the profiles that run there, and only the precisions it has. The Ascend
  // 910 multiplies fp16 only, which kiln's trainer does not train in.
  const DeviceSpec& ascend = find_device("ascend-910");
  const std::string on_ascend =
      software_precision_problem(find_software("kiln"), Dtype::fp16, &ascend);
  EXPECT_EQ(on_ascend,
            "--software kiln trains in fp32 or bf16 (its train.dtype), not fp16: plan --dtype fp16 "
            "with --software megatron, deepspeed, fsdp or fsdp-compile (the profiles that run on "
            "ascend-910)");
  const std::string on_h100 = software_precision_problem(find_software("torchtitan"), Dtype::fp16,
                                                         &find_device("h100-sxm"));
  EXPECT_NE(on_h100.find("; or this software with --dtype fp32, bf16 or fp8"), std::string::npos)
      << on_h100;
  for (const SoftwareProfile& s : software_catalog()) {
    EXPECT_EQ(software_precision_problem(s, Dtype::bf16), "") << s.name;
    EXPECT_EQ(software_precision_problem(s, Dtype::fp32), "") << s.name;
  }
  for (const char* name : {"megatron", "nemo", "fsdp", "torchtitan-compile"})
    EXPECT_EQ(software_precision_problem(find_software(name), Dtype::fp8), "") << name;
  const ModelSpec m = find_preset("llama2-7b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = job_with("megatron-2021");
  j.dtype = Dtype::fp8;
  EXPECT_NE(layout_problem(m, c, j, layout(1, 1, 32, 1)).find("predates fp8"), std::string::npos);
  j.software = find_software("megatron");
  EXPECT_EQ(layout_problem(m, c, j, layout(1, 1, 32, 1)), "");
  auto r = kiln::testing::run_kiln(
      "plan --model llama2-7b --gpu h100-sxm --nodes 4 --software deepspeed-2021 --dtype fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--software deepspeed-2021 trains in fp32, bf16 or fp16"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace kiln::plan
