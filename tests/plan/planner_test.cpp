#include "plan/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <regex>
#include <set>

#include "core/error.h"
#include "plan/report.h"
#include "test_util.h"

namespace kiln::plan {
namespace {

using kiln::testing::error_of;

JobSpec job_of(const Preset& p) {
  return p.job();
}

// GPT-2 1.5B has 25 heads: on 8 devices only tp=1 splits them evenly.
TEST(PlanPlanner, SearchRejectsTensorParallelismThatDoesNotDivideTheHeads) {
  const Preset& p = find_preset("gpt2-1.5b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  const SearchResult r = search(p.model, c, job_of(p));
  ASSERT_FALSE(r.fitting.empty());
  for (const Estimate& e : r.fitting) EXPECT_EQ(e.layout.tp, 1) << e.layout.to_string();
  Layout l;
  l.tp = 2, l.dp = 4;
  const Estimate e = evaluate(p.model, c, job_of(p), l);
  EXPECT_FALSE(e.valid());
  EXPECT_NE(e.invalid.find("tp=2 does not divide the 25 attention heads of gpt2-1.5b; tp can be 1"),
            std::string::npos)
      << e.invalid;
  EXPECT_NE(error_of([&] {
              complete_layout(p.model, c, job_of(p), parse_layout("tp=4"));
            }).find("tp=4 does not divide the 25 attention heads"),
            std::string::npos);
}

TEST(PlanPlanner, SearchRanksFittingLayoutsByStepTime) {
  const Preset& p = find_preset("llama2-13b");
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  const SearchResult r = search(p.model, c, job_of(p));
  ASSERT_GT(r.fitting.size(), 10u);
  for (size_t i = 1; i < r.fitting.size(); i++)
    // Ranked by step time to 3 significant digits (then the lower ZeRO stage).
    EXPECT_LE(r.fitting[i - 1].time.step, r.fitting[i].time.step * 1.01);
  for (const Estimate& e : r.fitting) EXPECT_TRUE(e.fits());
  for (const Estimate& e : r.faster_oom) {
    EXPECT_FALSE(e.memory.fits());
    EXPECT_LT(e.time.step, r.fitting.front().time.step);
  }
  EXPECT_GE(r.considered, int64_t(r.fitting.size() + r.faster_oom.size()));
}

// Llama 2 70B on one node of A100-80GB: 18 bytes × 69B of model state alone (Megatron-LM keeps
// fp32 gradients) is 1.2 TB, so it needs ZeRO-3 over at least 24 devices (1.2 TB / 24 = 52 GB
// plus activations); but 24 does not divide its batch of 1024 sequences, so 32 (4 nodes); or
// 12-way model parallelism with the optimizer state over dp = 2 (ZeRO-1) on 24 devices: 6 bytes
// of weights and gradients and 6 of optimizer state per parameter, 69 GB each.
TEST(PlanPlanner, AdviceSaysWhatWouldFit) {
  const Preset& p = find_preset("llama2-70b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 1);
  const JobSpec j = job_of(p);
  EXPECT_TRUE(search(p.model, c, j).fitting.empty());
  const std::string advice = fit_advice(p.model, c, j);
  EXPECT_NE(advice.find("at least 32 devices with ZeRO-3 (4 nodes: --nodes 4 --layout "
                        "tp=1,pp=1,dp=32,mb=1,zero=3,recompute=full)"),
            std::string::npos)
      << advice;
  EXPECT_NE(advice.find("tp×pp = 12 with ZeRO-1 on 24 devices (3 nodes: --nodes 3 --layout "),
            std::string::npos)
      << advice;
  // Four nodes, tensor-parallel over the node, no ZeRO: out of memory; ZeRO-2 or 3 would fit.
  const ClusterSpec four = default_cluster(find_device("a100-80gb"), 4);
  Layout l = complete_layout(p.model, four, j, parse_layout("tp=8,mb=1"));
  EXPECT_FALSE(evaluate(p.model, four, j, l).fits());
  const std::vector<std::string> fixes = layout_fixes(p.model, four, j, l);
  ASSERT_FALSE(fixes.empty());
  EXPECT_TRUE(std::any_of(fixes.begin(), fixes.end(),
                          [](const std::string& f) { return f.rfind("zero=3", 0) == 0; }));
}

// At 256K tokens context parallelism splits each sequence's activations, so the advice counts
// it: Llama 3 70B needs 72 devices as tp×pp (ZeRO-3 alone fits nowhere) but 48 as tp 8 × cp 2 ×
// pp 3, and that cluster's search finds it. A fixed layout out of memory hears "cp=2 (dp=2)"
// among its one-change fixes when that fits (Llama 3 8B at 128K).
TEST(PlanPlanner, AdviceCountsContextParallelismForLongSequences) {
  const Preset& p = find_preset("llama3-70b");
  const ClusterSpec one = default_cluster(find_device("h100-sxm"), 1);
  JobSpec j = job_of(p);
  j.seq_len = 262144;
  j.global_batch_tokens = 16 * j.seq_len;
  EXPECT_TRUE(search(p.model, one, j).fitting.empty());
  const std::string advice = fit_advice(p.model, one, j);
  EXPECT_NE(advice.find("tp×cp×pp = 48 with ZeRO-1 on 48 devices (6 nodes: --nodes 6 --layout "
                        "tp=8,pp=3,dp=1,mb=1,zero=1,recompute=full,cp=2"),
            std::string::npos)
      << advice;
  const ClusterSpec six = default_cluster(find_device("h100-sxm"), 6);
  EXPECT_TRUE(
      evaluate(p.model, six, j, parse_layout("tp=8,pp=3,dp=1,zero=1,recompute=full,cp=2")).fits());
  EXPECT_FALSE(search(p.model, six, j).fitting.empty());

  const Preset& small = find_preset("llama3-8b");
  JobSpec js = job_of(small);
  js.seq_len = 131072;
  js.global_batch_tokens = 16 * js.seq_len;
  const Layout l = parse_layout("tp=2,pp=1,dp=4,mb=1,zero=3,recompute=full");
  ASSERT_FALSE(evaluate(small.model, one, js, l).fits());
  const std::vector<std::string> fixes = layout_fixes(small.model, one, js, l);
  EXPECT_TRUE(std::any_of(fixes.begin(), fixes.end(), [](const std::string& f) {
    return f.rfind("cp=2 (dp=2)", 0) == 0;
  })) << ::testing::PrintToString(fixes);
  // Without flash attention there is no context parallelism to suggest.
  js.flash_attention = false;
  for (const std::string& f : layout_fixes(small.model, one, js, l))
    EXPECT_NE(f.rfind("cp=", 0), 0u) << f;
}

// Fixed fields constrain the search; the others are searched over their whole range.
TEST(PlanPlanner, SearchKeepsTheFixedFields) {
  const Preset& p = find_preset("llama2-13b");
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 8);
  const JobSpec j = job_of(p);
  FixedFields f;
  f.values = parse_layout("tp=2,zero=1", &f.keys);
  EXPECT_TRUE(f.keys.tp && f.keys.zero && !f.keys.pp && !f.keys.mb && !f.keys.all());
  EXPECT_EQ(f.keys.given(f.values), "tp=2,zero=1");
  const SearchResult r = search(p.model, c, j, f);
  ASSERT_FALSE(r.fitting.empty());
  std::set<int> pps, mbs;
  std::set<Recompute> rcs;
  for (const Estimate& e : r.fitting) {
    EXPECT_EQ(e.layout.tp, 2);
    EXPECT_EQ(e.layout.zero, 1);
    EXPECT_TRUE(e.layout.sp);
    pps.insert(e.layout.pp), mbs.insert(e.layout.mb), rcs.insert(e.layout.recompute);
  }
  EXPECT_GT(pps.size(), 1u);
  EXPECT_GT(mbs.size(), 1u);
  EXPECT_EQ(rcs.size(), 2u);  // none and full (flash attention: no selective)
  // The unconstrained search holds every one of them.
  EXPECT_GT(search(p.model, c, j).considered, r.considered);
  // Everything fixed: the one layout.
  f.values = parse_layout("tp=2,pp=2,mb=2,vpp=1,zero=1,recompute=full,sp=0", &f.keys);
  EXPECT_TRUE(f.keys.all());
  const SearchResult one = search(p.model, c, j, f);
  ASSERT_EQ(one.considered, 1);
  EXPECT_EQ(one.least_memory.layout.to_string(), "tp=2,pp=2,dp=16,mb=2,zero=1,recompute=full,sp=0");
}

// The out-of-memory advice comes from the search's own checks: every cluster and layout it names
// is accepted by the planner when given back (`--nodes N --layout ...`), and a search there finds
// a layout that fits. Cases where the old advice named clusters the planner refuses: a data-
// parallel degree that does not divide the batch (24 devices for 1024 sequences, 6 for 3).
TEST(PlanPlanner, AdviceFedBackIntoThePlannerIsAccepted) {
  struct Case {
    const char* model;
    const char* gpu;
    int gpus_per_node;
    int64_t batch_tokens;  // 0: the preset's
  };
  const Case cases[] = {
      {"llama2-70b", "a100-80gb", 8, 0},       {"gpt3-175b", "a100-80gb", 8, 0},
      {"llama3-405b", "h100-sxm", 8, 0},       {"llama2-70b", "a100-80gb", 8, 12288},
      {"llama2-7b", "a100-40gb", 3, 3 * 4096}, {"gpt3-175b", "h100-sxm", 8, 2048}};
  const std::regex way("--nodes ([0-9]+) --layout ([a-z0-9=,]+)");
  for (const Case& k : cases) {
    const Preset& p = find_preset(k.model);
    ClusterSpec c = default_cluster(find_device(k.gpu), 1);
    c.gpus_per_node = k.gpus_per_node;
    JobSpec j = job_of(p);
    if (k.batch_tokens > 0) j.global_batch_tokens = k.batch_tokens;
    ASSERT_TRUE(search(p.model, c, j).fitting.empty()) << k.model;
    const std::string advice = fit_advice(p.model, c, j);
    int ways = 0;
    for (auto it = std::sregex_iterator(advice.begin(), advice.end(), way);
         it != std::sregex_iterator(); ++it, ++ways) {
      ClusterSpec there = c;
      there.nodes = std::stoi((*it)[1]);
      const std::string text = (*it)[2];
      Layout l;
      ASSERT_NO_THROW(l = complete_layout(p.model, there, j, parse_layout(text)))
          << k.model << ": " << advice;
      EXPECT_TRUE(evaluate(p.model, there, j, l).fits()) << k.model << ": " << text;
      EXPECT_FALSE(search(p.model, there, j).fitting.empty()) << k.model << ": " << text;
    }
    EXPECT_GE(ways, 1) << k.model << ": " << advice;
  }
}

TEST(PlanPlanner, LayoutErrorsNameTheProblem) {
  const Preset& p = find_preset("gpt3-175b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 128);
  const JobSpec j = job_of(p);
  EXPECT_NE(error_of([&] { parse_layout("tp=8,pq=2"); }).find("unknown key 'pq' (did you mean"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_layout("tp=8,tp=4"); }).find("'tp' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_layout("recompute=most");
            }).find("none, attention (also called selective), full, op or full/N"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_layout("zero=4"); }).find("ZeRO stage 0..3"), std::string::npos);
  EXPECT_NE(error_of([&] {
              complete_layout(p.model, c, j, parse_layout("tp=8,pp=16,dp=16"));
            }).find("use dp=8"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              complete_layout(p.model, c, j, parse_layout("tp=8,pp=16,mb=5"));
            }).find("does not split into dp×mb = 8×5; mb can be 1, 2, 3, 4, 6, 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              complete_layout(p.model, c, j, parse_layout("tp=8,pp=16,mb=1,vpp=7"));
            }).find("pp×vpp = 112 chunks"),
            std::string::npos);
  const Layout l = complete_layout(p.model, c, j, parse_layout("tp=8,pp=16,mb=1,zero=1"));
  EXPECT_EQ(l.dp, 8);
  EXPECT_TRUE(l.sp);  // on by default with tp > 1
  EXPECT_EQ(l.to_string(), "tp=8,pp=16,dp=8,mb=1,zero=1,recompute=none");
}

