// `kiln plan` end to end: the binary, its tables, its JSON and its errors.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/file.h"
#include "kernels/matmul.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::run_kiln;

// `kiln <args>` fails with exit code 1 and says `text`.
void expect_refused(const std::string& args, const std::string& text) {
  const auto r = run_kiln(args);
  EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(text), std::string::npos) << args << "\n" << r.output;
}

TEST(PlanCli, EvaluatesOneLayoutAsJson) {
  auto r = run_kiln(
      "plan --model gpt3-175b --gpu a100-80gb --nodes 128 --layout "
      "tp=8,pp=16,dp=8,mb=1,zero=1,recompute=selective,vpp=1 --attention unfused "
      "--usd-per-gpu-hour 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["layout"]["text"], "tp=8,pp=16,dp=8,mb=1,zero=1,recompute=attention");
  for (const char* key : {"tflops_per_gpu_model", "tflops_per_gpu_hw", "step_time_s", "gpu_hours",
                          "memory_per_gpu_gib", "days", "cost_usd", "energy_kwh", "co2_t"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["tflops_per_gpu_hw"].get<double>(), j["tflops_per_gpu_model"].get<double>());
  EXPECT_EQ(j["cluster"]["devices"], 1024);
  EXPECT_FALSE(j.contains("search"));  // every key given: evaluated as given
}

// A partial --layout fixes the keys it gives and searches the rest, instead of filling them with
// defaults (vpp=1, mb=1, zero=0, no recompute).
TEST(PlanCli, PartialLayoutSearchesTheKeysLeftOut) {
  const std::string base =
      "plan --model gpt3-175b --gpu a100-80gb --nodes 128 --attention unfused --json --layout ";
  auto r = run_kiln(base + "tp=8,pp=16,mb=1,zero=1,recompute=selective");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j.contains("search")) << r.output;
  // Given as Megatron names it, said as the trainer does.
  EXPECT_EQ(j["search"]["given"], "tp=8,pp=16,mb=1,zero=1,recompute=attention");
  EXPECT_EQ(j["search"]["searched_keys"], "vpp and asynctp");
  // Every field says what decided it: searched, fixed, or left at one value and why.
  const auto& f = j["search"]["fields"];
  EXPECT_EQ(f["fixed"]["tp"], "8");
  EXPECT_EQ(f["fixed"]["recompute"], "attention");
  EXPECT_TRUE(f["searched"].contains("vpp")) << f.dump();
  EXPECT_FALSE(f["searched"].contains("tp")) << f.dump();
  EXPECT_TRUE(f["not_searched"].contains("cp")) << f.dump();  // 2048 tokens: below 16K
  // Transformer Engine's userbuffers add work beside what they hide: tried both ways.
  EXPECT_TRUE(f["searched"].contains("asynctp")) << f.dump();
  // vpp 1, 2, 3 and 6 (96 layers, m = 192), each with asynctp 0 and 1.
  EXPECT_EQ(j["search"]["layouts_considered"], 8);
  EXPECT_EQ(j["layout"]["tp"], 8);
  EXPECT_EQ(j["layout"]["pp"], 16);
  EXPECT_EQ(j["layout"]["mb"], 1);
  EXPECT_EQ(j["layout"]["zero"], 1);
  EXPECT_EQ(j["layout"]["recompute"], "attention");
  EXPECT_GT(j["layout"]["vpp"].get<int>(), 1);  // interleaving is faster here
  // The keys of a full search's JSON are there too, its best layout the one at the top level.
  for (const char* key :
       {"best", "faster_but_out_of_memory", "fields", "layouts_considered", "layouts_fitting"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["best"][0]["layout"]["text"], j["layout"]["text"]);
  // ... and faster than the default the field used to get.
  auto one = run_kiln(base + "tp=8,pp=16,mb=1,zero=1,recompute=selective,vpp=1");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_LT(j["step_time_s"].get<double>(),
            nlohmann::json::parse(one.output)["step_time_s"].get<double>());

  // A fixed field constrains: every layout listed has mb=2.
  r = run_kiln(base + "mb=2 --top 5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["layout"]["mb"], 2);
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_FALSE(j["search"]["others"].empty());
  for (const auto& other : j["search"]["others"])
    EXPECT_NE(other["layout"].get<std::string>().find(",mb=2,"), std::string::npos) << other;

  // Nothing with the given keys fits: said, with the least memory they need and the fewest
  // nodes on which a layout with those keys fits, as a command that is then accepted.
  r = run_kiln("plan --model llama2-70b --gpu a100-80gb --layout tp=8");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no layout with tp=8 fits on 8 × a100-80gb"), std::string::npos)
      << r.output;
  const std::string from = "with them it fits from 3 nodes (--nodes 3 --layout tp=8,";
  const size_t at = r.output.find(from);
  ASSERT_NE(at, std::string::npos) << r.output;
  const size_t start = r.output.find("--nodes", at), end = r.output.find(':', start);
  r = run_kiln("plan --model llama2-70b --gpu a100-80gb --json " +
               r.output.substr(start, end - start));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(nlohmann::json::parse(r.output)["fits"].get<bool>());
  // Keys that fit on no cluster: said, and the way without them.
  r = run_kiln("plan --model llama2-70b --gpu a100-80gb --layout tp=1,pp=1,zero=0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("nodes (searched); without them the cluster needs at least 32 devices "
                          "with ZeRO-3"),
            std::string::npos)
      << r.output;
}

TEST(PlanCli, SearchPrintsARankedTable) {
  auto r = run_kiln("plan --model llama2-13b --gpu h100-sxm --nodes 4 --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fit in memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  1  tp="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  3  tp="), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("  4  tp="), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the best layout in detail"), std::string::npos);
}

TEST(PlanCli, BadInputSaysWhatWouldWork) {
  auto r = run_kiln("plan --model llama2-70b --gpu a100-80gb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("needs at least 32 devices with ZeRO-3 (4 nodes: --nodes 4 --layout"),
            std::string::npos)
      << r.output;
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --layout tp=3");
  EXPECT_EQ(r.exit_code, 1);
  // Quoting the layout as given, not with the defaults the planner filled in.
  EXPECT_NE(r.output.find("--layout tp=3: tp=3 does not divide the 32 attention heads"),
            std::string::npos)
      << r.output;
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --grad-reduce fp64");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--grad-reduce must be bf16, fp16 or fp32"), std::string::npos)
      << r.output;
  r = run_kiln("plan --model llama2-7b --config configs/llama-small.toml --gpu a100-80gb");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--config FILE (a kiln config), not both"), std::string::npos)
      << r.output;
  for (const char* empty : {"''", "','", "' , '"})
    expect_refused(std::string("plan --model llama2-7b --gpu a100-80gb --layout ") + empty,
                   "kiln: error: --layout gives no key=value pair");
  expect_refused("plan --model llama2-7b --gpu a100-80gb --tokens inf",
                 "--tokens must be a finite number");
  r = run_kiln("plan --model llama2-7b --gpu b100");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown GPU 'b100'"), std::string::npos) << r.output;
  r = run_kiln("plan --model llama2-7b");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("give --gpu NAME"), std::string::npos) << r.output;
}

