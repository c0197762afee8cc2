// Pipeline parallelism end to end: `kiln train` with parallel.pp stages under mpirun, compared
// with one process training the whole model on the same global batch. The stages exchange
// activations and gradients; only the order of a few sums differs (the tied embedding's
// gradient is the first stage's part plus the last's, the gradient norm a sum of the stages'
// parts), so losses and norms agree to 1e-5 relative and the final weights to 1e-4.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "ckpt/safetensors.h"
#include "e2e/train_records.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::bytes_of;
using kiln::testing::run_kiln;
using kiln::testing::run_kiln_mpi;
using kiln::testing::RunResult;
using kiln::testing::spawn_kiln;
using kiln::testing::TempDir;

// Four layers, so that four stages hold one each; four micro-batches of 4 sequences a step.
class PipelineRun : public LayoutRun {
 protected:
  void SetUp() override { ASSERT_EQ(write_config("n_layer = 4\nn_head = 2\nn_embd = 32\n"), ""); }
  void expect_restart_after_kill(int ranks, const std::string& sets);
};

TEST_F(PipelineRun, EveryScheduleAndStageCountAgreesWithOneProcessAndRepeatsToTheBit) {
  auto r = train(1, "ref");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Without a pipeline one micro-batch is in flight at a time.
  EXPECT_EQ(train_records(dir_ / "ref/metrics.jsonl")[1].in_flight, 1);
  for (int pp : {2, 4})
    for (const std::string schedule : {"1f1b", "gpipe", "zero_bubble", "interleaved"}) {
      if (schedule == "interleaved" && pp == 4) continue;  // 8 chunks of a 4-layer model
      const std::string out = fmt::format("pp{}-{}", pp, schedule);
      r = train(pp, out,
                fmt::format("--set parallel.pp={} --set parallel.schedule={}{}", pp, schedule,
                            schedule == "interleaved" ? " --set parallel.virtual_stages=2" : ""));
      ASSERT_EQ(r.exit_code, 0) << out << "\n" << r.output;
      expect_agrees("ref", out, 1e-5, 1e-4);
      // The first stage holds at most pp micro-batches' activations under 1F1B and zero bubble
      // (a micro-batch until its weight part), all four under GPipe; with two chunks, micro-
      // batch chunks: Megatron's warm-up of (pp - 1) * 2 + (v - 1) * pp forwards, and one more.
      const int want = schedule == "gpipe" ? 4 : schedule == "interleaved" ? 5 : std::min(pp, 4);
      EXPECT_EQ(train_records(dir_ / (out + "/metrics.jsonl"))[5].in_flight, want) << out;
    }
  // Three stages of 2, 1 and 1 layers, and a step with fewer micro-batches than stages.
  r = train(1, "ref2", "--set train.grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(3, "pp3", "--set parallel.pp=3 --set train.grad_accum=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref2", "pp3", 1e-5, 1e-4);
  // Stages of 3 and 1 layers (parallel.stage_layers), both schedules' ends of the range.
  r = train(2, "uneven",
            "--set parallel.pp=2 --set train.grad_accum=2 --set parallel.stage_layers=[3,1]");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref2", "uneven", 1e-5, 1e-4);
  // The same layout twice: the same bits, weights and every stage's optimizer state.
  r = train(2, "again", "--set parallel.pp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_bits("pp2-1f1b", "again");
}

// Data parallelism over pipelines (dp 2 x pp 2, each stage's gradients reduced over its data-
// parallel pair), with ZeRO-1 sharding each stage's optimizer state; recompute and flash
// attention; bf16 against fp32.
TEST_F(PipelineRun, DataParallelPipelinesZeroOneRecomputeAndBf16AgreeWithOneProcess) {
  auto r = train(1, "ref");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The same global batch: two data-parallel rows of two sequences per micro-batch.
  for (int zero : {0, 1}) {
    const std::string out = fmt::format("dp2pp2z{}", zero);
    r = train(
        4, out,
        fmt::format("--set parallel.pp=2 --set train.batch_size=2 --set train.zero={}", zero));
    ASSERT_EQ(r.exit_code, 0) << out << "\n" << r.output;
    expect_agrees("ref", out, 1e-5, 1e-4);
  }
  // Two chunks per rank, each reduced over its data-parallel pair while the last backward runs.
  r = train(4, "dp2-interleaved",
            "--set parallel.pp=2 --set train.batch_size=2 --set train.zero=1 --set "
            "parallel.schedule=interleaved --set parallel.virtual_stages=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref", "dp2-interleaved", 1e-5, 1e-4);
  r = train(4, "dp2-zero-bubble",
            "--set parallel.pp=2 --set train.batch_size=2 --set parallel.schedule=zero_bubble");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref", "dp2-zero-bubble", 1e-5, 1e-4);
  r = train(2, "recompute",
            "--set parallel.pp=2 --set train.recompute=full --set train.attention=flash");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref", "recompute", 1e-5, 1e-4);
  r = train(2, "bf16", "--set parallel.pp=2 --set train.dtype=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_agrees("ref", "bf16", 1e-2, 5e-2);
}

// A Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU) in stages: with an untied
// head nothing is summed across stages, so the pipeline gives the very bits of one process; a
// tied head agrees as GPT-2's does.
TEST_F(PipelineRun, LlamaStagesGiveOneProcessBitsUntiedAndAgreeTied) {
  const std::string llama =
      "--set model.family=llama --set model.n_head=4 --set model.n_kv_head=2 "
      "--set model.ffn_hidden=64 --set train.steps=10 --set checkpoint.every=0 ";
  auto r = train(1, "ref", llama);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(2, "pp2", llama + "--set parallel.pp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(bytes_of(model_file("ref", 10)) == bytes_of(model_file("pp2", 10)));
  auto want = train_records(dir_ / "ref/metrics.jsonl"),
       got = train_records(dir_ / "pp2/metrics.jsonl");
  for (auto [step, w] : want) EXPECT_EQ(got[step].loss, w.loss) << step;
  const std::string tied = llama + "--set model.tie_embeddings=true ";
  r = train(1, "tref", tied);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(2, "tpp2", tied + "--set parallel.pp=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  want = train_records(dir_ / "tref/metrics.jsonl");
  got = train_records(dir_ / "tpp2/metrics.jsonl");
  for (auto [step, w] : want) EXPECT_NEAR(got[step].loss, w.loss, 1e-5 * w.loss) << step;
  EXPECT_LT(weights_difference(model_file("tref", 10), model_file("tpp2", 10)), 1e-4);
}

// Checkpoints hold whole tensors under their Hugging Face names and each stage's optimizer
// state as its own shards: saved at (dp 2, pp 2, ZeRO-1), the run goes on at pp 1, at pp 4 and
// at (dp 2, pp 2); saved at pp 1, it goes on at pp 2.
TEST_F(PipelineRun, CheckpointFromOneLayoutResumesOnAnother) {
  auto r = train(4, "src", "--set parallel.pp=2 --set train.batch_size=2 --set train.zero=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_resumes("src", "pp1", 1, "");
  expect_resumes("src", "pp4", 4, "--set parallel.pp=4");
  expect_resumes("src", "dp2pp2", 4, "--set parallel.pp=2 --set train.batch_size=2");
  expect_resumes("pp1", "back", 2, "--set parallel.pp=2");
  // Two chunks per rank save their optimizer state as four virtual stages' shards.
  const std::string interleaved =
      "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2";
  expect_resumes("src", "interleaved", 2, interleaved);
  expect_resumes("interleaved", "from_interleaved", 2, "--set train.batch_size=2");
}

// A rank killed mid-run: kiln launch restarts the job from the newest complete checkpoint and it
// ends with the bits of a run that was never interrupted.
void PipelineRun::expect_restart_after_kill(int ranks, const std::string& sets) {
  const std::string common = config_ + " --set train.steps=120 --set train.grad_accum=2 " + sets;
  const std::string launch = "launch -n " + std::to_string(ranks) + " ";
  auto full = run_kiln(launch + common + " --set train.out_dir=" + (dir_ / "full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  std::mt19937 gen(std::random_device{}());
  const int victim = static_cast<int>(gen() % ranks);
  const int at = 10 * static_cast<int>(2 + gen() % 8);
  SCOPED_TRACE("killing rank " + std::to_string(victim) + " after step " + std::to_string(at));
  std::string out = dir_ / "killed";
  pid_t pid = spawn_kiln(launch + "--max-restarts 1 " + common + " --set train.out_dir=" + out,
                         out + ".log");
  ASSERT_GE(pid, 0);
  ASSERT_EQ(kiln::testing::kill_rank_after_checkpoint(pid, out, victim, at, 60), "")
      << bytes_of(out + ".log");
  int status = 0;
  waitpid(pid, &status, 0);
  std::string log = bytes_of(out + ".log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  EXPECT_NE(log.find("restarting from the newest complete checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  EXPECT_TRUE(bytes_of(dir_ / "full/checkpoints/step_00000120/model.safetensors") ==
              bytes_of(out + "/checkpoints/step_00000120/model.safetensors"));
}

TEST_F(PipelineRun, LaunchRestartsAPipelineAfterKillNineAndEndsWithTheSameBits) {
  expect_restart_after_kill(2, "--set parallel.pp=2");
}

// The same for a 3D layout, tp 2 x pp 2 (the stages' messages through the shared-memory engine).
TEST_F(PipelineRun, LaunchRestartsA3DJobAfterKillNineAndEndsWithTheSameBits) {
  expect_restart_after_kill(4, "--set parallel.tp=2 --set parallel.pp=2");
}

TEST_F(PipelineRun, LayoutsThatCannotRunAreRefusedNamingTheKeys) {
  struct Row {
    int ranks;
    const char* sets;
    const char* says;
  };
  const Row rows[] = {
      {1, "--set parallel.pp=5", "parallel.pp = 5 is more than model.n_layer = 4"},
      {1, "--set parallel.pp=2 --set train.zero=2", "train.zero = 2 with parallel.pp = 2"},
      {1, "--set parallel.schedule=interleaved",
       "the interleaved schedule needs at least 2 chunks per rank"},
      {2,
       "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 "
       "--set train.grad_accum=3",
       "make train.grad_accum a multiple of parallel.pp"},
      {1, "--set parallel.schedule=zigzag", "parallel.schedule must be"},
      {2, "--set parallel.pp=2 --set parallel.stage_layers=[2,1]",
       "parallel.stage_layers gives 2 stages of 3 layers in all"},
      {1, "--set parallel.pp=2 --set parallel.schedule=zero_bubble --set train.recompute=full",
       "parallel.schedule = \"zero_bubble\" with train.recompute = \"full\""},
      {3, "--set parallel.pp=2", "parallel.pp"},  // 3 processes do not make stages of 2
  };
  int k = 0;
  for (const Row& row : rows) {
    auto r = train(row.ranks, std::string("refused").append(std::to_string(k++)), row.sets);
    EXPECT_NE(r.exit_code, 0) << row.sets;
    EXPECT_NE(r.output.find(row.says), std::string::npos) << row.sets << "\n" << r.output;
  }
}

}  // namespace
}  // namespace kiln