// A preset whose heads are set apart from its width says so, and plans.
TEST(PlanPlanner, GemmaPlansWithItsWideHeads) {
  auto r = kiln::testing::run_kiln("plan --model gemma-7b --gpu h100-sxm --nodes 8 --top 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("8.54B parameters: 28 layers, hidden 3072, 16 heads of 256"),
            std::string::npos)
      << r.output;
}

TEST(PlanPlanner, UnknownHardwareListsTheCatalog) {
  const std::string e = error_of([] { find_device("tpu-v5p"); });
  EXPECT_NE(e.find("unknown GPU 'tpu-v5p' (did you mean 'tpu-v4'?)"), std::string::npos) << e;
  EXPECT_NE(e.find("a100-40gb, a100-80gb, h100-sxm, h100-pcie, h100-96gb-500w, h200, b200, l40s, "
                   "rtx4090, mi250x, mi300x, tpu-v4, ascend-910, cpu"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of([] { find_device("h100"); }).find("did you mean"), std::string::npos);
  EXPECT_NE(error_of([] {
              parse_topology("mesh");
            }).find("fat-tree, spine-leaf, dragonfly, ring or torus"),
            std::string::npos);
  ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  c.oversubscription = 2;
  EXPECT_NE(error_of([&] { c.validate(); }).find("use --topology spine-leaf"), std::string::npos);
}

TEST(PlanPlanner, JobErrorsNameTheFlag) {
  JobSpec j;
  j.seq_len = 4096;
  j.global_batch_tokens = 4096 * 3 + 5;
  j.train_tokens = 1e9;
  EXPECT_NE(error_of([&] { j.validate(); }).find("not a whole number of 4096-token sequences"),
            std::string::npos);
  // A batch above the training budget would be one step of more tokens than asked for.
  j.global_batch_tokens = 4096 * 1024;
  j.train_tokens = 1e6;
  const std::string big = error_of([&] { j.validate(); });
  EXPECT_NE(big.find("global batch of 4194304 tokens (--global-batch-tokens) is larger than the "
                     "training budget of 1000000 tokens (--tokens)"),
            std::string::npos)
      << big;
  EXPECT_NE(big.find("lower --global-batch-tokens to at most 999424 or raise --tokens to at "
                     "least 4194304"),
            std::string::npos)
      << big;
  j.train_tokens = 4096 * 1024;  // exactly one batch is allowed
  EXPECT_NO_THROW(j.validate());
  EXPECT_DOUBLE_EQ(parse_count("4Mi", "--x"), 4194304);
  EXPECT_DOUBLE_EQ(parse_count("300B", "--x"), 300e9);
  EXPECT_DOUBLE_EQ(parse_count("2e12", "--x"), 2e12);
  EXPECT_NE(error_of([] { parse_count("3X", "--tokens"); }).find("--tokens '3X': unknown suffix"),
            std::string::npos);
  // Not a count: infinity and NaN are named as such, a non-positive count as non-positive.
  for (const char* text : {"inf", "1e400", "nan", "infT"})
    EXPECT_NE(error_of([&] { parse_count(text, "--tokens"); }).find("must be a finite number"),
              std::string::npos)
        << text;
  EXPECT_NE(error_of([] { parse_count("-3B", "--tokens"); }).find("must be positive, got '-3B'"),
            std::string::npos);
}

// Run totals follow from the step: GPU-hours = steps × step time × devices / 3600, energy =
// (devices × W + nodes × overhead) × hours × PUE, CO2 = energy × intensity.
TEST(PlanPlanner, CostEnergyAndCarbonFollowFromTheStepTime) {
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 16);
  JobSpec j = job_of(p);
  j.usd_per_gpu_hour = 2;
  j.gpu_power_w = 400;
  j.node_overhead_w = 1000;
  j.pue = 1.1;
  j.gco2_per_kwh = 400;
  const Estimate e =
      evaluate(p.model, c, j, complete_layout(p.model, c, j, parse_layout("mb=1,zero=1")));
  ASSERT_TRUE(e.fits());
  const double seconds = e.steps * e.time.step;
  EXPECT_NEAR(e.gpu_hours, seconds / 3600 * 128, 1e-6 * e.gpu_hours);
  EXPECT_NEAR(e.cost_usd, 2 * e.gpu_hours, 1e-6 * e.cost_usd);
  EXPECT_NEAR(e.energy_kwh, (128 * 400 + 16 * 1000) / 1000.0 * seconds / 3600 * 1.1,
              1e-6 * e.energy_kwh);
  EXPECT_NEAR(e.co2_t, e.energy_kwh * 400e-6, 1e-9 * e.co2_t);
  EXPECT_NEAR(e.mfu, e.tflops_per_gpu_model / 312, 1e-12);
}

