// Hybrid sharding (shard=N: ZeRO inside groups of N data-parallel ranks, the groups replicas of
// each other) and TPU slices joined over the data-centre network (--slices).
#include <gtest/gtest.h>

#include "plan/cluster_summary.h"
#include "plan/collectives.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/time_model.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

using kiln::testing::error_of;
using kiln::testing::run_kiln;

TEST(PlanHybridShard, StateIsShardedOverTheShardGroupOnly) {
  const Preset& p = find_preset("llama2-7b");
  const JobSpec j = p.job();
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  const Layout hybrid = parse_layout("tp=1,pp=1,dp=64,mb=1,zero=3,recompute=full,shard=8");
  EXPECT_EQ(hybrid.zero_group(), 8);
  EXPECT_EQ(hybrid.replicas(), 8);
  EXPECT_EQ(hybrid.to_string(), "tp=1,pp=1,dp=64,mb=1,zero=3,recompute=full,shard=8");
  const int64_t micro = j.global_batch_seqs() / 64;
  const MemoryBreakdown mh = memory_per_gpu(p.model, c, j, hybrid, micro);
  const double params = double(count_params(p.model).total);
  const StateBytes sb = state_bytes(j);
  EXPECT_NEAR(mh.optimizer, params * sb.optimizer / 8, 1);
  EXPECT_NEAR(mh.grads, params * sb.grads / 8, 1);
  EXPECT_NEAR(mh.weights, params * sb.weights / 8, 1);
  // shard = dp·cp is plain ZeRO: the same estimate to the bit.
  const Layout all = parse_layout("tp=1,pp=1,dp=64,mb=1,zero=3,recompute=full,shard=64");
  const Layout plain = parse_layout("tp=1,pp=1,dp=64,mb=1,zero=3,recompute=full");
  EXPECT_EQ(all.to_string(), plain.to_string());
  EXPECT_EQ(step_time(p.model, c, j, all, micro).step, step_time(p.model, c, j, plain, micro).step);
  EXPECT_EQ(memory_per_gpu(p.model, c, j, all, micro).total,
            memory_per_gpu(p.model, c, j, plain, micro).total);
}

// With nothing overlapped, ZeRO-3's traffic per micro-batch is, unit by unit (the embedding, each
// layer, the head): a gather before forward and again before backward (full recompute gathers
// once more) over the shard group, a reduce-scatter over it, and an all-reduce of the shard
// across the replica group.
TEST(PlanHybridShard, SerialTrafficIsTheShardCollectivesAndTheReplicaAllReduce) {
  const Preset& p = find_preset("llama2-7b");
  JobSpec j = p.job();
  j.overlap_dp = false;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  const Layout l = parse_layout("tp=1,pp=1,dp=64,mb=1,zero=3,recompute=none,shard=8");
  const GroupPath shard = group_path(c, l, Dim::shard), replica = group_path(c, l, Dim::replica);
  EXPECT_EQ(shard.size, 8);
  EXPECT_EQ(shard.nodes, 1);  // one node's 8 GPUs on NVLink
  EXPECT_EQ(replica.size, 8);
  EXPECT_EQ(replica.nodes, 8);  // the same GPU of every node
  const ParamCounts pc = count_params(p.model);
  const StateBytes sb = state_bytes(j);
  auto unit = [&](double params) {
    return 2 * all_gather_s(params * sb.gathered, shard) +
           reduce_scatter_s(params * sb.grads, shard) +
           all_reduce_s(params * sb.grads / 8, replica);
  };
  const double per_micro = unit(double(pc.embedding)) +
                           p.model.n_layer * unit(double(pc.per_layer)) +
                           unit(double(pc.head + pc.final_norm));
  const int64_t micro = j.global_batch_seqs() / 64;
  const TimeBreakdown t = step_time(p.model, c, j, l, micro);
  EXPECT_GT(per_micro, 0.0);
  EXPECT_GT(all_reduce_s(1e6, replica), 0.0);  // the replicas' share is charged, over the NICs
  EXPECT_NEAR(t.zero_exposed, double(micro) * per_micro, 1e-9 * t.zero_exposed);
}

TEST(PlanHybridShard, LayoutsThatCannotShardAreRefused) {
  const Preset& p = find_preset("llama2-7b");
  JobSpec j = p.job();
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  auto problem = [&](const std::string& text) {
    return layout_problem(p.model, c, j, parse_layout(text));
  };
  EXPECT_NE(problem("tp=1,pp=1,dp=64,zero=3,shard=12").find("does not divide the 64"),
            std::string::npos);
  EXPECT_NE(problem("tp=1,pp=1,dp=64,zero=0,shard=8").find("zero=0 has none"), std::string::npos);
  j.seq_len = 4096;
  EXPECT_NE(problem("tp=1,pp=1,cp=4,dp=16,zero=3,shard=2").find("multiple of cp"),
            std::string::npos);
  EXPECT_EQ(problem("tp=1,pp=1,cp=4,dp=16,zero=3,shard=8"), "");
  EXPECT_NE(error_of([] { parse_layout("shard=0"); }).find("shard must be at least 1"),
            std::string::npos);
}

