// Context parallelism (cp in the layout): tokens split over cp ranks, keys and values passed
// round a ring, gradients reduced and ZeRO sharded over dp × cp.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "plan/collectives.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/stages.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

JobSpec long_job(int seq) {
  JobSpec j;
  j.seq_len = seq;
  j.global_batch_tokens = int64_t(64) * seq;
  j.train_tokens = 1e12;
  return j;
}

TEST(PlanContextParallel, LayoutTextAndChecks) {
  EXPECT_EQ(parse_layout("tp=8,cp=4,pp=2,dp=2,mb=1,zero=1,recompute=none").to_string(),
            "tp=8,pp=2,dp=2,mb=1,zero=1,recompute=none,cp=4");
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);  // 64 devices
  JobSpec j = long_job(32768);
  EXPECT_EQ(layout_problem(m, c, j, parse_layout("tp=8,cp=4,dp=2")), "");
  EXPECT_NE(layout_problem(m, c, j, parse_layout("tp=8,cp=4,dp=4")).find("tp×cp×pp×dp = 128"),
            std::string::npos);
  j.flash_attention = false;
  EXPECT_NE(layout_problem(m, c, j, parse_layout("tp=8,cp=4,dp=2")).find("--attention flash"),
            std::string::npos);
  JobSpec odd = long_job(32766);
  EXPECT_NE(layout_problem(m, c, odd, parse_layout("tp=8,cp=4,dp=2")).find("multiple of 8"),
            std::string::npos);
  // dp left out: what the devices leave after tp × cp × pp.
  EXPECT_EQ(complete_layout(m, c, long_job(32768), parse_layout("tp=8,cp=2")).dp, 4);
}

// Each rank holds s/cp tokens of every sequence: activations per layer and micro-batch, the
// matmuls and the attention (its s/cp queries against all s keys, causal work balanced) all
// divide by cp; ZeRO shards the optimizer over dp × cp.
TEST(PlanContextParallel, TokensAndWorkDivideByCp) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const JobSpec j = long_job(65536);
  Layout one = parse_layout("tp=8,dp=8,mb=1,zero=1"),
         four = parse_layout("tp=8,cp=4,dp=2,mb=1,zero=1");
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, j, four, Recompute::none),
                   layer_activation_bytes(m, j, one, Recompute::none) / 4);
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  const MemoryBreakdown m1 = memory_per_gpu(m, c, j, one, 8),
                        m4 = memory_per_gpu(m, c, j, four, 32);
  EXPECT_DOUBLE_EQ(m4.optimizer, m1.optimizer);  // dp × cp = 8 either way
  const TimeBreakdown t1 = step_time(m, c, j, one, 8), t4 = step_time(m, c, j, four, 32);
  // Per micro-batch the work divides by 4; the step has 4× the micro-batches per pipeline.
  EXPECT_NEAR(t4.compute / t1.compute, 1.0, 0.02);
}

// The ring's passes hide behind attention when the link is fast (NVLink inside a node, long
// sequences) and show when it is slow (one 100 Gb/s Ethernet port per 8 GPUs, short chunks).
TEST(PlanContextParallel, KeyValuePassesHideBehindAttentionOnlyOnAFastLink) {
  const ModelSpec m = find_preset("llama3-8b").model;
  ClusterSpec node = default_cluster(find_device("h100-sxm"), 1);
  const Layout in_node = parse_layout("tp=1,cp=8,dp=1,mb=1,zero=0");
  EXPECT_EQ(step_time(m, node, long_job(131072), in_node, 64).cp_comm, 0);
  ClusterSpec slow = default_cluster(find_device("h100-sxm"), 4);
  slow.network = "ethernet", slow.nics_per_node = 1, slow.nic_gbps = 100;
  const Layout across = parse_layout("tp=8,cp=4,dp=1,mb=1,zero=0");
  EXPECT_GT(step_time(m, slow, long_job(8192), across, 64).cp_comm, 0);
  // The cp group lies next to tp: with tp = 8 its members are a node apart.
  EXPECT_EQ(group_path(slow, across, Dim::cp).nodes, 4);
  EXPECT_EQ(group_path(node, in_node, Dim::cp).nodes, 1);
}

