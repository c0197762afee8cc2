#include "plan/time_model.h"

#include <gtest/gtest.h>

#include "plan/collectives.h"
#include "plan/memory_model.h"
#include "plan/planner.h"

namespace kiln::plan {
namespace {

// A model whose embedding and head are negligible, so every pipeline stage does the same work.
ModelSpec even_model() {
  ModelSpec m;
  m.name = "even";
  m.n_layer = 32;
  m.hidden = 4096;
  m.n_head = 32;
  m.n_kv_head = 32;
  m.ffn_hidden = 16384;
  m.vocab = 128;
  m.max_seq = 2048;
  m.learned_positions = false;
  return m;
}

JobSpec job(int64_t seqs) {
  JobSpec j;
  j.seq_len = 2048;
  j.global_batch_tokens = seqs * 2048;
  j.train_tokens = 1e12;
  return j;
}

// The pipeline bubble is (p − 1)/(m + p − 1) of the pipeline's time with 1F1B and
// (p − 1)/(v·m + p − 1) with v interleaved stages (Narayanan et al. 2021, sections 2.2.1-2.2.2).
TEST(PlanTimeModel, PipelineBubbleFollowsTheScheduleFormula) {
  const ModelSpec m = even_model();
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 8);
  JobSpec j = job(32);
  // Equal stages: the 128-word head is negligible, and so is its loss when it is one kernel (an
  // eager loss's several kernels' fixed costs would make the last stage measurably longer).
  Layout l;
  // Every tensor-parallel collective waiting (megatron-2021), so that the embedding's and the
  // head's make the first and last stages equally longer; Megatron's backward overlap gives the
  // head's collectives a share of its (tiny) matmuls' time.
  j.software = find_software("megatron-2021");
  l.tp = 8, l.pp = 8, l.dp = 1, l.mb = 1, l.sp = true;
  j.software.loss_kernels = 1;
  for (int v : {1, 2, 4}) {
    l.vpp = v;
    const TimeBreakdown t = step_time(m, c, j, l, 32);
    const double pipeline = t.step - t.dp_exposed - t.optimizer;
    EXPECT_NEAR(t.bubble / pipeline, 7.0 / (v * 32 + 7), 0.003) << "vpp=" << v;
  }
}

TEST(PlanTimeModel, MoreMicroBatchesShrinkTheBubble) {
  const ModelSpec m = even_model();
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  Layout l;
  l.tp = 8, l.pp = 4, l.dp = 1, l.mb = 1, l.sp = true;
  const TimeBreakdown few = step_time(m, c, job(8), l, 8);
  const TimeBreakdown many = step_time(m, c, job(64), l, 64);
  EXPECT_GT(few.bubble / few.step, many.bubble / many.step);
}

// Full recomputation repeats the forward: about a third more compute than none.
TEST(PlanTimeModel, FullRecomputeAddsAForwardPass) {
  const ModelSpec m = even_model();
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  Layout l;
  l.dp = 8, l.mb = 1;
  const TimeBreakdown none = step_time(m, c, job(64), l, 8);
  l.recompute = Recompute::full;
  const TimeBreakdown full = step_time(m, c, job(64), l, 8);
  EXPECT_NEAR(full.recompute / (none.compute), 1.0 / 3, 0.03);
  EXPECT_NEAR(full.compute - full.recompute, none.compute, 1e-9 * none.compute);
}

// A flash kernel's published rate is a short burst's, like a matmul's MAMF; in training it runs
// at the device's sustained share of it, as the matmuls do (their efficiency has it already). On
// an H100 under the megatron profile (cuDNN attention, 0.50 of peak at every length) only the
// attention time changes with `sustained`: forward 2·s²·d per head (causal half of 4·s²·d),
// backward 2.5 times that, per layer and micro-batch.
TEST(PlanTimeModel, FlashAttentionRunsAtTheSustainedClock) {
  const ModelSpec m = even_model();
  ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  EXPECT_DOUBLE_EQ(c.device.sustained, 0.845);
  JobSpec j = job(64);
  j.software = find_software("megatron");
  ASSERT_TRUE(j.flash_attention);
  Layout l;
  l.dp = 8, l.mb = 1;
  const TimeBreakdown held = step_time(m, c, j, l, 8);
  c.device.sustained = 1;
  const TimeBreakdown burst = step_time(m, c, j, l, 8);
  const double rate = 0.50 * 989e12, s = 2048, d = 128;
  const double fl = m.n_head * 0.5 * 4 * s * s * d;  // one layer, one micro-batch, forward
  const double extra = 8 * m.n_layer * 3.5 * fl * (1 / (0.845 * rate) - 1 / rate);
  EXPECT_NEAR(held.compute - burst.compute, extra, 1e-6 * extra);
  // Unfused attention runs at the matmul rate, which is sustained already: nothing changes.
  j.flash_attention = false;
  const TimeBreakdown unfused_burst = step_time(m, c, j, l, 8);
  c.device.sustained = 0.845;
  EXPECT_DOUBLE_EQ(step_time(m, c, j, l, 8).compute, unfused_burst.compute);
}

// Data-parallel gradients overlap with the last backward unless told not to.
TEST(PlanTimeModel, OverlapHidesDataParallelTraffic) {
  const ModelSpec m = even_model();
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  JobSpec j = job(32);
  Layout l;
  l.dp = 32, l.mb = 1;
  const TimeBreakdown overlapped = step_time(m, c, j, l, 1);
  j.overlap_dp = false;
  const TimeBreakdown serial = step_time(m, c, j, l, 1);
  EXPECT_GT(serial.dp_comm, 0);
  EXPECT_DOUBLE_EQ(serial.dp_exposed, serial.dp_comm);
  EXPECT_LT(overlapped.dp_exposed, serial.dp_exposed);
  EXPECT_DOUBLE_EQ(serial.contention, 0);
  EXPECT_NEAR(serial.step - serial.dp_exposed,
              overlapped.step - overlapped.dp_exposed - overlapped.contention, 1e-9 * serial.step);
}

// Compute beside a hidden collective runs overlap_slowdown slower (NCCL's kernels hold SMs):
// the step pays that fraction of every second a data-parallel or ZeRO collective was hidden,
// which is what the serial schedule exposes minus what the overlapped one does.
TEST(PlanTimeModel, HiddenCollectivesSlowTheComputeBesideThem) {
  const ModelSpec m = even_model();
  DeviceSpec d = find_device("h100-sxm");
  EXPECT_DOUBLE_EQ(d.overlap_slowdown, 0.189);
  EXPECT_DOUBLE_EQ(find_device("tpu-v4").overlap_slowdown, 0);
  for (int zero : {0, 1, 2, 3}) {
    Layout l;
    l.dp = 64, l.mb = 1, l.zero = zero;
    JobSpec j = job(64 * 4);
    auto run = [&](double slowdown, bool overlap) {
      d.overlap_slowdown = slowdown;
      j.overlap_dp = overlap;
      return step_time(m, default_cluster(d, 8), j, l, 4);
    };
    const TimeBreakdown serial = run(0.189, false), free = run(0, true), slowed = run(0.189, true);
    const double hidden =
        (serial.zero_exposed + serial.dp_exposed) - (slowed.zero_exposed + slowed.dp_exposed);
    EXPECT_GT(hidden, 0) << "zero=" << zero;
    EXPECT_NEAR(slowed.contention, 0.189 * hidden, 1e-9 * slowed.step) << "zero=" << zero;
    EXPECT_DOUBLE_EQ(free.contention, 0);
    EXPECT_NEAR(slowed.step - free.step, slowed.contention, 1e-9 * slowed.step);
    // Overlap still pays: hiding a collective costs a fifth of it, exposing it costs all.
    EXPECT_LT(slowed.step, serial.step) << "zero=" << zero;
  }
  // Under pipeline parallelism a stage's once-per-step traffic also hides in its idle warm-up
  // and cool-down, where there is no compute to slow: only what runs beside compute is charged.
  // On a slow network the gradients' reduce-scatter outlasts a stage's last backward and hides
  // in the last stage's cool-down (3 stage-backwards), which the charge leaves out.
  Layout l;
  l.pp = 4, l.dp = 16, l.mb = 1, l.zero = 1;
  JobSpec j = job(16 * 16);
  d.overlap_slowdown = 0.189;
  ClusterSpec slow = default_cluster(d, 8);
  slow.nics_per_node = 1, slow.nic_gbps = 10;
  const TimeBreakdown t = step_time(m, slow, j, l, 16);
  // Beside compute: at most one stage-forward and one stage-backward (compute is the slowest
  // stage's, for 16 micro-batches), though the traffic is far longer and the last stage hides
  // up to 3 more stage-backwards of it in its cool-down.
  const double stage_pass = t.compute / 16;
  EXPECT_GT(t.dp_comm, 4 * stage_pass);
  EXPECT_GT(t.contention, 0.9 * 0.189 * stage_pass);
  EXPECT_LE(t.contention, 0.189 * stage_pass * (1 + 1e-9));
}

// Megatron-LM since 2021-09 launches a column-parallel layer's input-gradient collective before
// its weight-gradient matmul (and with sequence parallelism gathers the saved input during the
// input-gradient matmul); megatron-2021, the SC'21 paper's code, waits for each. With matmuls
// that hide them, a layer under full recompute exposes, of its six collective pairs' worth
// (forward, recomputed forward, backward), five with sequence parallelism (the backward's two
// output-gradient gathers stay) and four without; the hidden time slows the matmuls beside it by
// the device's overlap slowdown, in every micro-batch's stage time (so in the bubble too).
// Whatever is hidden,
// exposed + hidden is every collective run, the saved-input gathers included.
TEST(PlanTimeModel, MegatronHidesTheBackwardsInputGradientCollectives) {
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  JobSpec j = job(8);
  Layout l;
  l.tp = 8, l.pp = 1, l.dp = 1, l.mb = 4, l.recompute = Recompute::full;
  const double slow = c.device.overlap_slowdown;
  for (int width : {8192, 1024}) {  // matmuls that outlast each collective; and that do not
    ModelSpec m = even_model();
    m.hidden = width, m.n_head = m.n_kv_head = width / 128, m.ffn_hidden = 4 * width;
    const double L = m.n_layer;
    for (bool sp : {true, false}) {
      l.sp = sp;
      j.software = find_software("megatron-2021");
      const TimeBreakdown waits = step_time(m, c, j, l, 2);
      j.software = find_software("megatron");
      const TimeBreakdown overlaps = step_time(m, c, j, l, 2);
      EXPECT_EQ(waits.contention, 0);
      // Per layer 6 pairs' worth wait (the embedding and the head add one each per stage; a
      // reduce-scatter and a gather together cost what an all-reduce does). The overlap runs
      // one gather more per column-parallel linear with sp: QKV, MLP up and the head.
      const double all = waits.tp_comm * (6 * L + 2 + (sp ? (2 * L + 1) / 2.0 : 0)) / (6 * L + 2);
      const double hidden = overlaps.contention / slow;
      EXPECT_NEAR(overlaps.tp_comm + hidden, all, 1e-9 * all) << width << " " << sp;
      EXPECT_NEAR(overlaps.step,
                  waits.step - (waits.tp_comm - overlaps.tp_comm) + overlaps.contention,
                  1e-9 * waits.step)
          << width << " " << sp;
      // Hidden: the blocks' two input-gradient collectives and (sp) two gathers per layer, and
      // of the head's (one pair's worth) what its memory-bound matmuls over a 128-word
      // vocabulary cover.
      const double most = waits.tp_comm * 2 * L / (6 * L + 2);
      if (width == 8192) {
        EXPECT_GE(hidden, most * (1 - 1e-9)) << sp;
        EXPECT_LE(hidden, most * (1 + 1 / (2 * L)) * (1 + 1e-9)) << sp;
      } else {
        EXPECT_GT(hidden, 0.2 * most) << sp;
        EXPECT_LT(hidden, 0.9 * most) << sp;
      }
    }
  }
  EXPECT_TRUE(find_software("nemo").tp_dgrad_overlap);
  EXPECT_FALSE(find_software("deepspeed").tp_dgrad_overlap);  // its forks of 2021-22 waited
  EXPECT_FALSE(find_software("torchtitan-compile").tp_dgrad_overlap);
  EXPECT_FALSE(find_software("megatron-2021").async_tp);
  EXPECT_FALSE(find_software("megatron-2021").sequence_parallel);
}

// ZeRO-3 works layer by layer (docs/planner.md, "ZeRO-2/3 unit by unit"): each layer's gather
// and reduce-scatter pays a ring's N − 1 steps, so with the same per-device batch the exposed
// traffic grows with the data-parallel size; a pass exposes at least its first gather and its
// last reduce-scatter even when compute covers the rest, and never more than all of it serially.
TEST(PlanTimeModel, ZeroThreeExposesPerLayerLatencyThatGrowsWithTheGroup) {
  const ModelSpec m = even_model();
  Layout l;
  l.mb = 1, l.zero = 3;
  auto exposed = [&](int nodes, bool overlap) {
    const ClusterSpec c = default_cluster(find_device("a100-80gb"), nodes);
    JobSpec j = job(8 * nodes);
    j.overlap_dp = overlap;
    l.dp = 8 * nodes;
    return step_time(m, c, j, l, 1).zero_exposed;
  };
  const double small = exposed(4, true), large = exposed(128, true);
  EXPECT_GT(small, 0);
  EXPECT_GT(large, 1.5 * small) << small << " " << large;
  // The first layer's gather has only the (negligible) embedding's forward to hide behind.
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 4);
  l.dp = 32;
  const GroupPath dpg = group_path(c, l, Dim::dp);
  const double layer = double(count_params(m).per_layer);
  EXPECT_GE(small, all_gather_s(layer * state_bytes(JobSpec{}).gathered, dpg) * 0.99);
  // Serially (no overlap), every unit's two gathers and reduce-scatter.
  EXPECT_GT(exposed(4, false), small);
}

