// asynctp=1: sequence parallelism's collectives micro-pipelined with the matmuls they feed.
#include <gtest/gtest.h>

#include "plan/collectives.h"
#include "plan/planner.h"

namespace kiln::plan {
namespace {

JobSpec job(int seq, int64_t seqs) {
  JobSpec j;
  j.seq_len = seq;
  j.global_batch_tokens = seqs * seq;
  j.train_tokens = 1e12;
  return j;
}

// With large matmuls every step after the first hides: a layer's tensor-parallel time falls
// towards the collectives' first steps, 1/tp of the synchronous time. It never exceeds the
// synchronous time, and without sequence parallelism or tp there is nothing to overlap.
TEST(PlanAsyncTp, CollectivesHideBehindTheirMatmulsButTheirFirstStep) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = job(8192, 64);
  j.software = find_software("megatron-2021");  // every synchronous collective waits
  const Layout sync = parse_layout("tp=8,pp=1,dp=4,mb=4,zero=3,recompute=full");
  const Layout async = parse_layout("tp=8,pp=1,dp=4,mb=4,zero=3,recompute=full,asynctp=1");
  EXPECT_EQ(async.to_string(), "tp=8,pp=1,dp=4,mb=4,zero=3,recompute=full,asynctp=1");
  const double t_sync = step_time(m, c, j, sync, 4).tp_comm;
  const double t_async = step_time(m, c, j, async, 4).tp_comm;
  EXPECT_GE(t_async, 0.99 * t_sync / 8);
  // Under grouped-query attention the QKV matmul is small (1,280 of 8,192 columns per rank) and
  // the all-gather before it shows in part: about a fifth of the synchronous time, not an eighth.
  EXPECT_LT(t_async, 0.25 * t_sync);
  // A small model at short sequences: the matmuls are too short to hide much.
  const ModelSpec small = find_preset("gpt2-124m").model;
  JobSpec js = job(128, 64);
  js.software = j.software;
  const Layout s_sync = parse_layout("tp=4,pp=1,dp=2,mb=1,zero=0,recompute=none");
  Layout s_async = s_sync;
  s_async.async_tp = true;
  const double small_sync = step_time(small, c, js, s_sync, 32).tp_comm;
  const double small_async = step_time(small, c, js, s_async, 32).tp_comm;
  EXPECT_LE(small_async, small_sync);
  EXPECT_GT(small_async, small_sync / 4);
  EXPECT_NE(layout_problem(m, c, j, parse_layout("tp=8,dp=4,sp=0,asynctp=1")).find("needs tp > 1"),
            std::string::npos);
}

// torchtitan's Llama feeds wq/wk/wv (and w1/w3) from one all-gather, so in backward the input
// gradient reaching it is a sum of matmuls, which PyTorch's micro-pipeline pass does not fuse
// with the reduce-scatter; Megatron-Core's fused QKV and fc1 overlap theirs. With matmuls large
// enough to hide everything but a collective's first step, torchtitan pays those two
// reduce-scatters whole: 2 of the 12 collective passes a layer runs with full recompute (forward,
// recomputed forward, backward; an all-gather and a reduce-scatter cost the same), each
// (1 - 1/tp) more than hidden.
TEST(PlanAsyncTp, TorchtitansBackwardInputGradientReduceScattersStayExposed) {
  const ModelSpec m = find_preset("gpt3-175b").model;  // full heads: a large QKV matmul
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = job(8192, 64);
  const Layout sync = parse_layout("tp=8,pp=1,dp=4,mb=4,zero=3,recompute=full");
  Layout async = sync;
  async.async_tp = true;
  j.software = find_software("torchtitan-compile");  // every synchronous collective waits
  const double t_sync = step_time(m, c, j, sync, 4).tp_comm;
  j.software = find_software("megatron");
  j.software.async_tp_userbuffers = false;  // its own costs: UserbuffersChunkTheirGemmsAndContend
  const double megatron = step_time(m, c, j, async, 4).tp_comm;
  j.software = find_software("torchtitan-compile");
  j.software.async_tp_symm_mem = false;  // its own kernels: SymmetricMemoryKernelsAreCharged
  const double titan = step_time(m, c, j, async, 4).tp_comm;
  EXPECT_NEAR(megatron, t_sync / 8, 0.01 * t_sync);
  EXPECT_NEAR(titan - megatron, t_sync * 2.0 / 12 * (1 - 1.0 / 8), 0.01 * t_sync);
  EXPECT_LT(titan, t_sync);
  EXPECT_FALSE(find_software("torchtitan-compile").async_tp_dgrad_rs);
  EXPECT_TRUE(find_software("megatron").async_tp_dgrad_rs);
}

// PyTorch's SymmetricMemory ops (torchtitan's async TP) run more on the compute stream than the
// matmul: a fused all-gather copies the rank's own shard (n/tp tokens read and written), a fused
// reduce-scatter sums the tp partials it received (n tokens read, n/tp written), and each runs
// every matmul it feeds as tp chunks (tp - 1 more fixed costs each). Counted here from the
// device's bandwidth: per layer with full recompute, forward's two of each twice, and backward's
// two output-gradient gathers (its input-gradient reduce-scatters are not fused under torchtitan).
TEST(PlanAsyncTp, SymmetricMemoryKernelsAreCharged) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const DeviceSpec d = find_device("h100-sxm");
  const ClusterSpec c = default_cluster(d, 4);
  JobSpec j = job(8192, 64);
  Layout l = parse_layout("tp=8,pp=1,dp=4,mb=4,zero=3,recompute=full");
  l.async_tp = true;
  j.software = find_software("torchtitan-compile");
  ASSERT_TRUE(j.software.async_tp_symm_mem);
  const double with = step_time(m, c, j, l, 4).tp_comm;
  j.software.async_tp_symm_mem = false;
  const double without = step_time(m, c, j, l, 4).tp_comm;
  const double t = 8, act = 4.0 * 8192 * m.hidden * 2;  // one micro-batch's activation, bf16
  const double bw = d.mem_bw_gbs * 1e9 * d.mem_bw_efficiency, k = d.kernel_overhead_us * 1e-6;
  const double chunks = (t - 1) * d.matmul_overhead_us * 1e-6;
  const double copy = k + 2 * act / t / bw, scatter = k + act * (1 + 1 / t) / bw + chunks;
  // gpt3-175b's MLP is GELU: one up projection; the QKV gather feeds wq, wk and wv.
  const double forward = (copy + 3 * chunks) + (copy + chunks) + 2 * scatter;
  const double per_layer = 2 * forward + 2 * (copy + chunks);
  EXPECT_NEAR(with - without, 4 * m.n_layer * per_layer, 1e-9);
  EXPECT_FALSE(find_software("megatron").async_tp_symm_mem);
}