// --cp-comm all-gather (Megatron-Core's --cp-comm-type allgather, Llama 3's CP): each layer
// gathers the whole sequence's keys and values before attention and, in backward, gathers them
// again and reduce-scatters their gradients, all exposed. Across nodes that costs the three
// collectives' time per layer and micro-batch, where the ring hides inside a node's attention;
// the gathered keys and values join the working set, and the report names the method.
TEST(PlanContextParallel, AllGatherKeysAndValuesAreExposed) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  const Layout l = parse_layout("tp=8,cp=4,dp=1,mb=1,zero=0,recompute=none");
  JobSpec ring = long_job(131072), ag = ring;
  ag.cp_comm = JobSpec::CpComm::all_gather;
  const TimeBreakdown tr = step_time(m, c, ring, l, 64), ta = step_time(m, c, ag, l, 64);
  const GroupPath g = group_path(c, l, Dim::cp);
  const double kv_all = 131072.0 * 2 * kv_heads_per_rank(m, 8) * m.head_dim() * 2;
  const double per_layer = 2 * all_gather_s(kv_all, g) + reduce_scatter_s(kv_all, g);
  EXPECT_NEAR(ta.cp_comm, 64 * m.n_layer * per_layer, 1e-9 * ta.cp_comm);
  EXPECT_GT(ta.cp_comm, tr.cp_comm);
  EXPECT_DOUBLE_EQ(ta.compute, tr.compute);
  EXPECT_GT(memory_per_gpu(m, c, ag, l, 64).transient, memory_per_gpu(m, c, ring, l, 64).transient);
  EXPECT_EQ(parse_cp_comm("all-gather"), JobSpec::CpComm::all_gather);
  EXPECT_THROW(parse_cp_comm("a2a"), Error);
  const auto r = kiln::testing::run_kiln(
      "plan --model llama3-8b --gpu h100-sxm --nodes 4 --seq-len 131072 --global-batch-tokens "
      "8388608 "
      "--cp-comm all-gather --layout tp=8,cp=4,pp=1,mb=1,zero=0,recompute=none,vpp=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("context parallelism by all-gather"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("context-parallel key/value all-gathers (exposed)"), std::string::npos)
      << r.output;
}

// The search tries cp where the user left it open: Llama 3 70B at 192K tokens on 32 H100s fits on
// no layout without context parallelism (a layer's activations for one sequence outgrow the
// device), and does with it; a cp the user fixes stays fixed, even when nothing then fits.
TEST(PlanContextParallel, SearchTriesCpForLongSequences) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = long_job(196608);
  j.global_batch_tokens = int64_t(32) * j.seq_len;
  FixedFields cp1;
  cp1.values.cp = 1;
  cp1.keys.cp = true;
  const SearchResult fixed = search(m, c, j, cp1);
  EXPECT_TRUE(fixed.fitting.empty());
  EXPECT_GT(fixed.considered, 0);
  EXPECT_EQ(fixed.least_memory.layout.cp, 1);
  for (const Estimate& e : fixed.faster_oom) EXPECT_EQ(e.layout.cp, 1);
  EXPECT_EQ(fixed.fixed.back().key, "cp");
  const SearchResult free = search(m, c, j);
  ASSERT_FALSE(free.fitting.empty());
  // The search says it varied cp, and over which degrees.
  auto cp_entry = std::find_if(free.searched.begin(), free.searched.end(),
                               [](const auto& f) { return f.key == "cp"; });
  ASSERT_NE(cp_entry, free.searched.end());
  EXPECT_EQ(cp_entry->how, "1, 2, 4, 8, 16, 32");
  EXPECT_GT(free.fitting.front().layout.cp, 1);
  for (const Estimate& e : free.fitting) {
    // Only degrees that leave each rank at least kCpMinTokens of the sequence.
    EXPECT_GE(j.seq_len / e.layout.cp, kCpMinTokens) << e.layout.to_string();
    EXPECT_EQ(j.seq_len % (2 * e.layout.cp), 0) << e.layout.to_string();
  }
  // Below kCpLongSeq the search stays at cp=1 while something fits there.
  const ModelSpec small = find_preset("llama3-8b").model;
  const JobSpec short_job = long_job(8192);
  const SearchResult s = search(small, default_cluster(find_device("h100-sxm"), 1), short_job);
  ASSERT_FALSE(s.fitting.empty());
  for (const Estimate& e : s.fitting) EXPECT_EQ(e.layout.cp, 1);
  ASSERT_FALSE(s.not_searched.empty());
  EXPECT_EQ(s.not_searched.front().key, "cp");
  EXPECT_NE(s.not_searched.front().how.find("below 16384"), std::string::npos);
}

// Below kCpLongSeq, context parallelism is tried when nothing fits without it: Llama 3 8B at 8K
// tokens on one node of A100 40GB with tp=1, pp=1, ZeRO-3 and no recompute fixed keeps a whole
// sequence's activations per rank (out of memory at cp=1); cp = 2..8 splits them.
TEST(PlanContextParallel, SearchTriesCpWhenMemoryForcesIt) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("a100-40gb"), 1);
  JobSpec j = long_job(8192);
  j.global_batch_tokens = int64_t(8) * j.seq_len;
  FixedFields f;
  f.values = parse_layout("tp=1,pp=1,zero=3,recompute=none", &f.keys);
  FixedFields f_cp1 = f;
  f_cp1.values.cp = 1, f_cp1.keys.cp = true;
  EXPECT_TRUE(search(m, c, j, f_cp1).fitting.empty());
  const SearchResult r = search(m, c, j, f);
  ASSERT_FALSE(r.fitting.empty());
  EXPECT_GT(r.fitting.front().layout.cp, 1);
  for (const Estimate& e : r.fitting) EXPECT_GE(j.seq_len / e.layout.cp, kCpMinTokensForced);
}

}  // namespace
}  // namespace kiln::plan