// ZeRO-2 as FSDP runs it (SHARD_GRAD_OP: "unshards before the forward, does not reshard them after
// the forward, and only reshards them after the backward") gathers each unit once per micro-batch,
// before its forward; DeepSpeed's ZeRO-2 keeps whole weights and gathers them once per step. So,
// serially, FSDP's ZeRO-2 moves one gather per unit more than DeepSpeed's per micro-batch and one
// less than ZeRO-3 (which gathers again for backward), and has no once-per-step gather.
TEST(PlanTimeModel, FsdpZeroTwoGathersEachUnitBeforeItsForward) {
  const ModelSpec m = even_model();
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  JobSpec j = job(64 * 2);
  j.overlap_dp = false;
  Layout l;
  l.dp = 64, l.mb = 1;
  // FSDP's root unit (embedding, norm, head) is one unit kept through the backward (software
  // tests); here every unit is gathered apart, to compare unit by unit with DeepSpeed's.
  auto run = [&](const char* software, int zero, bool root_kept = false) {
    j.software = find_software(software);
    j.software.fsdp_root_kept = root_kept;
    l.zero = zero;
    return step_time(m, c, j, l, 2);
  };
  const TimeBreakdown ds2 = run("deepspeed", 2), fsdp2 = run("fsdp", 2), fsdp3 = run("fsdp", 3);
  EXPECT_GT(ds2.dp_comm, 0);  // the once-per-step gather of the updated weights
  EXPECT_DOUBLE_EQ(fsdp2.dp_comm, 0);
  const double one_gather_per_unit = fsdp2.zero_exposed - ds2.zero_exposed;
  EXPECT_GT(one_gather_per_unit, 0);
  EXPECT_NEAR(fsdp3.zero_exposed - fsdp2.zero_exposed, one_gather_per_unit,
              1e-9 * fsdp3.zero_exposed);
  // The units' gathers, each with its own ring latency, for each of the two micro-batches.
  const ParamCounts pc = count_params(m);
  const GroupPath g = group_path(c, l, Dim::shard);
  const double gathered = state_bytes(j).gathered;
  double units = all_gather_s(double(pc.embedding) * gathered, g) +
                 m.n_layer * all_gather_s(double(pc.per_layer) * gathered, g);
  units += all_gather_s(double((m.tied_embeddings ? 0 : pc.head) + pc.final_norm) * gathered, g);
  EXPECT_NEAR(one_gather_per_unit, 2 * units, 1e-9 * units);
  EXPECT_GT(one_gather_per_unit, 2 * ds2.dp_comm);  // the latencies of more, smaller gathers
  // With the root kept, ZeRO-3 adds the blocks' backward gathers only.
  const double blocks = m.n_layer * all_gather_s(double(pc.per_layer) * gathered, g);
  EXPECT_NEAR(run("fsdp", 3, true).zero_exposed - run("fsdp", 2, true).zero_exposed, 2 * blocks,
              1e-9 * blocks);
}

