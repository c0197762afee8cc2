// torchtitan's selective activation checkpointing: per op ("op") and every N-th block ("full/N").
#include "plan/recompute.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "plan/planner.h"

namespace kiln::plan {
namespace {

JobSpec job8k(const std::string& software = "torchtitan") {
  JobSpec j;
  j.seq_len = 8192;
  j.global_batch_tokens = 16 * 8192;
  j.train_tokens = 1e12;
  j.software = find_software(software);
  return j;
}

Layout with(const std::string& recompute) {
  Layout l = parse_layout("tp=1,pp=1,dp=8,mb=2,zero=3,recompute=" + recompute);
  return l;
}

// torchtitan's policy counts mm calls and recomputes the even ones: in Llama's order wq, wk, wv,
// wo, w1, w3, w2 that is wk, wo and w3; a GELU block (wq, wk, wv, wo, w1, w2): wk, wo and w2.
TEST(PlanRecompute, OpPolicyRecomputesEverySecondMatmul) {
  const ModelSpec llama = find_preset("llama3-8b").model;
  const std::vector<BlockMatmul> mm = op_policy_matmuls(llama);
  ASSERT_EQ(mm.size(), 7u);
  const double h = 4096, kv = 1024, f = 14336;
  EXPECT_TRUE(mm[1].recomputed && mm[1].K == h && mm[1].N == kv);  // wk
  EXPECT_TRUE(mm[3].recomputed && mm[3].row_parallel);             // wo
  EXPECT_TRUE(mm[5].recomputed && mm[5].N == f);                   // w3
  EXPECT_FALSE(mm[0].recomputed || mm[2].recomputed || mm[4].recomputed || mm[6].recomputed);
  const std::vector<BlockMatmul> gelu = op_policy_matmuls(find_preset("gpt2-1.5b").model);
  ASSERT_EQ(gelu.size(), 6u);
  EXPECT_TRUE(gelu[5].recomputed && gelu[5].row_parallel);  // w2
  // Hardware FLOPs: the recomputed matmuls' forward, every layer.
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(llama, job8k(), with("op")),
                   32 * 2 * (h * kv + h * h + h * f));
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(llama, job8k(), with("full/2")),
                   block_forward_flops_per_token(llama, 8192) / 2);
}

// "op" keeps the block's input, the kept matmuls' outputs (wq, wv, w1, w2) and the attention
// output with its fp32 log-sum-exp; full/2 keeps the mean of full and none.
TEST(PlanRecompute, MemoryKeptByEachPolicy) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const JobSpec j = job8k();
  const double n = 2 * 8192.0, e = 2, h = 4096, q = 4096, kv = 1024, f = 14336;
  EXPECT_DOUBLE_EQ(kept_activation_bytes(m, j, with("op")),
                   n * (e * (h + q + kv + f + h + q) + 32 * 4));
  const double none = kept_activation_bytes(m, j, with("none"));
  const double full = kept_activation_bytes(m, j, with("full"));
  EXPECT_DOUBLE_EQ(kept_activation_bytes(m, j, with("full/2")), (none + full) / 2);
  EXPECT_LT(kept_activation_bytes(m, j, with("op")), none);
  EXPECT_GT(kept_activation_bytes(m, j, with("op")), full);
}

// Time: full/2 recomputes half of what full does; op recomputes the element-wise kernels and
// three of seven matmuls, less than half a block's forward for Llama 3 8B.
TEST(PlanRecompute, RecomputeTimeOfEachPolicy) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  const JobSpec j = job8k();
  auto rec = [&](const std::string& r) { return step_time(m, c, j, with(r), 1).recompute; };
  EXPECT_NEAR(rec("full/2"), rec("full") / 2, 1e-12);
  EXPECT_GT(rec("op"), 0);
  EXPECT_LT(rec("op"), rec("full/2"));
  EXPECT_EQ(rec("none"), 0);
}

