// What the end-to-end parallelism tests compare: each step's loss and gradient norm from a run's
// metrics.jsonl, and the difference between two model files.
#pragma once
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/safetensors.h"
#include "test_util.h"

namespace kiln {

struct StepRecord {
  double loss = 0, grad_norm = 0;
  int in_flight = 0;
};

inline std::map<int, StepRecord> train_records(const std::string& metrics) {
  std::map<int, StepRecord> out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "train") continue;
    out[j["step"].get<int>()] = {j["loss"].get<double>(), j["grad_norm"].get<double>(),
                                 j["micro_batches_in_flight"].get<int>()};
  }
  return out;
}

// The largest relative difference ||a - b|| / ||a|| over the tensors of two model files (every
// tensor of one must be in the other). GPT-2's key bias is left out: adding a constant to every
// key does not change the softmax, so its true gradient is zero and what AdamW makes of it is
// rounding noise divided by its own size (about 1e-5 in magnitude, and different for any other
// order of the same sums). Its queries' and values' thirds are compared.
inline double weights_difference(const std::string& a, const std::string& b) {
  SafeTensorsReader ra(a), rb(b);
  EXPECT_EQ(ra.entries().size(), rb.entries().size());
  double worst = 0;
  for (const auto& [name, entry] : ra.entries()) {
    if (!rb.has(name)) {
      ADD_FAILURE() << name << " is missing from " << b;
      continue;
    }
    auto x = ra.read_f64(name), y = rb.read_f64(name);
    const bool key_bias = name.ends_with("attn.c_attn.bias");
    const size_t third = x.size() / 3;
    double d = 0, n = 0;
    for (size_t i = 0; i < x.size(); i++) {
      if (key_bias && i >= third && i < 2 * third) continue;
      d += (x[i] - y[i]) * (x[i] - y[i]);
      n += x[i] * x[i];
    }
    if (n > 0) worst = std::max(worst, std::sqrt(d / n));
  }
  return worst;
}

// Runs of one small config on different layouts, in one temporary directory, compared with a
// reference run (losses and norms step by step, the final weights).
class LayoutRun : public ::testing::Test {
 protected:
  // Prepares the data and writes the config, `model` being the [model] section's sizes: four
  // micro-batches of 4 sequences of 16 tokens a step, 20 steps, a checkpoint every 10. Returns
  // the data preparation's error, if any.
  std::string write_config(const std::string& model) {
    std::string error = kiln::testing::prepare_pangram_data(dir_.path(), 400);
    config_ = dir_ / "c.toml";
    std::ofstream(config_) << "[model]\n"
                           << model
                           << "block_size = 32\nvocab_size = 257\n[train]\nseq_len = 16\n"
                              "batch_size = 4\ngrad_accum = 4\nsteps = 20\nlr = 3e-3\n"
                              "warmup_steps = 2\nthreads = 1\nbucket_mb = 0.01\n[data]\ntrain = \""
                           << (dir_ / "data/train_*.bin")
                           << "\"\ntokenizer = \"bytes\"\nshuffle = true\n"
                              "[checkpoint]\nevery = 10\nkeep_last = 0\n"
                              "[hardware]\npeak_gflops = 100.0\n";
    return error;
  }
  // `ranks` processes (one when 1) in run directory `out`.
  kiln::testing::RunResult train(int ranks, const std::string& out, const std::string& sets = "") {
    std::string a = "train " + config_ + " --set train.out_dir=" + (dir_ / out) + " " + sets;
    return ranks == 1 ? kiln::testing::run_kiln(a) : kiln::testing::run_kiln_mpi(ranks, a);
  }
  std::string model_file(const std::string& out, int step = 20) {
    return dir_ / fmt::format("{}/checkpoints/step_{:08d}/model.safetensors", out, step);
  }
  // Every step's loss and norm within `tol` of the reference's; the final weights within wtol.
  void expect_agrees(const std::string& ref, const std::string& out, double tol, double wtol) {
    auto want = train_records(dir_ / (ref + "/metrics.jsonl"));
    auto got = train_records(dir_ / (out + "/metrics.jsonl"));
    ASSERT_EQ(got.size(), want.size()) << out;
    for (auto [step, w] : want) {
      EXPECT_NEAR(got[step].loss, w.loss, tol * w.loss) << out << " step " << step;
      EXPECT_NEAR(got[step].grad_norm, w.grad_norm, tol * w.grad_norm) << out << " step " << step;
    }
    EXPECT_LT(weights_difference(model_file(ref), model_file(out)), wtol) << out;
  }
  // Copies `from`'s step-10 checkpoint into a new run directory `out`, resumes there on `ranks`
  // processes with `sets`, and checks steps 11 to 20 against `from`'s.
  void expect_resumes(const std::string& from, const std::string& out, int ranks,
                      const std::string& sets) {
    namespace fs = std::filesystem;
    fs::create_directories(dir_ / (out + "/checkpoints"));
    fs::copy(dir_ / (from + "/checkpoints/step_00000010"),
             dir_ / (out + "/checkpoints/step_00000010"), fs::copy_options::recursive);
    auto r = train(ranks, out, sets + " --resume");
    ASSERT_EQ(r.exit_code, 0) << out << "\n" << r.output;
    auto got = train_records(dir_ / (out + "/metrics.jsonl"));
    ASSERT_EQ(got.size(), 10u) << out;
    auto want = train_records(dir_ / (from + "/metrics.jsonl"));
    for (int step = 11; step <= 20; step++)
      EXPECT_NEAR(got[step].loss, want[step].loss, 1e-5 * want[step].loss) << out << " " << step;
  }
  // Runs `a` and `b` ended with the same bits: every file of their final checkpoints' weights
  // and optimizer state.
  void expect_same_bits(const std::string& a, const std::string& b) {
    namespace fs = std::filesystem;
    const fs::path da = dir_ / (a + "/checkpoints/step_00000020");
    const fs::path db = dir_ / (b + "/checkpoints/step_00000020");
    int files = 0;
    for (const auto& e : fs::directory_iterator(da)) {
      if (e.path().extension() != ".safetensors") continue;
      files++;
      const std::string x = kiln::testing::bytes_of(e.path().string());
      EXPECT_FALSE(x.empty()) << e.path();
      EXPECT_TRUE(x == kiln::testing::bytes_of((db / e.path().filename()).string())) << e.path();
    }
    EXPECT_GE(files, 2) << da;
  }
  kiln::testing::TempDir dir_;
  std::string config_;
};

}  // namespace kiln