// The loss is the profile's count of bytes per logit element in its kernels: two profiles that
// differ only there differ by exactly those bytes over the memory bandwidth and the kernels'
// fixed costs, on the last stage, once per micro-batch. Megatron's vocab-parallel cross-entropy
// moves 2e + 48 bytes per element in 8 kernels, llm-foundry's fused one 3e in 2.
TEST(PlanTimeModel, TheLossMovesTheProfilesBytesPerLogit) {
  ModelSpec m = even_model();
  m.vocab = 131072;
  const DeviceSpec d = find_device("h100-sxm");
  const ClusterSpec c = default_cluster(d, 1);
  JobSpec j = job(8);
  Layout l;
  l.dp = 8, l.mb = 1;
  EXPECT_DOUBLE_EQ(find_software("megatron").loss_bytes(2), 52);
  EXPECT_DOUBLE_EQ(find_software("fsdp").loss_bytes(2), 6);
  EXPECT_DOUBLE_EQ(find_software("torchtitan").loss_bytes(2), 48);
  SoftwareProfile a = find_software("megatron"), b = a;
  b.loss_bytes_per_e = 3, b.loss_bytes_fixed = 0, b.loss_kernels = 2;
  j.software = a;
  const double ta = step_time(m, c, j, l, 1).compute;
  j.software = b;
  const double tb = step_time(m, c, j, l, 1).compute;
  const double logits = 2048.0 * m.vocab;  // one sequence per rank and micro-batch
  const double bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency;
  EXPECT_NEAR(ta - tb, logits * (52 - 6) / bw + (8 - 2) * d.kernel_overhead_us * 1e-6, 1e-9 * ta);
}