// Megatron-Core's --tp-comm-overlap runs Transformer Engine's userbuffers (its defaults): the
// ring-exchange gathers split each GEMM they feed into tp chunks, exposing the first; the
// forward's pipelined reduce-scatters split theirs into 4, exposing a quarter; the backward's bulk
// overlaps (input-gradient reduce-scatters, the weight gradients' input gathers) run whole beside
// one GEMM. Each chunk costs a matmul's fixed cost more. The pipelined and bulk kernels run on 16
// SMs and slow the GEMMs they hide behind by 16/24 of the overlap slowdown (NCCL's 24 SMs).
// Counted here against the same layout under the plain micro-pipeline (tp steps, nothing
// charged), with matmuls long enough to hide every collective: per layer with full recompute,
// the forward's two reduce-scatters expose c/4 instead of c/2 (tp = 2), twice; the backward's two
// input-gradient reduce-scatters expose nothing instead of c/2.
TEST(PlanAsyncTp, UserbuffersChunkTheirGemmsAndContend) {
  const ModelSpec m = find_preset("gpt3-175b").model;
  const DeviceSpec d = find_device("h100-sxm");
  const ClusterSpec c = default_cluster(d, 4);
  JobSpec j = job(8192, 64);
  const Layout l = parse_layout("tp=2,pp=1,dp=16,mb=4,zero=3,recompute=full,asynctp=1");
  j.software = find_software("megatron");
  ASSERT_TRUE(j.software.async_tp_userbuffers);
  const TimeBreakdown with = step_time(m, c, j, l, 1);
  j.software.async_tp_userbuffers = false;
  const TimeBreakdown without = step_time(m, c, j, l, 1);
  const double act = 4.0 * 8192 * m.hidden * 2;  // one micro-batch's activation, bf16
  const double rs = reduce_scatter_s(act, group_path(c, l, Dim::tp));
  ASSERT_DOUBLE_EQ(all_gather_s(act, group_path(c, l, Dim::tp)), rs);
  const double mm = d.matmul_overhead_us * 1e-6;
  // Chunks: forward two ring exchanges (1 more each at tp = 2) and two pipelines (3 more each),
  // twice; backward two ring exchanges.
  const double per_layer = 2 * (2 * mm + 2 * 3 * mm) + 2 * mm - 2 * rs;
  EXPECT_NEAR(with.tp_comm - without.tp_comm, m.n_layer * per_layer, 1e-9);
  // Hidden on SMs: 3/4 of each forward reduce-scatter (twice), the backward's two reduce-scatters
  // and two gathers whole.
  const double hidden = 2 * 2 * 0.75 * rs + 2 * rs + 2 * rs;
  EXPECT_NEAR(with.contention - without.contention,
              d.overlap_slowdown * 16.0 / 24 * m.n_layer * hidden, 1e-9);
  EXPECT_FALSE(find_software("torchtitan-compile").async_tp_userbuffers);
  EXPECT_TRUE(find_software("nemo").async_tp_userbuffers);
  EXPECT_FALSE(find_software("megatron-2021").async_tp_userbuffers);
}

