// Elastic shrink end to end: a rank that fails in two attempts in a row (KILN_TEST_CRASH_AT
// makes rank 3 of 4 abort after step 25 in every run that reaches it) is left out; `kiln launch
// --min-ranks` goes on with fewer data-parallel ranks from the newest checkpoint, with
// train.grad_accum raised to keep the global batch, and the losses through the shrink match an
// uninterrupted run's to 1e-5 at every step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::run_kiln;
using kiln::testing::ScopedEnv;
using kiln::testing::TempDir;

// The last loss recorded for each step (a resumed run records the steps after its checkpoint
// again), and the restart records.
struct RunRecords {
  std::map<int, double> loss;
  std::vector<nlohmann::json> restarts;
};

RunRecords read_run(const std::string& metrics) {
  RunRecords r;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") r.loss[j["step"].get<int>()] = j["loss"].get<double>();
    if (j["type"] == "restart") r.restarts.push_back(j);
  }
  return r;
}

TEST(Elastic, ARankThatKeepsFailingIsLeftOutAndTheGlobalBatchKept) {
  TempDir dir;
  ASSERT_EQ(kiln::testing::prepare_pangram_data(dir.path(), 400), "");
  const std::string config = dir / "c.toml";
  std::ofstream(config) << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nblock_size = 32\n"
                           "vocab_size = 257\n[train]\nseq_len = 16\nbatch_size = 4\nsteps = 40\n"
                           "lr = 3e-3\nwarmup_steps = 2\nthreads = 1\n[data]\ntrain = \"" +
                               (dir / "data/train_*.bin") +
                               "\"\ntokenizer = \"bytes\"\nshuffle = true\n"
                               "[checkpoint]\nevery = 10\nkeep_last = 0\n"
                               "[hardware]\npeak_gflops = 100.0\n";
  auto r = run_kiln("launch -n 4 " + config + " --set train.out_dir=" + (dir / "full"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    ScopedEnv crash("KILN_TEST_CRASH_AT", "3:25");
    r = run_kiln("launch -n 4 --max-restarts 3 --min-ranks 2 " + config +
                 " --set train.out_dir=" + (dir / "shrunk"));
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Attempt 1 fails, attempt 2 fails the same way: 4 ranks become 2 (3 does not divide the
  // global batch of 4 micro-batches), each with 2 micro-batches a step.
  EXPECT_NE(r.output.find("rank 3 failed in two attempts in a row; going on with 2 ranks instead "
                          "of 4 and train.grad_accum 2 instead of 1"),
            std::string::npos)
      << r.output;
  const RunRecords full = read_run(dir / "full/metrics.jsonl"),
                   shrunk = read_run(dir / "shrunk/metrics.jsonl");
  ASSERT_EQ(shrunk.loss.size(), 40u);
  for (auto [step, loss] : full.loss)
    EXPECT_NEAR(shrunk.loss.at(step), loss, 1e-5 * loss) << "step " << step;
  ASSERT_EQ(shrunk.restarts.size(), 2u);
  EXPECT_EQ(shrunk.restarts[0]["ranks"], 4);
  EXPECT_EQ(shrunk.restarts[1]["ranks"], 2);
  // The same failure with no room to shrink (--min-ranks 4) restarts as it was, and gives up.
  {
    ScopedEnv crash("KILN_TEST_CRASH_AT", "3:25");
    r = run_kiln("launch -n 4 --max-restarts 2 --min-ranks 4 " + config +
                 " --set train.out_dir=" + (dir / "stuck"));
  }
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no smaller layout of at least 4 ranks keeps the global batch"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace kiln