// Steps are a count: ceil(tokens / tokens per step), and the run's time is that many steps.
TEST(PlanPlanner, StepsAreAWholeNumberAndTheRunTimeFollowsThem) {
  const Preset& p = find_preset("gpt3-175b");
  const ClusterSpec c = default_cluster(find_device("a100-80gb"), 128);
  JobSpec j = job_of(p);  // 300B tokens in batches of 1536 × 2048 = 3,145,728: 95,367.4 batches
  j.usd_per_gpu_hour = 2;
  const Estimate e = evaluate(
      p.model, c, j,
      complete_layout(p.model, c, j, parse_layout("tp=8,pp=16,mb=1,vpp=1,zero=1,recompute=full")));
  EXPECT_EQ(e.steps, 95368);
  const nlohmann::json js = estimate_json(e, PlanInputs{p.model, c, j});
  ASSERT_TRUE(js["steps"].is_number_integer()) << js["steps"];
  EXPECT_EQ(js["steps"].get<int64_t>(), 95368);
  const double seconds = 95368 * js["step_time_s"].get<double>();
  EXPECT_NEAR(js["days"].get<double>(), seconds / 86400, 1e-9 * seconds);
  EXPECT_NEAR(js["gpu_hours"].get<double>(), seconds / 3600 * 1024, 1e-9 * seconds);
  EXPECT_NEAR(js["cost_usd"].get<double>(), 2 * seconds / 3600 * 1024, 1e-9 * seconds);
  EXPECT_DOUBLE_EQ(js["tokens_trained"].get<double>(), 95368.0 * 3145728);
  // A budget of exactly k batches is k steps.
  j.train_tokens = 1000.0 * 3145728;
  EXPECT_EQ(j.steps(), 1000);
  j.train_tokens += 1;
  EXPECT_EQ(j.steps(), 1001);
}

