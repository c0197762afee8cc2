// Every file kiln reads from its users, damaged every way a file can be, through the kiln binary:
// each case must exit non-zero without a signal, within a minute, naming the file. Rows: the
// files (shards, --init-from, a checkpoint's weights, the data manifest, prepare's input);
// columns: missing, directory, FIFO, empty, truncated, garbage.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/exit_codes.h"
#include "core/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::bytes_of;
using kiln::testing::run_command;
using kiln::testing::RunResult;
using kiln::testing::TempDir;

enum class Damage { kMissing, kDirectory, kFifo, kEmpty, kTruncated, kGarbage };
const Damage kAllDamage[] = {Damage::kMissing, Damage::kEmpty,     Damage::kDirectory,
                             Damage::kFifo,    Damage::kTruncated, Damage::kGarbage};

const char* name_of(Damage d) {
  switch (d) {
    case Damage::kMissing:
      return "missing";
    case Damage::kDirectory:
      return "directory";
    case Damage::kFifo:
      return "FIFO";
    case Damage::kEmpty:
      return "empty";
    case Damage::kTruncated:
      return "truncated";
    case Damage::kGarbage:
      return "garbage";
  }
  return "?";
}

// Puts a damaged version of `good` (a file's bytes) at path.
void damage(const std::string& path, const std::string& good, Damage d) {
  std::error_code ec;
  fs::remove_all(path, ec);
  switch (d) {
    case Damage::kMissing:
      return;
    case Damage::kDirectory:
      fs::create_directories(path);
      return;
    case Damage::kFifo:
      ASSERT_EQ(0, mkfifo(path.c_str(), 0600));
      return;
    case Damage::kEmpty:
      std::ofstream(path).close();
      return;
    case Damage::kTruncated:
      std::ofstream(path, std::ios::binary) << good.substr(0, good.size() / 2 + 1);
      return;
    case Damage::kGarbage: {
      Rng rng(42);
      std::string bytes(3000, '\0');
      for (auto& c : bytes) c = static_cast<char>(rng.below(256));
      std::ofstream(path, std::ios::binary) << bytes;
      return;
    }
  }
}

// One tiny dataset, config and finished run, shared by every case.
class BadFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    std::string text;
    for (int i = 0; i < 300; i++)
      text += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog.\n";
    std::ofstream(*dir_ / "corpus.txt") << text;
    auto r = kiln("data prepare --tokenizer bytes --input " + (*dir_ / "corpus.txt") +
                  " --output " + (*dir_ / "data") + " --val-fraction 0.2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto c = config(*dir_ / "data/train_000000.bin", *dir_ / "data/val_000000.bin", *dir_ / "run");
    r = kiln("train " + c);  // two steps, a checkpoint at step 2: the resume rows damage it
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& e : fs::recursive_directory_iterator(*dir_ / "run"))
      if (e.path().filename() == "model.safetensors") checkpoint_ = e.path().string();
    ASSERT_FALSE(checkpoint_.empty());
  }
  static void TearDownTestSuite() { delete dir_; }

  // A config in its own file, training on the given shards into out_dir.
  static std::string config(const std::string& train, const std::string& val,
                            const std::string& out_dir) {
    static int n = 0;
    std::string path = *dir_ / ("config-" + std::to_string(n++) + ".toml");
    std::ofstream(path) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 32\n"
                           "vocab_size = 257\n"
                           "[train]\nbatch_size = 2\nseq_len = 16\nsteps = 2\nlr = 3e-3\n"
                           "val_every = 2\nval_batches = 1\nout_dir = \""
                        << out_dir << "\"\n[data]\ntrain = \"" << train << "\"\nval = \"" << val
                        << "\"\ntokenizer = \"bytes\"\n[checkpoint]\nevery = 2\n"
                           "[hardware]\npeak_gflops = 100.0\n";
    return path;
  }

  // `kiln <args>` under a one-minute timeout (a hang is a failure, not a stuck suite).
  static RunResult kiln(const std::string& args) {
    return run_command("timeout -k 5 60 " + std::string(KILN_BIN) + " " + args + " < /dev/null");
  }

  // Runs `args`, expecting a refusal that names `file`.
  static void expect_refused(const std::string& row, Damage d, const std::string& file,
                             const std::string& args) {
    SCOPED_TRACE(row + " x " + name_of(d));
    RunResult r = kiln(args);
    EXPECT_NE(r.exit_code, 124) << "timed out (a hang): " << r.output;
    EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << r.output;
    EXPECT_NE(r.exit_code, 0) << "accepted: " << r.output;
    // kiln train refuses its input with the code launchers do not retry.
    if (args.rfind("train ", 0) == 0) {
      EXPECT_EQ(r.exit_code, kExitBadInput) << r.output;
    }
    EXPECT_NE(r.output.find(file), std::string::npos)
        << "the message does not name " << file << ":\n"
        << r.output;
  }

  static TempDir* dir_;
  static std::string checkpoint_;
};
TempDir* BadFiles::dir_ = nullptr;
std::string BadFiles::checkpoint_;