// Where the matmuls are small, what PyTorch's SymmetricMemory ops add (an own-shard copy, a
// partial-sum reduction, tp chunk matmuls) outweighs what they hide: asynctp=1 is slower than
// asynctp=0 under torchtitan-compile, and the search, which tries both, ranks the synchronous
// layout first.
TEST(PlanAsyncTp, SymmetricMemoryCanCostMoreThanItHides) {
  const ModelSpec m = find_preset("gpt2-124m").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 1);
  JobSpec j = job(128, 64);
  j.software = find_software("torchtitan-compile");
  const Layout sync = parse_layout("tp=4,pp=1,dp=2,mb=1,zero=0,recompute=none");
  Layout async = sync;
  async.async_tp = true;
  const double t_sync = step_time(m, c, j, sync, 32).step;
  const double t_async = step_time(m, c, j, async, 32).step;
  EXPECT_GT(t_async, t_sync);
  FixedFields fixed;
  fixed.values = parse_layout("tp=4,pp=1,dp=2,mb=1,vpp=1,zero=0,recompute=none", &fixed.keys);
  const SearchResult r = search(m, c, j, fixed);
  ASSERT_FALSE(r.fitting.empty());
  EXPECT_FALSE(r.fitting.front().layout.async_tp) << r.fitting.front().layout.to_string();
}

// The search takes asynctp=1 only where the software runs it (Megatron-Core's --tp-comm-overlap,
// torchtitan under torch.compile), only with tp > 1 and sp, and never when the layout fixes
// asynctp=0.
TEST(PlanAsyncTp, SearchTriesItOnlyWhereTheSoftwareRunsIt) {
  const ModelSpec m = find_preset("llama3-70b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = job(8192, 64);
  for (const SoftwareProfile& sw : software_catalog()) {
    j.software = sw;
    const SearchResult r = search(m, c, j);
    ASSERT_FALSE(r.fitting.empty()) << sw.name;
    bool any_async = false;
    for (const Estimate& e : r.fitting) {
      if (e.layout.async_tp) {
        any_async = true;
        EXPECT_TRUE(sw.async_tp) << sw.name << " " << e.layout.to_string();
        EXPECT_GT(e.layout.tp, 1);
        EXPECT_TRUE(e.layout.sp);
      }
    }
    EXPECT_EQ(any_async, sw.async_tp) << sw.name;
    // Every profile's asynchronous TP adds work beside what it hides (PyTorch's SymmetricMemory
    // ops, Transformer Engine's userbuffers) and can cost more than it hides: the search tries
    // every such layout both ways.
    EXPECT_TRUE(!sw.async_tp || sw.async_tp_symm_mem || sw.async_tp_userbuffers) << sw.name;
    if (sw.async_tp)
      for (const Estimate& e : r.fitting) {
        if (!e.layout.async_tp) continue;
        Layout sync = e.layout;
        sync.async_tp = false;
        bool tried = false;
        for (const Estimate& f : r.fitting)
          tried = tried || f.layout.to_string() == sync.to_string();
        EXPECT_TRUE(tried) << sw.name << " " << sync.to_string();
      }
  }
  EXPECT_TRUE(find_software("megatron").async_tp);
  EXPECT_TRUE(find_software("torchtitan-compile").async_tp);
  EXPECT_FALSE(find_software("torchtitan").async_tp);  // needs torch.compile
  EXPECT_FALSE(find_software("deepspeed").async_tp);
  EXPECT_FALSE(find_software("fsdp").async_tp);
  // Only on NVIDIA GPUs (CUDA userbuffers, CUDA SymmetricMemory): not on an MI300X or an
  // Ascend 910, where the search says why.
  j.software = find_software("megatron");
  for (const char* gpu : {"mi300x", "ascend-910"}) {
    JobSpec jj = j;
    if (std::string(gpu) == "ascend-910") jj.dtype = Dtype::fp16;
    const int nodes = std::string(gpu) == "ascend-910" ? 64 : 4;  // 256 of 32 GB, 32 of 192 GB
    const SearchResult other = search(m, default_cluster(find_device(gpu), nodes), jj);
    ASSERT_FALSE(other.fitting.empty()) << gpu;
    for (const Estimate& e : other.fitting) EXPECT_FALSE(e.layout.async_tp) << gpu;
    bool said = false;
    for (const SearchField& f : other.not_searched)
      said = said || (f.key == "asynctp" && f.how.find("CUDA") != std::string::npos);
    EXPECT_TRUE(said) << gpu;
  }
  EXPECT_TRUE(find_device("h100-sxm").nvidia());
  EXPECT_FALSE(find_device("tpu-v4").nvidia());
  // Fixed off, it stays off.
  j.software = find_software("megatron");
  FixedFields off;
  off.values = parse_layout("asynctp=0", &off.keys);
  const SearchResult r = search(m, c, j, off);
  ASSERT_FALSE(r.fitting.empty());
  for (const Estimate& e : r.fitting) EXPECT_FALSE(e.layout.async_tp);
}

}  // namespace
}  // namespace kiln::plan