// Selective recomputation with a flash kernel: Megatron-Core checkpoints the core attention
// whatever runs it, so its forward runs again in backward (time and hardware FLOPs); Megatron-
// DeepSpeed's legacy model calls its flash kernel outside the checkpoint and recomputes nothing.
// Unfused attention is recomputed under either.
TEST(PlanRecompute, SelectiveRerunsTheFlashKernelWhereTheSoftwareCheckpointsIt) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  const Layout sel = parse_layout("tp=1,pp=1,dp=1,mb=2,zero=0,recompute=attention");
  const Layout none = parse_layout("tp=1,pp=1,dp=1,mb=2,zero=0,recompute=none");
  const double core = attention_core_forward_flops_per_token(m, 8192);
  const JobSpec mcore = job8k("megatron"), legacy = job8k("deepspeed");
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, mcore, sel), core);
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, legacy, sel), 0);
  const TimeBreakdown with_rerun = step_time(m, c, mcore, sel, 1);
  EXPECT_GT(with_rerun.recompute, 0);
  // What it adds is the recompute and nothing else.
  EXPECT_NEAR(with_rerun.step - step_time(m, c, mcore, none, 1).step, with_rerun.recompute, 1e-9);
  // The flash kernel's forward: a small share of the step at 8K tokens, not a block's forward.
  const Layout full = parse_layout("tp=1,pp=1,dp=1,mb=2,zero=0,recompute=full");
  EXPECT_LT(with_rerun.recompute, 0.25 * step_time(m, c, mcore, full, 1).recompute);
  EXPECT_EQ(step_time(m, c, legacy, sel, 1).recompute, 0);
  // The core's context-parallel gather (or ring) is inside the checkpoint and runs again: with
  // all-gather context parallelism a layer gathers the keys and values twice in forward instead of
  // once, beside backward's gather and reduce-scatter (which cost the same): 4/3 of the traffic.
  JobSpec cpj = mcore;
  cpj.cp_comm = JobSpec::CpComm::all_gather;
  const Layout cp_sel = parse_layout("tp=1,pp=1,dp=1,cp=2,mb=1,zero=0,recompute=attention");
  const Layout cp_none = parse_layout("tp=1,pp=1,dp=1,cp=2,mb=1,zero=0,recompute=none");
  EXPECT_NEAR(step_time(m, c, cpj, cp_sel, 1).cp_comm / step_time(m, c, cpj, cp_none, 1).cp_comm,
              4.0 / 3, 1e-9);
  JobSpec unfused = legacy;
  unfused.flash_attention = false;
  EXPECT_DOUBLE_EQ(recompute_flops_per_token(m, unfused, sel), core);
  EXPECT_GT(step_time(m, c, unfused, sel, 1).recompute, 0);
}

TEST(PlanRecompute, LayoutTextAndChecks) {
  EXPECT_EQ(with("full/2").to_string(), "tp=1,pp=1,dp=8,mb=2,zero=3,recompute=full/2");
  EXPECT_EQ(with("op").to_string(), "tp=1,pp=1,dp=8,mb=2,zero=3,recompute=op");
  EXPECT_EQ(with("full/1").to_string(), "tp=1,pp=1,dp=8,mb=2,zero=3,recompute=full");
  EXPECT_THROW(parse_layout("recompute=full/0"), Error);
  EXPECT_THROW(parse_layout("recompute=full/x"), Error);
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  JobSpec j = job8k();
  j.flash_attention = false;
  EXPECT_NE(layout_problem(m, c, j, with("op")).find("needs --attention flash"), std::string::npos);
  EXPECT_NE(layout_problem(m, c, job8k(), with("full/40")).find("more than the 32 layers"),
            std::string::npos);
}

// The search tries what the software runs: torchtitan's policies with torchtitan, not with
// Megatron-LM.
TEST(PlanRecompute, SearchTriesTorchtitansPoliciesOnlyWithTorchtitan) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  auto tries_op = [&](const std::string& sw) {
    const SearchResult r = search(m, c, job8k(sw));
    auto op = [](const Estimate& e) { return e.layout.recompute_op; };
    return std::any_of(r.fitting.begin(), r.fitting.end(), op) ||
           std::any_of(r.faster_oom.begin(), r.faster_oom.end(), op);
  };
  EXPECT_TRUE(tries_op("torchtitan"));
  EXPECT_FALSE(tries_op("megatron"));
}

}  // namespace
}  // namespace kiln::plan