TEST_F(BadFiles, TrainShardIsRefusedNamingIt) {
  const std::string good = bytes_of(*dir_ / "data/train_000000.bin");
  for (Damage d : kAllDamage) {
    TempDir t;
    std::string shard = t / "train_000000.bin";
    damage(shard, good, d);
    expect_refused("data.train", d, shard,
                   "train " + config(shard, *dir_ / "data/val_000000.bin", t / "run"));
  }
}

TEST_F(BadFiles, ValShardIsRefusedNamingIt) {
  const std::string good = bytes_of(*dir_ / "data/val_000000.bin");
  for (Damage d : kAllDamage) {
    TempDir t;
    std::string shard = t / "val_000000.bin";
    damage(shard, good, d);
    expect_refused("data.val", d, shard,
                   "train " + config(*dir_ / "data/train_000000.bin", shard, t / "run"));
  }
}

TEST_F(BadFiles, InitFromSafetensorsIsRefusedNamingIt) {
  const std::string good = bytes_of(checkpoint_);
  for (Damage d : kAllDamage) {
    TempDir t;
    std::string file = t / "init.safetensors";
    damage(file, good, d);
    std::string c =
        config(*dir_ / "data/train_000000.bin", *dir_ / "data/val_000000.bin", t / "run");
    expect_refused("--init-from", d, file, "train " + c + " --init-from " + file);
  }
}

TEST_F(BadFiles, CheckpointWeightsAreRefusedOnResumeNamingThem) {
  const std::string good = bytes_of(checkpoint_);
  const fs::path rel = fs::relative(checkpoint_, *dir_ / "run");
  // With its manifest (refused there, by size or SHA-256) and without (an earlier kiln's
  // checkpoint: refused by the safetensors reader).
  for (bool manifest : {true, false})
    for (Damage d : kAllDamage) {
      TempDir t;
      fs::copy(*dir_ / "run", t / "run", fs::copy_options::recursive);
      std::string file = (fs::path(t / "run") / rel).string();
      damage(file, good, d);
      if (!manifest) fs::remove(fs::path(file).parent_path() / "manifest.json");
      std::string c =
          config(*dir_ / "data/train_000000.bin", *dir_ / "data/val_000000.bin", t / "run");
      expect_refused(
          std::string("checkpoint model.safetensors") + (manifest ? "" : ", no manifest"), d, file,
          "train " + c + " --resume");
    }
}

TEST_F(BadFiles, DataManifestIsRefusedNamingIt) {
  const std::string good = bytes_of(*dir_ / "data/manifest.json");
  for (Damage d : kAllDamage) {
    if (d == Damage::kMissing) continue;  // allowed: shards made elsewhere (llm.c) have none
    TempDir t;
    fs::copy(*dir_ / "data/train_000000.bin", t / "train_000000.bin");
    std::string file = t / "manifest.json";
    damage(file, good, d);
    expect_refused(
        "data manifest", d, file,
        "train " + config(t / "train_000000.bin", *dir_ / "data/val_000000.bin", t / "run"));
  }
}

TEST_F(BadFiles, PrepareInputIsRefusedNamingIt) {
  // Truncated: cut inside a two-byte character (text files have no other way to be truncated).
  const std::string good = "caf\xc3\xa9 au lait\n";
  for (Damage d : kAllDamage) {
    TempDir t;
    std::string file = t / "input.txt";
    if (d == Damage::kTruncated)
      std::ofstream(file, std::ios::binary) << good.substr(0, 4);
    else
      damage(file, good, d);
    expect_refused("data prepare --input", d, file,
                   "data prepare --tokenizer bytes --input " + file + " --output " + (t / "out"));
    EXPECT_FALSE(fs::exists(t / "out/manifest.json"));
  }
}

}  // namespace
}  // namespace kiln