ClusterSpec tpu_slices(int chips, int slices) {
  ClusterSpec c = default_cluster(find_device("tpu-v4"), chips / 4);
  c.slices = slices;
  c.validate();
  return c;
}

TEST(PlanMultiSlice, SlicesAreAlikeAndAtMostAPod) {
  EXPECT_EQ(tpu_slices(8192, 2).torus().name(), "16x16x16");
  EXPECT_EQ(tpu_slices(128, 2).torus().name(), "4x4x4");
  ClusterSpec one = default_cluster(find_device("tpu-v4"), 2048);
  EXPECT_NE(one.size_problem().find("with --slices N"), std::string::npos) << one.size_problem();
  ClusterSpec odd = default_cluster(find_device("tpu-v4"), 24);  // 96 chips: 2 of 48
  odd.slices = 2;
  EXPECT_NE(odd.size_problem().find("cannot have 48 chips"), std::string::npos);
  odd.slices = 5;
  EXPECT_NE(odd.size_problem().find("do not make 5 slices"), std::string::npos);
  ClusterSpec gpus = default_cluster(find_device("a100-80gb"), 2);
  gpus.slices = 2;
  EXPECT_NE(error_of([&] { gpus.validate(); }).find("needs a torus device"), std::string::npos);
}

// A group over two 4×4×4 slices: its members in each slice ring over the slice's links, and
// the slices meet over their hosts' NICs (2 × 100 Gb/s per host of 4 chips, at the Ethernet
// efficiency), 64 chips' shares in parallel.
TEST(PlanMultiSlice, AGroupAcrossSlicesIsTwoLevels) {
  const ClusterSpec two = tpu_slices(128, 2);
  const ClusterSpec one = tpu_slices(64, 1);
  const GroupPath across = group_path(two, parse_layout("tp=1,pp=1,dp=128"), Dim::dp);
  const GroupPath within = group_path(one, parse_layout("tp=1,pp=1,dp=64"), Dim::dp);
  EXPECT_TRUE(across.torus);
  EXPECT_EQ(across.nodes, 2);
  EXPECT_EQ(across.per_node, 64);
  EXPECT_DOUBLE_EQ(across.intra_bw, within.intra_bw);  // all three wrapped axes
  EXPECT_EQ(across.hops, within.hops);
  const double dcn = 2 * 100e9 / 8 * 0.70 / 4;  // bytes/s per chip
  EXPECT_NEAR(across.net_bw, dcn, 1);
  const double S = 1e9;
  const double moved = 127.0 / 128 * std::max(S / across.intra_bw, S / (64 * dcn));
  EXPECT_NEAR(all_gather_s(S, across), across.hops * 1e-6 + 30e-6 + moved, 1e-12);
  EXPECT_NEAR(all_reduce_s(S, across), 2 * (across.hops * 1e-6 + 30e-6) + 2 * moved, 1e-12);
  // A tensor-parallel group stays inside a slice; a pipeline send between slices takes the NICs.
  const GroupPath tp = group_path(two, parse_layout("tp=4,pp=1,dp=32"), Dim::tp);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_NEAR(p2p_s(S, two, parse_layout("tp=1,pp=2,dp=64")), 30e-6 + S / dcn, 1e-9);
  // Placed stages-first (tp-pp-dp), a pipeline of 4 stays in its slice, on the ICI links.
  ClusterSpec inner = two;
  inner.order = RankOrder::tp_pp_dp;
  const double ici_send = p2p_s(S, inner, parse_layout("tp=4,pp=4,dp=8"));
  EXPECT_LE(ici_send, 1e-6 * 4 + S / (45e9 * 0.82));  // a link at least, a few hops
  EXPECT_LT(ici_send, 0.2 * S / dcn);
}

TEST(PlanMultiSlice, CliPlansSlicesAndSearchesHybridSharding) {
  auto summary = run_kiln("plan --gpu tpu-v4 --gpus 8192 --slices 2");
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_NE(summary.output.find("2 × slice 16x16x16"), std::string::npos) << summary.output;
  EXPECT_NE(summary.output.find("2 slices over the data-centre network: 1024 hosts × 25 GB/s"),
            std::string::npos)
      << summary.output;
  auto refused = run_kiln("plan --gpu tpu-v4 --gpus 8192");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--slices N"), std::string::npos) << refused.output;
  auto plan = run_kiln("plan --model llama2-7b --gpu tpu-v4 --gpus 512 --slices 2 --top 1 --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("\"slices\": 2"), std::string::npos) << plan.output;
  auto fixed = run_kiln(
      "plan --model llama2-7b --gpu tpu-v4 --gpus 512 --slices 2 "
      "--layout tp=1,pp=1,mb=1,zero=3,recompute=full,shard=256");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.output;
  EXPECT_NE(fixed.output.find("optimizer state (ZeRO-3 over shard=256)"), std::string::npos)
      << fixed.output;
  const HardwareFile hw =
      parse_hardware_toml("[device]\nbase = \"tpu-v4\"\n[cluster]\nnodes = 64\nslices = 2\n", "s");
  EXPECT_EQ(hw.cluster.slices, 2);
  EXPECT_EQ(hw.cluster.torus().name(), "4x4x8");
}

}  // namespace
}  // namespace kiln::plan
