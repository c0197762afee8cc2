// The run directory as users meet it through the kiln binary: one run at a time, an earlier
// run's checkpoints never pruned by a new one, write errors on the metrics reported.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/exit_codes.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::run_kiln;
using kiln::testing::TempDir;

class RunDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 200; i++) text += "Line " + std::to_string(i) + ": a quick brown fox.\n";
    std::ofstream(dir_ / "corpus.txt") << text;
    auto r = run_kiln("data prepare --tokenizer bytes --input " + (dir_ / "corpus.txt") +
                      " --output " + (dir_ / "data") + " --val-fraction 0.1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    config_ = dir_ / "tiny.toml";
    std::ofstream(config_) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 32\n"
                              "vocab_size = 257\n[train]\nbatch_size = 2\nseq_len = 16\n"
                              "steps = 4\nlr = 3e-3\nout_dir = \"" +
                                  (dir_ / "run") + "\"\n[data]\ntrain = \"" +
                                  (dir_ / "data/train_*.bin") +
                                  "\"\ntokenizer = \"bytes\"\n[checkpoint]\nevery = 2\n"
                                  "keep_last = 1\n[hardware]\npeak_gflops = 100.0\n";
  }
  TempDir dir_;
  std::string config_;
};

TEST_F(RunDirectory, ANewRunNeverPrunesAnEarlierRunsCheckpoints) {
  auto r = run_kiln("train " + config_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000004"));
  // The same directory again, without --resume, with a seed of its own.
  r = run_kiln("train " + config_ + " --set train.seed=7");
  EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
  EXPECT_NE(r.output.find("holds an earlier run"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000004"));
  // --resume continues it; --overwrite starts over.
  r = run_kiln("train " + config_ + " --resume --set train.steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  r = run_kiln("train " + config_ + " --overwrite --set train.steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/step_00000006"));
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000002"));
}

TEST_F(RunDirectory, AFullDiskUnderTheMetricsIsReportedOnceAndTrainingGoesOn) {
  fs::create_directories(dir_ / "run");
  fs::create_symlink("/dev/full", dir_ / "run/metrics.jsonl");
  auto r = run_kiln("train " + config_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 4/4"), std::string::npos) << r.output;
  const auto first = r.output.find("cannot write");
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(first, r.output.rfind("cannot write")) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
}

TEST_F(RunDirectory, ADivergedRunExitsWithItsOwnCode) {
  auto r = run_kiln("train " + config_ +
                    " --set train.lr=1e30 --set train.steps=30 --set train.nonfinite_limit=2");
  EXPECT_EQ(r.exit_code, kExitNonFinite) << r.output;
  EXPECT_NE(r.output.find("training diverged"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/step_00000030"));
}

}  // namespace
}  // namespace kiln
