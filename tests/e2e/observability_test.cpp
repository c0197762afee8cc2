// What a run leaves for people and tools: the merged Chrome trace of every rank, and the records
// of metrics.jsonl (run start, step-time parts, memory, checkpoints, per-rank compute time).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::bytes_of;
using kiln::testing::run_kiln_mpi;
using kiln::testing::RunResult;
using kiln::testing::source_path;
using kiln::testing::TempDir;

std::vector<nlohmann::json> records(const std::string& path) {
  std::ifstream f(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Observability, TwoRankRunWritesMergedTraceAndRecords) {
  TempDir dir;
  const std::string trace = dir / "trace.json";
  RunResult r = run_kiln_mpi(
      2, "train " + source_path("configs/tiny.toml") +
             " --set train.steps=4 --set train.val_every=0 "
             "--set train.sample_tokens=0 --set checkpoint.every=2 "
             "--set train.out_dir=" +
             dir.path() + " --set data.train=" + source_path("data/licenses/train_*.bin") +
             " --set data.val=" + source_path("data/licenses/val_*.bin") + " --trace " + trace);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(trace + ".rank-0.part"));  // parts are merged, then removed

  std::ifstream f(trace);
  auto doc = nlohmann::json::parse(f);
  std::map<int, std::multiset<std::string>> names;  // pid -> span names
  std::set<std::string> threads;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") {
      names[e.at("pid").get<int>()].insert(e.at("name").get<std::string>());
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
    }
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads.insert(e.at("args").at("name").get<std::string>());
  }
  ASSERT_EQ(names.size(), 2u);  // both ranks
  for (int rank : {0, 1}) {
    EXPECT_EQ(names[rank].count("forward"), 4u) << rank;
    EXPECT_EQ(names[rank].count("backward"), 4u) << rank;
    EXPECT_EQ(names[rank].count("optimizer"), 4u) << rank;
    EXPECT_EQ(names[rank].count("checkpoint"), 2u) << rank;
    bool reduce = false;
    for (const auto& n : names[rank]) reduce |= n.rfind("all_reduce", 0) == 0;
    EXPECT_TRUE(reduce) << "no collective on rank " << rank;
  }
  EXPECT_TRUE(threads.count("train"));

  std::map<std::string, std::vector<nlohmann::json>> by_type;
  for (auto& j : records(dir / "metrics.jsonl")) by_type[j.at("type")].push_back(j);
  ASSERT_EQ(by_type["run_start"].size(), 1u);
  EXPECT_EQ(by_type["run_start"][0]["world"], 2);
  EXPECT_EQ(by_type["run_start"][0]["config"]["train"]["steps"], 4);
  ASSERT_EQ(by_type["memory"].size(), 1u);
  EXPECT_GT(by_type["memory"][0]["params"].get<int64_t>(), 0);
  EXPECT_GT(by_type["memory"][0]["peak_rss"].get<int64_t>(), 0);
  ASSERT_EQ(by_type["checkpoint"].size(), 2u);
  EXPECT_EQ(by_type["checkpoint"][1]["step"], 4);
  ASSERT_EQ(by_type["train"].size(), 4u);
  for (const auto& t : by_type["train"]) {
    ASSERT_EQ(t["rank_compute_ms"].size(), 2u);
    double parts = t["data_ms"].get<double>() + t["forward_ms"].get<double>() +
                   t["backward_ms"].get<double>() + t["optimizer_ms"].get<double>() +
                   t["comm_wait_ms"].get<double>();
    // The parts are measured inside the step: they cannot add up to more than it.
    EXPECT_LE(parts, t["step_ms"].get<double>() * 1.001);
    EXPECT_GT(t["forward_ms"].get<double>(), 0);
  }
}

}  // namespace
}  // namespace kiln