// Ring costs (docs/planner.md): all-reduce base + 2(n−1)α + 2(n−1)/n·S/B, reduce-scatter and
// all-gather half the steps and bytes; between nodes the bytes go over k NICs in parallel.
TEST(PlanCollectives, RingAndTreeCosts) {
  GroupPath g;
  g.size = 8, g.per_node = 8, g.nodes = 1;
  g.intra_bw = 240e9, g.intra_lat = 3.4e-6;
  const double S = 1e9;
  EXPECT_DOUBLE_EQ(all_reduce_s(S, g), 8.4e-6 + 14 * 3.4e-6 + 2.0 * 7 / 8 * S / 240e9);
  EXPECT_DOUBLE_EQ(reduce_scatter_s(S, g), 8.4e-6 + 7 * 3.4e-6 + 7.0 / 8 * S / 240e9);
  EXPECT_DOUBLE_EQ(all_gather_s(S, g), reduce_scatter_s(S, g));
  g.size = 16, g.nodes = 2, g.net_bw = 23e9, g.net_lat = 9.6e-6;
  const double W = S / (8 * 23e9);  // 8 NICs carry it; NVLink (240 GB/s) is not the bottleneck
  EXPECT_DOUBLE_EQ(all_reduce_s(S, g), 8.4e-6 + 30 * 9.6e-6 + 2.0 * 15 / 16 * W);
  // A small message is latency-bound: the tree's 2·log2(N) network steps beat the ring's 2(n−1).
  const double tiny = 1024;
  const double tree = 8.4e-6 + 2 * (1 * 9.6e-6 + 7 * 3.4e-6) + 2 * tiny / (8 * 23e9);
  EXPECT_DOUBLE_EQ(all_reduce_s(tiny, g), tree);
}