TEST(PlanCli, TopMustListAtLeastOneLayout) {
  for (const char* top : {"0", "-3"}) {
    auto r = run_kiln(std::string("plan --model llama2-7b --gpu a100-80gb --top ") + top);
    EXPECT_EQ(r.exit_code, 1) << top << ": " << r.output;
    EXPECT_NE(r.output.find("--top (layouts to list from a search) must be at least 1, got " +
                            std::string(top)),
              std::string::npos)
        << r.output;
  }
}

TEST(PlanCli, BatchLargerThanTheTokenBudgetIsRefused) {
  auto r = run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --nodes 2 --global-batch-tokens 4Ti --layout "
      "zero=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is larger than the training budget of 2000000000000 tokens"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("days"), std::string::npos) << r.output;
}

TEST(PlanCli, JsonStepsAreAWholeNumber) {
  auto r = run_kiln(
      "plan --model gpt3-175b --gpu a100-80gb --nodes 128 --layout "
      "tp=8,pp=16,mb=1,vpp=1,zero=1,recompute=full --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  ASSERT_TRUE(j["steps"].is_number_integer()) << j["steps"];
  EXPECT_EQ(j["steps"].get<int64_t>(), 95368);  // ceil(300e9 / (1536 × 2048))
  EXPECT_NEAR(j["days"].get<double>(), 95368 * j["step_time_s"].get<double>() / 86400, 1e-6);
}

TEST(PlanCli, PlansAKilnConfigOnACalibratedMachine) {
  kiln::testing::TempDir dir;
  const std::string hw = dir / "cpu.toml";
  auto r = run_kiln("plan --calibrate --seconds 0.01 --rounds 1 --output " + hw);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not measured: collective bandwidth"), std::string::npos) << r.output;
  r = run_kiln("plan --config " + kiln::testing::source_path("configs/tiny.toml") + " --hardware " +
               hw + " --layout mb=8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["job"]["dtype"], "fp32");
  EXPECT_EQ(j["model"]["vocab"], 384);  // 257 padded to a multiple of 128
  EXPECT_GT(j["step_time_s"].get<double>(), 0);
  EXPECT_TRUE(j["fits"].get<bool>());
}

// A CPU's bf16 peak is measured where oneDNN runs bf16 natively; elsewhere (kiln widens bf16 to
// fp32) the calibration says so and writes none, never a peak of 0.
TEST(PlanCli, CalibrationWritesAMeasuredBf16PeakOrNone) {
  kiln::testing::TempDir dir;
  const std::string hw = dir / "cpu.toml";
  auto r = run_kiln("plan --calibrate --seconds 0.01 --rounds 1 --output " + hw);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = read_file(hw, "hardware file");
  EXPECT_EQ(text.find("peak_tflops_bf16 = 0\n"), std::string::npos) << text;
  const auto key = text.find("\npeak_tflops_bf16 = ");
  if (matmul_bf16_native()) {
    ASSERT_NE(key, std::string::npos) << text;
    EXPECT_GT(std::stod(text.substr(key + 20)), 0) << text;
  } else {
    EXPECT_EQ(key, std::string::npos) << text;
    EXPECT_NE(r.output.find("bf16: no peak written: oneDNN has no native bf16 matmul here"),
              std::string::npos)
        << r.output;
    r = run_kiln("plan --config " + kiln::testing::source_path("configs/tiny.toml") +
                 " --hardware " + hw + " --layout mb=8 --dtype bf16");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("has no bf16 peak in its description; plan with --dtype fp32"),
              std::string::npos)
        << r.output;
  }
}

// --gpus N is N / (devices per node) whole nodes; a count that is not, or one that disagrees
// with --nodes, is refused naming what to give instead.
TEST(PlanCli, GpusIsWholeNodesAndAgreesWithNodes) {
  const std::string base = "plan --model llama2-7b --gpu a100-80gb --layout zero=1 --json ";
  auto by_gpus = run_kiln(base + "--gpus 32");
  ASSERT_EQ(by_gpus.exit_code, 0) << by_gpus.output;
  auto by_nodes = run_kiln(base + "--nodes 4");
  ASSERT_EQ(by_nodes.exit_code, 0) << by_nodes.output;
  auto a = nlohmann::json::parse(by_gpus.output), b = nlohmann::json::parse(by_nodes.output);
  EXPECT_EQ(a["cluster"]["devices"], 32);
  EXPECT_EQ(a["cluster"]["nodes"], 4);
  EXPECT_EQ(a["step_time_s"], b["step_time_s"]);
  EXPECT_EQ(run_kiln(base + "--gpus 32 --nodes 4").exit_code, 0);  // consistent: accepted
  EXPECT_EQ(nlohmann::json::parse(
                run_kiln(base + "--gpus 12 --gpus-per-node 4").output)["cluster"]["nodes"],
            3);

  auto r = run_kiln(base + "--gpus 12");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--gpus 12 is not a whole number of 8-device nodes of a100-80gb"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("use --gpus 8 (1 node) or --gpus 16 (2 nodes)"), std::string::npos)
      << r.output;
  r = run_kiln(base + "--gpus 16 --nodes 4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--gpus 16 and --nodes 4 disagree: 4 nodes of 8 devices are 32"),
            std::string::npos)
      << r.output;
  for (const char* bad : {"0", "-8"}) {
    r = run_kiln(base + "--gpus " + bad);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("--gpus (devices in the cluster) must be at least 1"),
              std::string::npos)
        << r.output;
  }
}

