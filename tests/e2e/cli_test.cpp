// The kiln binary end to end: what a user types, what they see, and how it fails.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/exit_codes.h"
#include "core/rng.h"
#include "data/shards.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::run_kiln;
using kiln::testing::spawn_kiln;
using kiln::testing::TempDir;
using kiln::testing::wait_until;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "corpus.txt") << std::string(
        "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.\n");
    std::string text;
    for (int i = 0; i < 200; i++)
      text += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog.\n";
    std::ofstream(dir_ / "corpus2.txt") << text;
    config_ = dir_ / "tiny.toml";
    std::ofstream(config_) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 32\n"
                              "vocab_size = 257\n"
                              "[train]\nbatch_size = 2\nseq_len = 16\nsteps = 6\nlr = 3e-3\n"
                              "val_every = 3\nval_batches = 2\nout_dir = \"" +
                                  (dir_ / "run") +
                                  "\"\n"
                                  "[data]\ntrain = \"" +
                                  (dir_ / "data/train_*.bin") + "\"\nval = \"" +
                                  (dir_ / "data/val_*.bin") +
                                  "\"\ntokenizer = \"bytes\"\n[checkpoint]\nevery = "
                                  "3\n[hardware]\npeak_gflops = 100.0\n";
  }
  void prepare() {
    auto r =
        run_kiln("data prepare --tokenizer bytes --input " + (dir_ / "corpus.txt") + " " +
                 (dir_ / "corpus2.txt") + " --output " + (dir_ / "data") + " --val-fraction 0.2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  TempDir dir_;
  std::string config_;
};

TEST_F(Cli, HelpListsSubcommandsAndEveryTrainOption) {
  auto r = run_kiln("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* s : {"train", "generate", "bench", "data"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
  r = run_kiln("train --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* s : {"--set", "--resume", "--init-from", "train.grad_accum",
                        "checkpoint.keep_last", "data.shuffle", "model.vocab_multiple"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
}

TEST_F(Cli, TrainWritesProgressMetricsAndCheckpointsThenResumes) {
  prepare();
  auto r = run_kiln("train " + config_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step 6/6"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos);
  EXPECT_NE(r.output.find("MFU"), std::string::npos);
  EXPECT_NE(r.output.find("ETA"), std::string::npos);
  EXPECT_NE(r.output.find("val loss"), std::string::npos);
  std::ifstream metrics(dir_ / "run/metrics.jsonl");
  std::string line;
  int train_lines = 0, val_lines = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "val") {
      val_lines++;
      EXPECT_TRUE(j.contains("val_loss"));
      continue;
    }
    if (j["type"] != "train") continue;  // run_start, memory, checkpoint: see observability_test
    train_lines++;
    for (const char* k :
         {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_sec", "step_ms", "mfu"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_LE(j["mfu"].get<double>(), 1.0);
  }
  EXPECT_EQ(train_lines, 6);
  EXPECT_EQ(val_lines, 2);
  EXPECT_TRUE(fs::exists(dir_ / "run/checkpoints/step_00000006/model.safetensors"));
  // Longer run resumes from step 6.
  r = run_kiln("train " + config_ + " --resume --set train.steps=8");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 8/8"), std::string::npos) << r.output;
  // And generation from it is reproducible for a seed, as ids and as text.
  auto g1 =
      run_kiln("generate --checkpoint " + (dir_ / "run") + " --max-new-tokens 10 --seed 3 --ids");
  auto g2 =
      run_kiln("generate --checkpoint " + (dir_ / "run") + " --max-new-tokens 10 --seed 3 --ids");
  ASSERT_EQ(g1.exit_code, 0) << g1.output;
  EXPECT_EQ(g1.output, g2.output);
  int ids = 0;
  for (char c : g1.output) ids += c == ' ';
  EXPECT_EQ(ids, 9) << g1.output;
  auto t = run_kiln("generate --checkpoint " + (dir_ / "run") +
                    " --max-new-tokens 10 --seed 3 --prompt 'The quick'");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  EXPECT_EQ(t.output.rfind("The quick", 0), 0u) << t.output;
  EXPECT_EQ(t.output.size(), std::string("The quick").size() + 10 + 1) << t.output;  // bytes + \n
}

TEST_F(Cli, MistypedConfigKeyFailsNamingKeyAndFile) {
  auto r = run_kiln("train " + config_ + " --set train.lr=fast");
  EXPECT_EQ(r.exit_code, kExitBadInput);  // refused at start-up: not retried
  EXPECT_NE(r.output.find("train.lr"), std::string::npos) << r.output;
  std::ofstream(dir_ / "typo.toml") << "[train]\nlearnig_rate = 0.1\n";
  r = run_kiln("train " + (dir_ / "typo.toml"));
  EXPECT_EQ(r.exit_code, kExitBadInput);  // refused at start-up: not retried
  EXPECT_NE(r.output.find("typo.toml"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.learnig_rate"), std::string::npos) << r.output;
  std::ofstream(config_, std::ios::app) << "[train]\n";  // a second [train] table is a TOML error
  r = run_kiln("train " + config_);
  EXPECT_EQ(r.exit_code, kExitBadInput);  // refused at start-up: not retried
  EXPECT_NE(r.output.find(config_ + ":23"), std::string::npos) << r.output;
}

TEST_F(Cli, MissingDataAndMissingCheckpointAreClearErrors) {
  auto r = run_kiln("train " + config_);
  EXPECT_EQ(r.exit_code, 78);  // refused at start-up: launchers do not retry it
  EXPECT_NE(r.output.find("data.train"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kiln data prepare"), std::string::npos) << r.output;
  prepare();
  r = run_kiln("train " + config_ + " --resume");
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.output.find("no complete checkpoint"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run/checkpoints/step_00000006"));
  r = run_kiln("generate --checkpoint " + (dir_ / "nowhere"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;
}

TEST_F(Cli, TruncatedShardFailsBeforeTraining) {
  prepare();
  fs::resize_file(dir_ / "data/train_000000.bin", 1024 + 101);
  auto r = run_kiln("train " + config_);
  EXPECT_EQ(r.exit_code, 78);  // refused at start-up: launchers do not retry it
  EXPECT_NE(r.output.find("train_000000.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
}

TEST_F(Cli, BrokenInitFromFileNamesTheFile) {
  prepare();
  std::ofstream(dir_ / "broken.safetensors") << "\x10\0\0\0\0\0\0\0{\"wte.weight\": 3}";
  auto r = run_kiln("train " + config_ + " --init-from " + (dir_ / "broken.safetensors"));
  EXPECT_EQ(r.exit_code, 78);
  EXPECT_NE(r.output.find("broken.safetensors"), std::string::npos) << r.output;
}

TEST_F(Cli, BenchTrainPrintsTableAndJson) {
  auto r = run_kiln("bench train --config " + config_ + " --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* s : {"ms/step", "tokens/s", "GFLOP/s", "MFU", "attention"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s;
  r = run_kiln("bench train --config " + config_ + " --steps 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  for (const char* k : {"step_ms", "tokens_per_sec", "gflops", "mfu", "config"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GT(j["tokens_per_sec"].get<double>(), 0);
}

TEST_F(Cli, BenchPeakCachesItsPeaksAndTrainSaysItMeasuresMfuAgainstThem) {
  prepare();
  const std::string cache = dir_ / "cache";
  auto r = run_kiln("bench peak --seconds 0.03 --threads 1");  // KILN_CACHE_DIR: none (ctest)
  EXPECT_NE(r.exit_code, 0) << "wrote a cache outside the test's directory\n" << r.output;
  r = kiln::testing::run_command("KILN_CACHE_DIR=" + cache + " " + KILN_BIN +
                                 " bench peak --seconds 0.03 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cached in " + cache + "/peak.json"), std::string::npos) << r.output;
  auto j = nlohmann::json::parse(std::ifstream(cache + "/peak.json"));
  ASSERT_EQ(j["entries"].size(), 2u) << j.dump();
  std::set<std::string> dtypes;
  for (const auto& e : j["entries"]) {
    EXPECT_EQ(e["threads"], 1);
    EXPECT_GT(e["gflops"].get<double>(), 0);
    dtypes.insert(e["dtype"].get<std::string>());
  }
  EXPECT_EQ(dtypes, (std::set<std::string>{"fp32", "bf16"}));
  const std::string date = j["entries"][0]["date"];
  // A run on one thread without hardware.peak_gflops takes the cached fp32 peak and says so.
  r = kiln::testing::run_command("KILN_CACHE_DIR=" + cache + " " + KILN_BIN + " train " + config_ +
                                 " --set hardware.peak_gflops=0 --set train.threads=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(cached by kiln bench peak on " + date + ")"), std::string::npos)
      << r.output;
  // With the config's peak, that one, named.
  r = kiln::testing::run_command("KILN_CACHE_DIR=" + cache + " " + KILN_BIN + " train " + config_ +
                                 " --overwrite --set train.threads=1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("peak 100 GFLOP/s (hardware.peak_gflops)"), std::string::npos)
      << r.output;
  // --no-cache prints only.
  r = kiln::testing::run_command("KILN_CACHE_DIR=" + (dir_ / "cache2") + " " + KILN_BIN +
                                 " bench peak --seconds 0.03 --threads 1 --no-cache");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "cache2"));
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST_F(Cli, CkptExportWritesTheModelAsAHuggingFaceDirectory) {
  prepare();
  auto r = run_kiln("train " + config_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // A run directory: its newest checkpoint, the model alone, the same bytes as the checkpoint's.
  r = run_kiln("ckpt export " + (dir_ / "run") + " " + (dir_ / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step_00000006"), std::string::npos) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ / "hf")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors"}));
  for (const char* f : {"model.safetensors", "config.json"})
    EXPECT_TRUE(file_bytes(dir_ / ("hf/" + std::string(f))) ==
                file_bytes(dir_ / ("run/checkpoints/step_00000006/" + std::string(f))))
        << f;
  // kiln generate reads it as it reads the checkpoint.
  const std::string gen = " --prompt-ids 1,2,3 --max-new-tokens 8 --temperature 0 --ids";
  auto a = run_kiln("generate --checkpoint " + (dir_ / "hf") + gen);
  auto b = run_kiln("generate --checkpoint " + (dir_ / "run") + gen);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  // Never over something that exists.
  r = run_kiln("ckpt export " + (dir_ / "run") + " " + (dir_ / "hf"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("not an empty directory"), std::string::npos) << r.output;
  // An existing empty directory, named with a trailing slash (as shells complete it).
  fs::create_directories(dir_ / "hf3");
  r = run_kiln("ckpt export " + (dir_ / "run") + " " + (dir_ / "hf3") + "/");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(file_bytes(dir_ / "hf3/model.safetensors") ==
              file_bytes(dir_ / "hf/model.safetensors"));
  r = run_kiln("ckpt export " + (dir_ / "nowhere") + " " + (dir_ / "hf2"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("nowhere"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "hf2"));
}

TEST_F(Cli, RunKilledWithSigkillResumesToTheSameBits) {
  prepare();
  const std::string sets =
      " --set model.n_embd=64 --set train.steps=400 --set train.val_every=0 --set "
      "checkpoint.every=10 --set checkpoint.keep_last=2";
  // The uninterrupted run.
  auto full = run_kiln("train " + config_ + sets + " --set train.out_dir=" + (dir_ / "full"));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  // The same run, killed with SIGKILL once its step-20 checkpoint exists.
  std::string out_dir = dir_ / "killed";
  pid_t pid =
      spawn_kiln("train " + config_ + sets + " --set train.out_dir=" + out_dir, "/dev/null");
  ASSERT_GE(pid, 0);
  int status = 0;
  bool seen = wait_until(
      pid, [&] { return fs::exists(out_dir + "/checkpoints/step_00000020"); }, 20, &status);
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ASSERT_TRUE(seen) << "the run never wrote its step-20 checkpoint";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before it could be killed; make it longer";
  EXPECT_FALSE(fs::exists(out_dir + "/checkpoints/step_00000400"));
  auto resumed =
      run_kiln("train " + config_ + sets + " --set train.out_dir=" + out_dir + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  for (const char* f : {"model.safetensors", "optimizer-00000-of-00001.safetensors"}) {
    std::string a = file_bytes(dir_ / ("full/checkpoints/step_00000400/" + std::string(f)));
    std::string b = file_bytes(out_dir + "/checkpoints/step_00000400/" + f);
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << f << " differs between the uninterrupted and the resumed run";
  }
}

}  // namespace
}  // namespace kiln