TEST(PlanCollectives, OversubscriptionSlowsTrafficThatLeavesALeaf) {
  ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  Layout l;
  l.tp = 8, l.dp = 16;
  EXPECT_DOUBLE_EQ(group_path(c, l, Dim::dp).slowdown, 1);  // fat-tree
  c.topology = Topology::spine_leaf;
  c.oversubscription = 4;
  c.nodes_per_domain = 2;
  // A ring over 16 nodes with 2 under each leaf: 4:1 uplinks shared by 2 nodes' rings → 2×.
  EXPECT_DOUBLE_EQ(group_path(c, l, Dim::dp).slowdown, 2);
  c.nodes_per_domain = 16;  // the whole ring under one leaf
  EXPECT_DOUBLE_EQ(group_path(c, l, Dim::dp).slowdown, 1);
  c.nodes_per_domain = 2;
  c.topology = Topology::dragonfly;
  c.oversubscription = 1;  // balanced global links, but Valiant routing crosses two of them
  EXPECT_DOUBLE_EQ(group_path(c, l, Dim::dp).slowdown, 1);
  c.nodes_per_domain = 1;
  EXPECT_DOUBLE_EQ(group_path(c, l, Dim::dp).slowdown, 2);
  // Pipeline sends two nodes apart with 2 nodes per leaf all leave the leaf: the full 4×.
  c.topology = Topology::spine_leaf;
  c.oversubscription = 4;
  c.nodes_per_domain = 2;
  Layout p;
  p.tp = 8, p.dp = 2, p.pp = 8;
  const double bytes = 1e8;
  EXPECT_DOUBLE_EQ(p2p_s(bytes, c, p), c.inter_latency() + bytes / (c.inter_bw_per_gpu() / 4));
  // A physical ring of nodes: a group with members 2 nodes apart shares each link two ways.
  c.topology = Topology::ring;
  c.oversubscription = 1;
  c.order = RankOrder::tp_pp_dp;
  Layout r;
  r.tp = 8, r.pp = 2, r.dp = 8;
  EXPECT_DOUBLE_EQ(group_path(c, r, Dim::dp).slowdown, 2);
}

}  // namespace
}  // namespace kiln::plan