// No --model and no --config: the cluster itself, for people and as JSON.
TEST(PlanCli, ClusterSummaryWithoutAModel) {
  auto r = run_kiln("plan --gpu h100-sxm --nodes 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"devices                                  128 (16 nodes × 8)",
        "79.65 GiB per device, 9.956 TiB in all", "989 TFLOP/s per device, 126.6 PFLOP/s in all",
        "bisection (fat-tree)", "3,200 GB/s each way",
        "163.2 kW IT (128 × 700 W TDP + 16 × 4600 W rest of node)", "NVIDIA H100 datasheet"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  r = run_kiln("plan --gpu h100-sxm --gpus 128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["gpus"], 128);
  EXPECT_EQ(j["nodes"], 16);
  EXPECT_DOUBLE_EQ(j["peak"]["bf16"]["total_pflops"].get<double>(), 126.592);
  EXPECT_DOUBLE_EQ(j["inter_node"]["per_gpu_gbs"].get<double>(), 50);
  EXPECT_DOUBLE_EQ(j["inter_node"]["bisection_gbs"].get<double>(), 3200);
  EXPECT_DOUBLE_EQ(j["power"]["it_kw"].get<double>(), 163.2);
  // Options that plan a model need one.
  r = run_kiln("plan --gpu h100-sxm --nodes 16 --days 30");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--days plans a model: give --model NAME"), std::string::npos)
      << r.output;
  r = run_kiln("plan --gpu h100-sxm --nodes 16 --pue 0.5");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--pue is total facility power over IT power"), std::string::npos)
      << r.output;
  // Every flag that only a model uses is named, none silently ignored.
  expect_refused("plan --gpu h100-sxm --nodes 16 --dtype fp8 --top 3 --failures-per-gpu-hour 1e-4",
                 "--dtype, --failures-per-gpu-hour, --top plan a model");
  expect_refused("plan --gpu h100-sxm --nodes 16 --layout tp=2", "--layout plans a model");
  // Every Hardware flag describes the cluster, --rank-order too; --calibrate's go with it.
  r = run_kiln("plan --gpu h100-sxm --nodes 16 --rank-order tp-pp-dp --topology spine-leaf");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  expect_refused("plan --gpu h100-sxm --nodes 16 --seconds 3", "--seconds goes with --calibrate");
  expect_refused("plan --model '' --gpu h100-sxm", "--model is empty: give a preset name");
}

// --power-cap-w: the cluster at a board power limit, in the summary and in a plan: the peaks and
// the power follow the measured curve, and the plan's step slows.
TEST(PlanCli, PowerCapSlowsThePlanAndLowersItsPower) {
  auto r = run_kiln("plan --gpu h100-sxm --nodes 2 --power-cap-w 500");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"16 × h100-sxm at 500 W", "905.2 TFLOP/s per device",
                           "16 × 500 W --power-cap-w", "at 500 W: Mayr et al. 2026"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  const std::string plan =
      "plan --model llama3-8b --gpu h100-sxm --nodes 2 --layout "
      "tp=1,pp=1,dp=16,mb=1,zero=1,recompute=full --usd-per-kwh 0.1 --json";
  auto full = run_kiln(plan), capped = run_kiln(plan + " --power-cap-w 400");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  auto jf = nlohmann::json::parse(full.output), jc = nlohmann::json::parse(capped.output);
  EXPECT_EQ(jc["cluster"]["power_cap_w"], 400);
  EXPECT_FALSE(jf["cluster"].contains("power_cap_w"));
  EXPECT_NEAR(jc["cluster"]["peak_tflops"].get<double>(), 989 * 24853.4 / 30271.0, 1e-6);
  // The step slows by the measured ratio (0.821) less what its collectives, which the limit
  // does not slow, take; energy per step falls with the power (400 of 700 W per device).
  const double slow = jc["step_time_s"].get<double>() / jf["step_time_s"].get<double>();
  EXPECT_GT(slow, 1.15);
  EXPECT_LE(slow, 30271.0 / 24853.4 + 1e-9);
  EXPECT_LT(jc["energy_kwh"].get<double>(), jf["energy_kwh"].get<double>());
  expect_refused("plan --gpu a100-80gb --power-cap-w 300",
                 "no measurement of training throughput under a power limit is known for "
                 "'a100-80gb'");
  expect_refused("plan --gpu h100-sxm --power-cap-w 100",
                 "--power-cap-w 100: the measurement for h100-sxm covers limits from 200 to 700 W");
  expect_refused(plan + " --power-cap-w 400 --gpu-power-w 450",
                 "--gpu-power-w 450 is above --power-cap-w 400");
  r = run_kiln("plan --gpu h100-sxm --nodes 2 --power-cap-w 400 --gpu-power-w 350 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto js = nlohmann::json::parse(r.output);
  EXPECT_EQ(js["power_cap_w"], 400);
  EXPECT_EQ(js["power"]["gpu_w"], 350);  // the average draw given, under the limit
  EXPECT_EQ(js["power"]["gpu_w_from"], "--gpu-power-w");
  // A deadline search plans the capped part and says so.
  r = run_kiln("plan --model llama2-7b --gpu h100-sxm --days 30 --tokens 200B --power-cap-w 500");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("h100-sxm at 500 W"), std::string::npos) << r.output;
}

// What an hour of the cluster costs: rent at --usd-per-gpu-hour, the facility's electricity at
// --usd-per-kwh and its CO2 at --gco2-per-kwh, each from the power the summary shows.
TEST(PlanCli, ClusterSummaryPricesAnHourOfTheCluster) {
  auto r = run_kiln(
      "plan --gpu h100-sxm --nodes 4 --usd-per-gpu-hour 2.5 --usd-per-kwh 0.1 --gco2-per-kwh 400");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 32 × $2.5 = $80; IT 32 × 700 W + 4 × 4600 W = 40.8 kW, × PUE 1.2 = 48.96 kW.
  for (const char* text : {"$80 per hour, $1,920 per day (32 devices × $2.5)",
                           "$4.896 per hour, $117.5 per day (48.96 kW at PUE 1.2)",
                           "19.58 kg per hour, 0.47 tonnes per day"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  r = run_kiln("plan --gpu h100-sxm --nodes 4 --usd-per-gpu-hour 2.5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_DOUBLE_EQ(j["per_hour"]["rent_usd"].get<double>(), 80);
  EXPECT_TRUE(j["per_hour"]["electricity_usd"].is_null());
  EXPECT_TRUE(j["per_hour"]["co2_kg"].is_null());
  // Without the flags the summary has no prices.
  r = run_kiln("plan --gpu h100-sxm --nodes 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("per hour"), std::string::npos) << r.output;
  expect_refused("plan --gpu h100-sxm --nodes 4 --usd-per-kwh -0.1",
                 "--usd-per-kwh must not be negative, got -0.1");
}

// --days D: the smallest cluster whose best layout trains the model in D days, and a clear
// refusal when none up to the cap does.
TEST(PlanCli, DaysFindsTheSmallestClusterThatMakesTheDeadline) {
  auto r = run_kiln("plan --model llama2-7b --gpu a100-80gb --days 30 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  const int nodes = j["days_target"]["nodes"].get<int>();
  // The deadline holds with the expected failures, restarts and checkpoints.
  EXPECT_LE(j["days"].get<double>(), j["with_failures"]["days"].get<double>());
  EXPECT_LE(j["with_failures"]["days"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(j["days_target"]["days_with_failures"].get<double>(),
                   j["with_failures"]["days"].get<double>());
  EXPECT_EQ(j["cluster"]["nodes"], nodes);
  EXPECT_TRUE(j["fits"].get<bool>());
  // One node fewer: slower than 30 days, or nothing fits or runs there.
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --json --nodes " +
               std::to_string(nodes - 1));
  ASSERT_EQ(r.exit_code, 0) << r.output;  // --json: advice instead of an error when none fits
  for (const auto& below : nlohmann::json::parse(r.output)["best"])
    EXPECT_GT(below["with_failures"]["days"].get<double>(), 30) << below["layout"];
  // The layout printed is accepted, and gives the same time, when given back.
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --json --nodes " + std::to_string(nodes) +
               " --layout " + j["layout"]["text"].get<std::string>());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(r.output)["days"].get<double>(), j["days"].get<double>());
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --days 30");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--days 30: the smallest cluster is " + std::to_string(nodes) + " nodes"),
            std::string::npos)
      << r.output;

  // Failures count against the deadline: at a rate two hundred times Llama 3's the run loses
  // days to interruptions, and the smallest cluster that still makes it is larger.
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --days 30 --json --failures-per-gpu-hour 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int calm = nlohmann::json::parse(r.output)["days_target"]["nodes"].get<int>();
  r = run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --days 30 --json --failures-per-gpu-hour 4e-3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["days_target"]["nodes"].get<int>(), calm);
  EXPECT_LE(j["with_failures"]["days"].get<double>(), 30);
  EXPECT_LT(j["with_failures"]["goodput"].get<double>(), 0.95);

  // Failures faster than restarts at every size: no deadline is met, and the message says why.
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --days 30 --failures-per-gpu-hour 10");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no deadline is met; check --failures-per-gpu-hour (10 per device-hour)"),
            std::string::npos)
      << r.output;

  r = run_kiln("plan --model gpt3-175b --gpu a100-80gb --days 0.01");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--days 0.01: no cluster of up to 16384 nodes of 8 × a100-80gb"),
            std::string::npos)
      << r.output;
  for (const char* bad : {"0", "-3"}) {
    r = run_kiln(std::string("plan --model llama2-7b --gpu a100-80gb --days ") + bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--days (the longest the run may take) must be a positive number"),
              std::string::npos)
        << r.output;
  }
  for (const char* bad : {"nan", "inf"}) {
    r = run_kiln(std::string("plan --model llama2-7b --gpu a100-80gb --days ") + bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
    EXPECT_NE(r.output.find(std::string("--days must be a finite number, got ") + bad),
              std::string::npos)
        << r.output;
  }
  // On a TPU beyond a pod: slices over the data-centre network, unless --slices holds them.
  r = run_kiln("plan --model llama2-70b --gpu tpu-v4 --tokens 2T --days 10 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["days_target"]["slices"].get<int>(), 1) << r.output;
  EXPECT_EQ(j["days_target"]["slices"], j["cluster"]["torus"]["slices"]);
  r = run_kiln("plan --model llama2-70b --gpu tpu-v4 --tokens 2T --days 10 --slices 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no cluster of up to 1024 nodes of 4 × tpu-v4"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("or leave out --slices to let the search join more slices"),
            std::string::npos)
      << r.output;
  // --slices N keeps N slices of any size up to a pod (the one host --days starts from is not
  // checked against it).
  r = run_kiln("plan --model llama2-70b --gpu tpu-v4 --tokens 2T --days 10 --slices 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["days_target"]["slices"], 4);
  r = run_kiln("plan --model llama2-70b --gpu tpu-v4 --tokens 2T --days 10 --slices 3");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no cluster of up to 3072 nodes of 4 × tpu-v4"), std::string::npos)
      << r.output;
  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --days 30 --nodes 4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--days searches the cluster size; leave out --nodes"), std::string::npos)
      << r.output;
}

// --budget USD at --usd-per-gpu-hour: the whole steps it buys on the cluster, their tokens and
// days, by the planner's own cost (GPU-hours × price).
TEST(PlanCli, BudgetSaysWhatTheMoneyBuys) {
  const std::string base =
      "plan --model llama2-7b --gpu a100-80gb --nodes 4 --usd-per-gpu-hour 2 --json";
  auto r = run_kiln(base);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto whole = nlohmann::json::parse(r.output)["best"][0];  // the search's fastest
  const double run_cost = whole["cost_usd"].get<double>();
  // A tenth of a cent above half the cost (a step costs far more), so printing the budget with
  // six decimals cannot round half the steps away.
  r = run_kiln(base + " --budget " + fmt::format("{:.6f}", run_cost / 2 + 0.001));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  const auto& b = j["budget"];
  EXPECT_EQ(j["layout"]["text"], whole["layout"]["text"]);  // the search's best layout
  EXPECT_EQ(b["steps"].get<int64_t>(), whole["steps"].get<int64_t>() / 2);
  EXPECT_DOUBLE_EQ(b["usd_per_step"].get<double>(), j["step_time_s"].get<double>() * 32 * 2 / 3600);
  EXPECT_LE(b["cost_usd"].get<double>(), run_cost / 2 + 0.001);
  EXPECT_DOUBLE_EQ(b["tokens"].get<double>(), double(b["steps"].get<int64_t>()) * 1024 * 4096);

  // For people: the budget, the price, the cluster and layout, then what it buys.
  r = run_kiln(
      "plan --model llama2-7b --gpu a100-80gb --gpus 32 --usd-per-gpu-hour 2 --budget "
      "100000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--budget $100000 at $2 per device-hour on 32 devices, layout " +
                          whole["layout"]["text"].get<std::string>()),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" steps of 4.19M tokens = "), std::string::npos) << r.output;

  r = run_kiln("plan --model llama2-7b --gpu a100-80gb --nodes 4 --budget 1000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--budget needs a price: give --usd-per-gpu-hour"), std::string::npos)
      << r.output;
  r = run_kiln(base + " --budget 0.01");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--budget $0.01 buys no optimizer step of llama2-7b"), std::string::npos)
      << r.output;
  for (const char* bad : {"0", "-5"}) {
    r = run_kiln(base + " --budget " + bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("--budget (US dollars to spend) must be a positive number"),
              std::string::npos)
        << r.output;
  }
  // Any number a flag takes: NaN and infinity are refused before a range check could miss them.
  const std::string unpriced = "plan --model llama2-7b --gpu a100-80gb --nodes 4 --json";
  for (const char* flag : {"--budget", "--usd-per-gpu-hour", "--mem-allowance", "--pue",
                           "--gco2-per-kwh", "--gpu-power-w", "--failures-per-gpu-hour"}) {
    r = run_kiln(unpriced + " " + flag + " nan");
    EXPECT_EQ(r.exit_code, 1) << flag << ": " << r.output;
    EXPECT_NE(r.output.find(std::string(flag) + " must be a finite number, got nan"),
              std::string::npos)
        << r.output;
  }
  r = run_kiln(unpriced + " --budget 1000 --usd-per-gpu-hour -2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--usd-per-gpu-hour must be a finite price, not negative (got -2)"),
            std::string::npos)
      << r.output;
  // A budget buying more steps than a count can hold is refused with the largest it plans.
  r = run_kiln(base + " --budget 1e19");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("optimizer steps of llama2-7b"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("give a budget below $"), std::string::npos) << r.output;
  // A flag whose default is the device's own figure takes a value of its own when given.
  r = run_kiln(base + " --gpu-power-w 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--gpu-power-w must be more than 0, got 0"), std::string::npos)
      << r.output;
  r = run_kiln(base + " --node-overhead-w -5000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--node-overhead-w must be at least 0"), std::string::npos) << r.output;
  r = run_kiln(base + " --budget 1000 --days 30");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("give --days (the cluster for a deadline) or --budget"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace kiln