TEST(PlanPlanner, JsonKeysCarryUnits) {
  const Preset& p = find_preset("llama2-7b");
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  const JobSpec j = job_of(p);
  const Estimate e = evaluate(p.model, c, j, complete_layout(p.model, c, j, parse_layout("tp=2")));
  const nlohmann::json js = estimate_json(e, PlanInputs{p.model, c, j});
  for (const char* key :
       {"tflops_per_gpu_model", "tflops_per_gpu_hw", "step_time_s", "gpu_hours",
        "memory_per_gpu_gib", "tokens_per_s", "energy_kwh", "co2_t", "days", "mfu"})
    EXPECT_TRUE(js.contains(key)) << key;
  EXPECT_DOUBLE_EQ(js["step_time_s"].get<double>(), e.time.step);
  EXPECT_TRUE(js["cost_usd"].is_null());  // no price given
}

// MFU counts attention over the whole sequence, as Megatron-LM and PaLM do, while the causal
// kernel skips the masked half: at long sequences that half is a large share of the FLOPs
// counted, and the report says so (MFU above the device's sustained matmul rate is then no bug).
TEST(PlanPlanner, LongSequencesSayWhatTheMfuConventionCounts) {
  const ModelSpec m = find_preset("llama3-8b").model;
  const ClusterSpec c = default_cluster(find_device("h100-sxm"), 4);
  JobSpec j = job_of(find_preset("llama3-8b"));
  auto noted = [&](int seq) {
    j.seq_len = seq;
    j.global_batch_tokens = int64_t(seq) * 64;
    const Estimate e = evaluate(
        m, c, j,
        complete_layout(m, c, j, parse_layout("tp=8,cp=4,pp=1,mb=1,zero=1,recompute=full")));
    for (const std::string& n : e.notes)
      if (n.find("skips the masked half") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(noted(131072));
  EXPECT_FALSE(noted(8192));
}

}  // namespace
}  // namespace kiln::plan