namespace kiln::plan {
namespace {

// One formula set (docs/collectives.md, "The formula set"): the planner's ring is the engine's
// ring, byte for byte and hand-off for hand-off; the engine's own byte counter is checked
// against the same functions in tests/comm/shm_algorithms_mpitest.cpp.
TEST(PlanCollectives, ThePlannersRingUsesTheEnginesFormulaSet) {
  const double S = 3e8;
  for (int n = 2; n <= 9; n++) {
    GroupPath g;
    g.size = n, g.per_node = n, g.nodes = 1;
    g.intra_bw = 100e9, g.intra_lat = 2e-6;
    const CollAlgorithm R = CollAlgorithm::ring;
    EXPECT_EQ(sync_steps(R, CollOp::all_reduce, n), 2 * (n - 1));
    EXPECT_EQ(sync_steps(R, CollOp::reduce_scatter, n), n - 1);
    EXPECT_DOUBLE_EQ(max_bytes_sent(R, CollOp::all_reduce, n, S), 2.0 * (n - 1) / n * S);
    EXPECT_NEAR(all_reduce_s(S, g),
                8.4e-6 + sync_steps(R, CollOp::all_reduce, n) * 2e-6 +
                    max_bytes_sent(R, CollOp::all_reduce, n, S) / 100e9,
                1e-15);
    EXPECT_NEAR(reduce_scatter_s(S, g),
                8.4e-6 + sync_steps(R, CollOp::reduce_scatter, n) * 2e-6 +
                    max_bytes_sent(R, CollOp::reduce_scatter, n, S) / 100e9,
                1e-15);
  }
}

TEST(PlanCollectives, BytesSentPerAlgorithmAsDocumented) {
  const double S = 1200;  // divisible by 2, 3, 4
  using A = CollAlgorithm;
  const CollOp AR = CollOp::all_reduce, RS = CollOp::reduce_scatter;
  for (int P : {2, 3, 4}) {
    for (int r = 0; r < P; r++) {
      EXPECT_DOUBLE_EQ(bytes_sent(A::one_shot, AR, P, r, S), S);
      EXPECT_DOUBLE_EQ(bytes_sent(A::direct, AR, P, r, S), S);
      EXPECT_DOUBLE_EQ(bytes_sent(A::direct, RS, P, r, S), (P - 1) * S / P);
      EXPECT_DOUBLE_EQ(bytes_sent(A::one_shot, RS, P, r, S), (P - 1) * S / P);
      EXPECT_DOUBLE_EQ(bytes_sent(A::ring, AR, P, r, S), 2.0 * (P - 1) * S / P);
      EXPECT_DOUBLE_EQ(bytes_sent(A::ring, RS, P, r, S), (P - 1) * S / P);
    }
  }
  // Powers of two: halving-doubling sends what the ring sends, in log2 P steps.
  for (int r = 0; r < 4; r++) {
    EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, AR, 4, r, S), 2.0 * 3 * S / 4);
    EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, RS, 4, r, S), 3 * S / 4);
  }
  EXPECT_EQ(sync_steps(A::halving_doubling, AR, 4), 4);
  EXPECT_EQ(sync_steps(A::halving_doubling, AR, 3), 4);  // one level, fold and unfold
  // P = 3: rank 0 keeps slices 0 and 2 (q mod 2 = 0), stands in for rank 2. Halving: it stages
  // slice 1 for rank 1; doubling: slices 0 and 2; then all of S for rank 2.
  EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, AR, 3, 0, S), S / 3 + 2 * S / 3 + S);
  EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, AR, 3, 1, S), 2 * S / 3 + S / 3);
  EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, AR, 3, 2, S), S);
  EXPECT_DOUBLE_EQ(bytes_sent(A::halving_doubling, RS, 3, 0, S), S / 3 + S / 3);
  EXPECT_EQ(parse_coll_algorithm("ring"), A::ring);
}

}  // namespace
}  // namespace kiln::plan
