#include "train/trainer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_state.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "core/rng.h"
#include "data/shards.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "obs/metric_table.h"
#include "test_util.h"
#include "train/hf_weights.h"
#include "train/peak.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::ScopedEnv;
using kiln::testing::TempDir;

// A small run: 2 layers, vocab 100 (padded to 128), random-but-seeded tokens with some
// structure (a repeating pattern plus noise), so the loss falls.
class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Rng rng(42);
    std::vector<uint16_t> tokens(20000);
    for (size_t i = 0; i < tokens.size(); i++)
      tokens[i] = static_cast<uint16_t>(rng.uniform() < 0.8 ? (i * 7) % 100 : rng.below(100));
    write_shard(dir_ / "train_000.bin",
                std::vector<uint16_t>(tokens.begin(), tokens.begin() + 12000));
    write_shard(dir_ / "train_001.bin",
                std::vector<uint16_t>(tokens.begin() + 12000, tokens.begin() + 18000));
    write_shard(dir_ / "val_000.bin", std::vector<uint16_t>(tokens.begin() + 18000, tokens.end()));
  }

  TrainConfig config(const std::string& out, std::vector<std::string> sets = {}) {
    std::string toml = fmt::format(R"(
[model]
n_layer = 2
n_head = 2
n_embd = 32
block_size = 32
vocab_size = 100
[train]
batch_size = 4
seq_len = 16
steps = 8
lr = 1e-2
min_lr = 1e-3
warmup_steps = 2
seed = 5
out_dir = "{}"
val_every = 4
val_batches = 2
[data]
train = "{}"
val = "{}"
shuffle = true
[checkpoint]
every = 4
keep_last = 0
[hardware]
peak_gflops = 100.0
)",
                                   out, dir_ / "train_*.bin", dir_ / "val_*.bin");
    return parse_train_config(toml, "test.toml", sets);
  }

  static TrainerOptions quiet() {
    TrainerOptions o;
    o.quiet = true;
    return o;
  }

  TempDir dir_;
};

bool same_bits(const Trainer& a, const Trainer& b) {
  return a.num_params() == b.num_params() &&
         std::memcmp(a.params(), b.params(), a.num_params() * sizeof(float)) == 0;
}

std::vector<nlohmann::json> records_of(const std::string& metrics, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

TEST_F(TrainerTest, AStepFasterThanThePeakRaisesItSoMfuNeverExceedsOne) {
  // Before: a peak probed while the machine was busy gave MFU 159% (metrics.jsonl mfu 2.36).
  Trainer t(config(dir_ / "run", {"hardware.peak_gflops=0.001"}), quiet());
  t.run();
  const std::string metrics = dir_ / "run/metrics.jsonl";
  auto start = records_of(metrics, "run_start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["peak_gflops"], 0.001);
  EXPECT_EQ(start[0]["peak_source"], "hardware.peak_gflops");
  auto train = records_of(metrics, "train");
  ASSERT_EQ(train.size(), 8u);
  for (const auto& r : train) {
    EXPECT_GT(r["mfu"].get<double>(), 0) << r.dump();
    EXPECT_LE(r["mfu"].get<double>(), 1.0) << r.dump();
  }
  auto raised = records_of(metrics, "peak_raised");
  ASSERT_GE(raised.size(), 1u);
  EXPECT_EQ(raised[0]["step"], 1);
  EXPECT_EQ(raised[0]["was_gflops"], 0.001);
  EXPECT_EQ(raised[0]["was_source"], "hardware.peak_gflops");
  double last = 0.001;
  for (const auto& r : raised) {  // each a new, higher peak
    EXPECT_GT(r["peak_gflops"].get<double>(), last) << r.dump();
    last = r["peak_gflops"].get<double>();
  }
  EXPECT_EQ(t.peak_gflops(), last);
  EXPECT_EQ(t.peak().raised_at_step, 1);
  // The step that set the peak reads exactly 100%.
  bool at_peak = false;
  for (const auto& r : train) at_peak |= r["mfu"].get<double>() == 1.0;
  EXPECT_TRUE(at_peak);
}

TEST_F(TrainerTest, WithoutAConfiguredPeakKilnBenchPeaksCacheIsUsedAndNamed) {
  TempDir cache;
  ScopedEnv env("KILN_CACHE_DIR", cache.path());
  // train.threads = 1: the entry for this CPU with one thread, in fp32.
  store_peak(cache / "peak.json", {cpu_model_name(), 1, "fp32", 4321, "2026-11-25"}, nullptr);
  store_peak(cache / "peak.json", {cpu_model_name(), 1, "bf16", 8765, "2026-11-24"}, nullptr);
  Trainer t(config(dir_ / "run", {"hardware.peak_gflops=0", "train.threads=1", "train.steps=1"}),
            quiet());
  EXPECT_EQ(t.peak_gflops(), 4321);
  EXPECT_EQ(t.peak().describe(), "cached by kiln bench peak on 2026-11-25");
  t.run();
  auto start = records_of(dir_ / "run/metrics.jsonl", "run_start");
  ASSERT_EQ(start.size(), 1u);
  EXPECT_EQ(start[0]["peak_gflops"], 4321);
  EXPECT_EQ(start[0]["peak_source"], "kiln bench peak");
  EXPECT_EQ(start[0]["peak_date"], "2026-11-25");
}

TEST_F(TrainerTest, LossFallsOnLearnableData) {
  Trainer t(config(dir_ / "run", {"train.steps=40"}), quiet());
  double first = t.step().loss, last = 0;
  for (int i = 1; i < 40; i++) {
    double l = t.step().loss;
    if (i >= 35) last += l / 5;
  }
  EXPECT_LT(last, first - 0.5) << "first " << first << ", mean of the last five " << last;
}

TEST_F(TrainerTest, SameSeedGivesTheSameBits) {
  Trainer a(config(dir_ / "a"), quiet()), b(config(dir_ / "b"), quiet());
  a.run();
  b.run();
  EXPECT_TRUE(same_bits(a, b));
  Trainer c(config(dir_ / "c", {"train.seed=6"}), quiet());
  c.run();
  EXPECT_FALSE(same_bits(a, c));
}

TEST_F(TrainerTest, ResumeAfterStopMatchesUninterruptedRun) {
  Trainer full(config(dir_ / "full"), quiet());
  full.run();
  // A run that stopped after step 4: only the step-4 checkpoint exists.
  fs::create_directories(dir_ / "resumed/checkpoints");
  fs::copy(dir_ / "full/checkpoints/step_00000004", dir_ / "resumed/checkpoints/step_00000004",
           fs::copy_options::recursive);
  Trainer resumed(config(dir_ / "resumed", {"train.resume=must"}), quiet());
  EXPECT_EQ(resumed.steps_done(), 4);
  resumed.run();
  EXPECT_EQ(resumed.steps_done(), 8);
  EXPECT_TRUE(same_bits(full, resumed));
}

// The same for a Llama (grouped-query attention, untied head), in fp32 and bf16, and its
// checkpoint is a Hugging Face Llama directory.
TEST_F(TrainerTest, LlamaResumeAfterStopMatchesUninterruptedRun) {
  for (const char* dtype : {"fp32", "bf16"}) {
    const std::vector<std::string> llama = {"model.family=llama", "model.n_kv_head=1",
                                            "model.ffn_hidden=40",
                                            std::string("train.dtype=") + dtype};
    const fs::path d = dir_ / dtype;
    Trainer full(config(d / "full", llama), quiet());
    full.run();
    fs::create_directories(d / "resumed/checkpoints");
    fs::copy(d / "full/checkpoints/step_00000004", d / "resumed/checkpoints/step_00000004",
             fs::copy_options::recursive);
    auto sets = llama;
    sets.push_back("train.resume=must");
    Trainer resumed(config(d / "resumed", sets), quiet());
    EXPECT_EQ(resumed.steps_done(), 4);
    resumed.run();
    EXPECT_TRUE(same_bits(full, resumed)) << dtype;
    const auto cfg = nlohmann::json::parse(
        read_file((d / "full/checkpoints/step_00000008/config.json").string(), "config"));
    EXPECT_EQ(cfg["model_type"], "llama");
    EXPECT_EQ(cfg["num_key_value_heads"], 1);
    SafeTensorsReader m((d / "full/checkpoints/step_00000008/model.safetensors").string());
    EXPECT_EQ(m.entry("model.embed_tokens.weight").shape, (std::vector<int64_t>{100, 32}));
    EXPECT_EQ(m.entry("lm_head.weight").shape, (std::vector<int64_t>{100, 32}));
    EXPECT_EQ(m.entry("model.layers.1.self_attn.k_proj.weight").shape,
              (std::vector<int64_t>{16, 32}));
  }
}

// A Llama checkpoint does not resume as a GPT-2, nor with other kv-heads; a changed rotary base
// is allowed and said.
TEST_F(TrainerTest, ResumeAcrossFamiliesOrKvHeadsIsRefusedByName) {
  const std::vector<std::string> llama = {"model.family=llama", "model.n_kv_head=1",
                                          "model.ffn_hidden=40", "train.steps=4"};
  Trainer src(config(dir_ / "src", llama), quiet());
  src.run();
  for (const auto& [sets, key] :
       {std::pair{std::vector<std::string>{"train.steps=8"}, "model.family"},
        std::pair{std::vector<std::string>{"model.family=llama", "model.n_kv_head=2",
                                           "model.ffn_hidden=40", "train.steps=8"},
                  "model.n_kv_head"}}) {
    auto s = sets;
    s.push_back("train.resume=must");
    fs::remove_all(dir_ / "dst");
    fs::create_directories(dir_ / "dst/checkpoints");
    fs::copy(dir_ / "src/checkpoints/step_00000004", dir_ / "dst/checkpoints/step_00000004",
             fs::copy_options::recursive);
    const std::string err = error_of([&] { Trainer t(config(dir_ / "dst", s), quiet()); });
    EXPECT_NE(err.find(key), std::string::npos) << err;
  }
  auto s = llama;
  s.push_back("model.rope_theta=500000");
  s.push_back("train.resume=must");
  fs::remove_all(dir_ / "dst");
  fs::create_directories(dir_ / "dst/checkpoints");
  fs::copy(dir_ / "src/checkpoints/step_00000004", dir_ / "dst/checkpoints/step_00000004",
           fs::copy_options::recursive);
  Trainer t(config(dir_ / "dst", s), quiet());
  EXPECT_EQ(t.steps_done(), 4);
}

TEST_F(TrainerTest, LlamaKeysOnAGpt2AreRefusedByName) {
  auto err = error_of([&] { config(dir_ / "x", {"model.n_kv_head=1"}); });
  EXPECT_NE(err.find("model.n_kv_head applies to model.family = \"llama\""), std::string::npos)
      << err;
  err = error_of([&] { config(dir_ / "x", {"model.family=llama"}); });
  EXPECT_NE(err.find("model.ffn_hidden"), std::string::npos) << err;
  err = error_of([&] { config(dir_ / "x", {"model.family=mamba"}); });
  EXPECT_NE(err.find("model.family must be"), std::string::npos) << err;
  err = error_of([&] {
    config(dir_ / "x", {"model.family=llama", "model.ffn_hidden=40", "model.n_kv_head=3"});
  });
  EXPECT_NE(err.find("model.n_kv_head"), std::string::npos) << err;
}

// checkpoint.async: the same checkpoints, byte for byte, and the same final weights as saving on
// the training thread; each is published (with its manifest) at a later step boundary.
TEST_F(TrainerTest, AsyncCheckpointsEqualSyncOnesToTheByte) {
  for (const char* zero : {"train.zero=0", "train.zero=3"}) {
    SCOPED_TRACE(zero);
    const fs::path root = dir_.path();
    const std::string s = std::string("s") + zero[11], a = std::string("a") + zero[11];
    Trainer sync(config(dir_ / s, {zero, "checkpoint.every=2", "train.steps=9"}), quiet());
    sync.run();
    Trainer async(
        config(dir_ / a, {zero, "checkpoint.every=2", "train.steps=9", "checkpoint.async=true"}),
        quiet());
    async.run();
    EXPECT_TRUE(same_bits(sync, async));
    for (const char* step :
         {"step_00000002", "step_00000004", "step_00000006", "step_00000008", "step_00000009"})
      for (const char* f : {"model.safetensors", "optimizer-00000-of-00001.safetensors",
                            "config.json", "trainer_state.json", "manifest.json"}) {
        std::string x = testing::bytes_of(root / s / "checkpoints" / step / f);
        std::string y = testing::bytes_of(root / a / "checkpoints" / step / f);
        ASSERT_FALSE(x.empty()) << step << "/" << f;
        // The state's resolved config (out_dir, checkpoint.async) differs, and with it its
        // digest in the manifest.
        if (std::string(f) == "trainer_state.json" || std::string(f) == "manifest.json") {
          auto strip = [](const std::string& text) {
            auto j = nlohmann::json::parse(text);
            j.erase("config");
            if (j.contains("files"))
              for (auto& e : j["files"])
                if (e["name"] == "trainer_state.json") e.erase("sha256"), e.erase("bytes");
            return j.dump();
          };
          x = strip(x);
          y = strip(y);
        }
        EXPECT_TRUE(x == y) << step << "/" << f;
      }
    auto recs = records_of((root / a / "metrics.jsonl").string(), "checkpoint");
    ASSERT_EQ(recs.size(), 5u);
    for (size_t i = 0; i + 1 < recs.size(); i++) {
      EXPECT_TRUE(recs[i]["async"].get<bool>());
      EXPECT_GT(recs[i]["published_at_step"].get<int>(), recs[i]["step"].get<int>());
    }
    EXPECT_FALSE(recs.back()["async"].get<bool>());  // the last is written at once
    // A resume from an async one continues to the same bits.
    fs::create_directories(root / (a + "r") / "checkpoints");
    fs::copy(root / a / "checkpoints/step_00000004", root / (a + "r") / "checkpoints/step_00000004",
             fs::copy_options::recursive);
    Trainer resumed(config(dir_ / (a + "r"), {zero, "checkpoint.every=2", "train.steps=9",
                                              "checkpoint.async=true", "train.resume=must"}),
                    quiet());
    EXPECT_EQ(resumed.steps_done(), 4);
    resumed.run();
    EXPECT_TRUE(same_bits(sync, resumed));
  }
}

// The manifest lists every part with its size and SHA-256: a part missing, cut short or changed
// is refused on resume, naming the file.
TEST_F(TrainerTest, ResumeRefusesACheckpointWithAMissingOrTruncatedPartNamingIt) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=4"}), quiet());
    t.run();
  }
  const fs::path ck = fs::path(dir_ / "run/checkpoints/step_00000004");
  const auto manifest = nlohmann::json::parse(testing::bytes_of(ck / "manifest.json"));
  std::set<std::string> listed;
  for (const auto& f : manifest["files"]) {
    listed.insert(f["name"].get<std::string>());
    EXPECT_EQ(f["bytes"].get<int64_t>(), static_cast<int64_t>(fs::file_size(ck / f["name"])));
    EXPECT_EQ(f["sha256"].get<std::string>().size(), 64u);
  }
  EXPECT_EQ(listed, (std::set<std::string>{"model.safetensors", "config.json", "trainer_state.json",
                                           "optimizer-00000-of-00001.safetensors"}));
  const std::string shard = "optimizer-00000-of-00001.safetensors";
  const std::string whole = testing::bytes_of(ck / shard);
  auto resume_error = [&] {
    return error_of([&] { Trainer r(config(dir_ / "run", {"train.resume=must"}), quiet()); });
  };
  fs::resize_file(ck / shard, whole.size() - 100);
  std::string e = resume_error();
  EXPECT_NE(e.find(shard), std::string::npos) << e;
  EXPECT_NE(e.find("bytes, the manifest says"), std::string::npos) << e;
  fs::remove(ck / shard);
  e = resume_error();
  EXPECT_NE(e.find(shard + " is missing"), std::string::npos) << e;
  // The same size, one byte changed.
  std::string changed = whole;
  changed[changed.size() - 1] ^= 1;
  std::ofstream(ck / shard, std::ios::binary) << changed;
  e = resume_error();
  EXPECT_NE(e.find(shard + " does not have the SHA-256"), std::string::npos) << e;
  std::ofstream(ck / shard, std::ios::binary) << whole;
  Trainer ok(config(dir_ / "run", {"train.resume=must"}), quiet());
  EXPECT_EQ(ok.steps_done(), 4);
}

TEST_F(TrainerTest, ResumesAnEarlierKilnsCheckpointWithWholeOptimizerTensors) {
  Trainer full(config(dir_ / "full"), quiet());
  full.run();
  // The step-4 checkpoint as kiln wrote it before per-rank shards: one optimizer.safetensors of
  // whole tensors in Hugging Face names (wte unpadded), made here from the shard it holds.
  const std::string ck = dir_ / "old/checkpoints/step_00000004";
  fs::create_directories(dir_ / "old/checkpoints");
  fs::copy(dir_ / "full/checkpoints/step_00000004", ck, fs::copy_options::recursive);
  const std::string shard = ck + "/optimizer-00000-of-00001.safetensors";
  std::vector<FlatTensor> tensors;
  for (const auto& t : full.model().layout().tensors)
    tensors.push_back({t.name, t.shape, t.offset, t.numel});
  std::vector<float> m(full.num_params()), v(full.num_params());
  read_state_shards({shard}, tensors, 0, full.num_params(),
                    {{"exp_avg.", m.data()}, {"exp_avg_sq.", v.data()}});
  auto opt = named_tensors(full.model().layout(), full.model().config(), m.data(), "exp_avg.");
  auto vv = named_tensors(full.model().layout(), full.model().config(), v.data(), "exp_avg_sq.");
  opt.insert(opt.end(), vv.begin(), vv.end());
  write_safetensors(ck + "/optimizer.safetensors", opt, {{"optimizer", "adamw"}});
  fs::remove(shard);
  fs::remove(ck + "/manifest.json");  // earlier kilns wrote none
  Trainer resumed(config(dir_ / "old", {"train.resume=must"}), quiet());
  EXPECT_EQ(resumed.steps_done(), 4);
  resumed.run();
  EXPECT_TRUE(same_bits(full, resumed));
}

// Every number in metrics.jsonl's train, val, memory and checkpoint records is a row of the
// metric table (obs/metric_table.h) and every row is there; every declared series is exported.
TEST_F(TrainerTest, RecordsAndSeriesFollowTheMetricTable) {
  Trainer t(config(dir_ / "run"), quiet());
  t.run();
  std::map<std::string, std::set<std::string>> want;  // record type -> keys
  for (const auto& s : metric_specs()) {
    if (!s.json) continue;
    if (s.id == Metric::PhaseSeconds)
      for (const char* p : kStepPhases) want[s.record].insert(metric_json_key(s.id, p));
    else if (s.id == Metric::MemoryBytes)
      for (const char* k : kMemoryKinds) want[s.record].insert(metric_json_key(s.id, k));
    else
      want[s.record].insert(s.json);
  }
  std::map<std::string, int> seen;
  std::ifstream f(dir_ / "run/metrics.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    const std::string type = j["type"];
    if (type != "train" && type != "val" && type != "memory" && type != "checkpoint") continue;
    seen[type]++;
    std::set<std::string> numbers;
    for (auto& [k, v] : j.items())
      if ((v.is_number() || v.is_array()) && k != "step" && (k != "time" || type == "checkpoint"))
        numbers.insert(k);
    EXPECT_EQ(numbers, want[type]) << line;
  }
  for (const char* type : {"train", "val", "memory", "checkpoint"})
    EXPECT_GT(seen[type], 0) << type;
  const std::string page = t.metrics_registry()->exposition();
  for (const auto& s : metric_specs())
    EXPECT_NE(page.find(std::string("# TYPE ") + s.prometheus + " "), std::string::npos)
        << s.prometheus << " is declared but not exported:\n"
        << page;
}

TEST_F(TrainerTest, FourMicroBatchesEqualOneBatchFourTimesLarger) {
  Trainer small(
      config(dir_ / "a", {"train.batch_size=2", "train.grad_accum=4", "data.shuffle=false"}),
      quiet());
  Trainer large(
      config(dir_ / "b", {"train.batch_size=8", "train.grad_accum=1", "data.shuffle=false"}),
      quiet());
  for (int s = 0; s < 3; s++) {
    StepResult a = small.step(), b = large.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-5 * b.loss) << "step " << s;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-4 * b.grad_norm) << "step " << s;
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < small.num_params(); i++) {
    num = std::max(num, static_cast<double>(std::abs(small.params()[i] - large.params()[i])));
    den = std::max(den, static_cast<double>(std::abs(large.params()[i])));
  }
  EXPECT_LT(num / den, 1e-4);
}

TEST_F(TrainerTest, CheckpointIsAHuggingFaceGpt2Directory) {
  Trainer t(config(dir_ / "run", {"train.steps=1"}), quiet());
  t.run();
  std::string ck = dir_ / "run/checkpoints/step_00000001";
  SafeTensorsReader m(ck + "/model.safetensors");
  EXPECT_EQ(m.entry("wte.weight").shape, (std::vector<int64_t>{100, 32}));  // unpadded
  EXPECT_EQ(m.entry("wpe.weight").shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(m.entry("h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{32, 96}));
  EXPECT_EQ(m.entry("h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{128, 32}));
  EXPECT_TRUE(m.has("ln_f.bias"));
  auto cfg = nlohmann::json::parse(std::ifstream(ck + "/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["n_layer"], 2);
  EXPECT_EQ(cfg["n_positions"], 32);
  EXPECT_EQ(cfg["vocab_size"], 100);
  auto state = nlohmann::json::parse(std::ifstream(ck + "/trainer_state.json"));
  EXPECT_EQ(state["step"], 1);
  EXPECT_EQ(state["config"]["train"]["seed"], 5);
  EXPECT_TRUE(state.contains("kiln_version"));
  // The AdamW state, one file per rank that holds a shard (here one, whole).
  EXPECT_TRUE(fs::exists(ck + "/optimizer-00000-of-00001.safetensors"));
}

TEST_F(TrainerTest, KeepLastPrunesOlderCheckpoints) {
  Trainer t(config(dir_ / "run", {"checkpoint.every=2", "checkpoint.keep_last=2"}), quiet());
  t.run();
  auto all = list_checkpoints(dir_ / "run/checkpoints");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].step, 6);
  EXPECT_EQ(all[1].step, 8);
}

TEST_F(TrainerTest, FailedCheckpointWriteKeepsThePreviousOne) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=4"}), quiet());
    t.run();
  }
  std::string root = dir_ / "run/checkpoints";
  auto bytes_of = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  std::string model_before = bytes_of(root + "/step_00000004/model.safetensors");
  // A writer that dies half-way through the same step and through a newer one.
  for (int64_t step : {4, 5}) {
    std::string e = error_of([&] {
      commit_checkpoint(
          root, step,
          [](const std::string& dir) {
            std::ofstream(dir + "/model.safetensors") << "half";
            fail("disk full");
          },
          0);
    });
    EXPECT_EQ(e, "disk full");
  }
  // A writer killed outright leaves only a temporary directory behind.
  fs::create_directories(root + "/.tmp-step_00000009-123");
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 4);
  EXPECT_EQ(bytes_of(root + "/step_00000004/model.safetensors"), model_before);
  Trainer resumed(config(dir_ / "run", {"train.resume=must"}), quiet());
  EXPECT_EQ(resumed.steps_done(), 4);
  EXPECT_FALSE(fs::exists(root + "/.tmp-step_00000009-123"));
}

TEST_F(TrainerTest, ResumeWithNoCheckpointIsAClearError) {
  std::string e =
      error_of([&] { Trainer t(config(dir_ / "empty", {"train.resume=must"}), quiet()); });
  EXPECT_NE(e.find("no complete checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find(dir_ / "empty/checkpoints"), std::string::npos) << e;
  // "auto" starts fresh instead.
  Trainer t(config(dir_ / "empty", {"train.resume=auto"}), quiet());
  EXPECT_EQ(t.steps_done(), 0);
}

TEST_F(TrainerTest, FreshRunInADirectoryWithAnEarlierRunIsRefused) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=2", "checkpoint.every=1"}), quiet());
    t.run();
  }
  std::string e = error_of([&] { Trainer again(config(dir_ / "run"), quiet()); });
  EXPECT_NE(e.find("holds an earlier run"), std::string::npos) << e;
  EXPECT_NE(e.find("step 2"), std::string::npos) << e;
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  EXPECT_NE(e.find("--overwrite"), std::string::npos) << e;
  // Nothing of the earlier run was touched (keep_last would have pruned it before).
  EXPECT_EQ(list_checkpoints(dir_ / "run/checkpoints").size(), 2u);
}

TEST_F(TrainerTest, OverwriteStartsOverWhereAnEarlierRunWas) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=6", "checkpoint.every=2"}), quiet());
    t.run();
  }
  Trainer again(config(dir_ / "run", {"train.overwrite=true", "train.steps=2"}), quiet());
  EXPECT_EQ(again.steps_done(), 0);
  EXPECT_TRUE(list_checkpoints(dir_ / "run/checkpoints").empty());
  EXPECT_EQ(fs::file_size(dir_ / "run/metrics.jsonl"), 0u);  // the new run's, empty so far
}

TEST_F(TrainerTest, ASecondRunOnADirectoryInUseIsRefusedNamingTheHolder) {
  Trainer first(config(dir_ / "run"), quiet());
  std::string e =
      error_of([&] { Trainer second(config(dir_ / "run", {"train.resume=auto"}), quiet()); });
  EXPECT_NE(e.find("in use by another run"), std::string::npos) << e;
  EXPECT_NE(e.find("pid " + std::to_string(getpid())), std::string::npos) << e;
}

TEST_F(TrainerTest, ResumeOnAnotherLayoutOfTheSameGlobalBatchReadsTheSameData) {
  Trainer full(config(dir_ / "full", {"data.shuffle=false"}), quiet());
  full.run();
  fs::create_directories(dir_ / "resumed/checkpoints");
  fs::copy(dir_ / "full/checkpoints/step_00000004", dir_ / "resumed/checkpoints/step_00000004",
           fs::copy_options::recursive);
  // Four sequences per step as two micro-batches of two: the loader must go on from sequence 16,
  // not from micro-batch 4 of the new size (sequence 8).
  Trainer resumed(config(dir_ / "resumed", {"data.shuffle=false", "train.resume=must",
                                            "train.batch_size=2", "train.grad_accum=2"}),
                  quiet());
  resumed.run();
  double num = 0, den = 0;
  for (int64_t i = 0; i < full.num_params(); i++) {
    num = std::max(num, static_cast<double>(std::abs(full.params()[i] - resumed.params()[i])));
    den = std::max(den, static_cast<double>(std::abs(full.params()[i])));
  }
  EXPECT_LT(num / den, 1e-4);
}

TEST_F(TrainerTest, ResumeWithAnotherSeedOrDatasetIsRefusedAndAnotherRateReported) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=2"}), quiet());
    t.run();
  }
  std::string e = error_of([&] {
    Trainer r(config(dir_ / "run", {"train.resume=must", "train.seed=6"}), quiet());
  });
  EXPECT_NE(e.find("train.seed"), std::string::npos) << e;
  EXPECT_NE(e.find("--init-from"), std::string::npos) << e;
  e = error_of([&] {
    Trainer r(config(dir_ / "run", {"train.resume=must", "data.train=" + (dir_ / "train_000.bin")}),
              quiet());
  });
  EXPECT_NE(e.find("data.train"), std::string::npos) << e;
  EXPECT_NE(e.find("tokens"), std::string::npos) << e;
  ::testing::internal::CaptureStderr();
  Trainer r(config(dir_ / "run", {"train.resume=must", "train.lr=3e-3", "train.steps=3"}), quiet());
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.steps_done(), 2);
  EXPECT_NE(err.find("train.lr: 0.01 -> 0.003"), std::string::npos) << err;
}

TEST_F(TrainerTest, WeightsThatAreNotFiniteAreNeverCheckpointed) {
  Trainer t(config(dir_ / "run", {"train.steps=2"}), quiet());
  t.run();
  t.mutable_params()[3] = std::nanf("");
  try {
    t.save_checkpoint();
    FAIL() << "a checkpoint with NaN weights was written";
  } catch (const ExitCodeError& e) {
    EXPECT_EQ(e.code(), kExitNonFinite);
    EXPECT_NE(std::string(e.what()).find("step_00000002"), std::string::npos) << e.what();
  }
  EXPECT_EQ(latest_checkpoint(dir_ / "run/checkpoints")->step, 2);
}

TEST_F(TrainerTest, ResumeFromACheckpointWithNonFiniteWeightsIsRefused) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=2"}), quiet());
    t.run();
  }
  // Damage the stored weights: NaN in the first float of the data section.
  const std::string model = dir_ / "run/checkpoints/step_00000002/model.safetensors";
  std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  f.read(reinterpret_cast<char*>(&header), 8);
  const float nan = std::nanf("");
  f.seekp(static_cast<std::streamoff>(8 + header));
  f.write(reinterpret_cast<const char*>(&nan), 4);
  f.close();
  // Without its manifest (an earlier kiln's checkpoint), which would refuse the changed bytes.
  fs::remove(dir_ / "run/checkpoints/step_00000002/manifest.json");
  std::string e =
      error_of([&] { Trainer r(config(dir_ / "run", {"train.resume=must"}), quiet()); });
  EXPECT_NE(e.find("not finite"), std::string::npos) << e;
  EXPECT_NE(e.find("step_00000002"), std::string::npos) << e;
}

TEST_F(TrainerTest, ADivergingRunStopsAfterTheLimitWithoutACheckpoint) {
  // A rate no model survives: the loss is inf/NaN from the second step on.
  Trainer t(config(dir_ / "run", {"train.lr=1e30", "train.min_lr=0", "train.warmup_steps=0",
                                  "train.steps=40", "train.nonfinite_limit=3"}),
            quiet());
  try {
    t.run();
    FAIL() << "a diverged run finished";
  } catch (const ExitCodeError& e) {
    EXPECT_EQ(e.code(), kExitNonFinite);
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.nonfinite_limit = 3"), std::string::npos);
  }
  EXPECT_LT(t.steps_done(), 8);
  EXPECT_FALSE(latest_checkpoint(dir_ / "run/checkpoints"));
}

TEST_F(TrainerTest, ARunWhoseEveryStepIsSkippedFails) {
  {  // finite but enormous weights after one step at an absurd rate: every later loss is inf
    Trainer t(config(dir_ / "run", {"train.lr=1e30", "train.warmup_steps=0", "train.steps=1"}),
              quiet());
    t.run();
  }
  Trainer r(config(dir_ / "run",
                   {"train.lr=1e30", "train.warmup_steps=0", "train.resume=must", "train.steps=3"}),
            quiet());
  try {
    r.run();
    FAIL() << "a run that skipped every step succeeded";
  } catch (const ExitCodeError& e) {
    EXPECT_EQ(e.code(), kExitNonFinite);
    EXPECT_NE(std::string(e.what()).find("every step of this run"), std::string::npos) << e.what();
  }
}

TEST_F(TrainerTest, ResumeWithADifferentModelIsRefused) {
  {
    Trainer t(config(dir_ / "run", {"train.steps=1"}), quiet());
    t.run();
  }
  std::string e = error_of([&] {
    Trainer r(config(dir_ / "run", {"train.resume=must", "model.n_embd=64"}), quiet());
  });
  EXPECT_NE(e.find("model.n_embd"), std::string::npos) << e;
}

TEST_F(TrainerTest, InitFromATensorOfTheWrongShapeNamesIt) {
  Trainer t(config(dir_ / "run", {"train.steps=1"}), quiet());
  t.run();
  std::string e = error_of([&] {
    Trainer r(
        config(dir_ / "other",
               {"model.block_size=64",
                "train.init_from=" + (dir_ / "run/checkpoints/step_00000001/model.safetensors")}),
        quiet());
  });
  EXPECT_NE(e.find("wpe.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("(32, 32)"), std::string::npos) << e;
}

TEST_F(TrainerTest, InitFromKilnCheckpointReproducesItsWeights) {
  Trainer t(config(dir_ / "run", {"train.steps=2"}), quiet());
  t.run();
  Trainer r(config(dir_ / "other", {"train.init_from=" +
                                    (dir_ / "run/checkpoints/step_00000002/model.safetensors")}),
            quiet());
  EXPECT_TRUE(same_bits(t, r));
}

TEST_F(TrainerTest, ZeroTwoHoldsOnlyTheGradientBucketsInFlight) {
  // Eight blocks in small buckets: after its reduction each bucket's pages go back to the kernel.
  auto sets = std::vector<std::string>{"model.n_layer=8", "model.n_embd=64", "train.zero=2",
                                       "train.bucket_mb=0.02", "train.steps=2"};
  Trainer z2(config(dir_ / "z2", sets), quiet());
  sets[2] = "train.zero=0";
  Trainer z0(config(dir_ / "z0", sets), quiet());
  for (int s = 0; s < 2; s++) {
    StepResult a = z2.step(), b = z0.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * b.loss);
  }
  // The full-size gradient buffer is a working buffer under ZeRO-2: at most part of it resident.
  const int64_t full = z0.memory().grads;
  EXPECT_GT(z2.memory().working, 0);
  EXPECT_LT(z2.memory().working, full / 2)
      << "ZeRO-2 held " << z2.memory().working << " of " << full;
}

TEST_F(TrainerTest, ZeroThreeHoldsParametersOnlyWhileTheyAreUsed) {
  // Many blocks, a small vocabulary: the embedding (always present during a step) is a small
  // part, so holding one or two blocks at a time is far below the whole model.
  auto sets =
      std::vector<std::string>{"model.n_layer=8",      "model.n_embd=64", "train.zero=3",
                               "train.bucket_mb=0.02", "train.steps=2",   "train.val_every=1"};
  Trainer z3(config(dir_ / "z3", sets), quiet());
  sets[2] = "train.zero=0";
  Trainer z0(config(dir_ / "z0", sets), quiet());
  for (int s = 0; s < 2; s++) {
    StepResult a = z3.step(), b = z0.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * b.loss);
  }
  EXPECT_NEAR(z3.validate(), z0.validate(), 1e-6);
  // One rank: its shard (the master copy AdamW updates) is the whole model; what ZeRO-3 saves
  // is in the working copies of the parameters and gradients, held only while in use: both
  // together stay below one full copy.
  const int64_t full = z0.memory().params;
  EXPECT_EQ(z3.memory().params, full);
  EXPECT_GT(z3.memory().working, 0);
  EXPECT_LT(z3.memory().working, full)
      << "ZeRO-3 held working buffers of " << z3.memory().working << " against " << full;
}

// ---- bf16 and recompute --------------------------------------------------------------------

// Mean loss of the last five of `steps` steps.
double final_loss(Trainer& t, int steps) {
  double last = 0;
  for (int i = 0; i < steps; i++) {
    double l = t.step().loss;
    if (i >= steps - 5) last += l / 5;
  }
  return last;
}

TEST_F(TrainerTest, Bf16TrainingEndsWithinTwoPercentOfFp32) {
  Trainer fp32(config(dir_ / "fp32", {"train.steps=40"}), quiet());
  Trainer bf16(config(dir_ / "bf16", {"train.steps=40", "train.dtype=bf16"}), quiet());
  const double first = 4.605;  // ln(100): the loss before any learning
  const double a = final_loss(fp32, 40), b = final_loss(bf16, 40);
  EXPECT_LT(a, first - 1.0);
  EXPECT_LT(std::fabs(b - a), 0.02 * a) << "fp32 " << a << ", bf16 " << b;
  EXPECT_FALSE(same_bits(fp32, bf16)) << "the bf16 run took the fp32 path";
}

TEST_F(TrainerTest, Bf16GivesTheSameBitsAcrossRunsAndThreadCounts) {
  auto run = [&](const std::string& name, const std::string& threads) {
    auto t = std::make_unique<Trainer>(
        config(dir_ / name, {"train.dtype=bf16", "train.threads=" + threads}), quiet());
    for (int i = 0; i < 4; i++) t->step();
    return t;
  };
  auto a = run("a", "2"), b = run("b", "2"), c = run("c", "1");
  EXPECT_TRUE(same_bits(*a, *b)) << "two runs with 2 threads differ";
  // Without bf16 instructions the products run in fp32 (kernels/matmul.h), whose bits depend on
  // the thread count.
  if (matmul_bf16_native()) {
    EXPECT_TRUE(same_bits(*a, *c)) << "1 thread and 2 threads differ";
  }
  // The weight copy AdamW wrote as it updated is the bf16 of the updated parameters.
  std::vector<bf16> want(a->num_params());
  to_bf16(want.data(), a->params(), a->num_params());
  EXPECT_EQ(std::memcmp(want.data(), a->model().weight_copy(), want.size() * sizeof(bf16)), 0);
}

TEST_F(TrainerTest, RecomputeTrainsToTheSameBits) {
  for (std::string dtype : {"fp32", "bf16"}) {
    auto run = [&](const std::string& recompute) {
      auto t = std::make_unique<Trainer>(
          config(dir_ / (dtype + recompute),
                 {"train.dtype=" + dtype, "train.recompute=" + recompute, "train.grad_accum=2"}),
          quiet());
      for (int i = 0; i < 3; i++) t->step();
      return t;
    };
    auto none = run("none"), att = run("attention"), full = run("full");
    EXPECT_TRUE(same_bits(*none, *att)) << dtype;
    EXPECT_TRUE(same_bits(*none, *full)) << dtype;
    EXPECT_LT(full->model().activation_breakdown().kept, none->model().activation_breakdown().kept);
  }
}

// A learning rate of 1e30 makes the weights huge after one step; the next forward overflows. That
// step and the ones after are skipped and counted, and leave the weights as they were.
TEST_F(TrainerTest, NonFiniteLossSkipsTheStep) {
  for (std::string dtype : {"fp32", "bf16"}) {
    Trainer t(config(dir_ / dtype, {"train.dtype=" + dtype, "train.lr=1e30", "train.min_lr=1e30",
                                    "train.warmup_steps=0", "train.grad_clip=0"}),
              quiet());
    StepResult first = t.step();
    ASSERT_FALSE(first.skipped) << dtype;
    std::vector<float> before(t.params(), t.params() + t.num_params());
    StepResult second = t.step();
    EXPECT_TRUE(second.skipped) << dtype << ": loss " << second.loss;
    EXPECT_FALSE(std::isfinite(second.loss) && std::isfinite(second.grad_norm));
    EXPECT_EQ(std::memcmp(before.data(), t.params(), before.size() * sizeof(float)), 0) << dtype;
    EXPECT_EQ(t.steps_done(), 2);
  }
}

TEST(TrainConfigTest, DtypeAndRecomputeValuesAreChecked) {
  std::string base = "[model]\nn_layer=1\nn_head=1\nn_embd=8\nblock_size=8\nvocab_size=10\n";
  std::string e = error_of([&] {
    parse_train_config(base, "c.toml", {"train.seq_len=8", "train.dtype=fp16"});
  });
  EXPECT_NE(e.find("train.dtype"), std::string::npos) << e;
  EXPECT_NE(e.find("bf16"), std::string::npos) << e;
  e = error_of([&] {
    parse_train_config(base, "c.toml", {"train.seq_len=8", "train.recompute=some"});
  });
  EXPECT_NE(e.find("train.recompute"), std::string::npos) << e;
  e = error_of([&] {
    parse_train_config(base, "c.toml", {"train.seq_len=8", "train.attention=fast"});
  });
  EXPECT_NE(e.find("train.attention"), std::string::npos) << e;
  // bf16 with ZeRO-3 (once refused) is accepted: the copy is made as ranges are gathered.
  EXPECT_EQ(
      parse_train_config(base, "c.toml", {"train.seq_len=8", "train.dtype=bf16", "train.zero=3"})
          .zero,
      3);
  TrainConfig c = parse_train_config(
      base, "c.toml", {"train.seq_len=8", "train.dtype=bf16", "train.recompute=full"});
  EXPECT_EQ(c.dtype, "bf16");
  EXPECT_EQ(c.recompute, "full");
}

TEST(TrainConfigTest, UnknownKeyNamesTheKeyAndTheFileAndSuggests) {
  std::string e =
      error_of([] { parse_train_config("[train]\nlearning_rate = 1e-3\n", "configs/x.toml", {}); });
  EXPECT_NE(e.find("configs/x.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("train.learning_rate"), std::string::npos) << e;
  e = error_of([] { parse_train_config("[train]\nbatch_sise = 4\n", "c.toml", {}); });
  EXPECT_NE(e.find("did you mean 'train.batch_size'"), std::string::npos) << e;
}

TEST(TrainConfigTest, WrongTypeAndBadOverrideAreErrors) {
  std::string base = "[model]\nn_layer=1\nn_head=1\nn_embd=8\nblock_size=8\nvocab_size=10\n";
  std::string e =
      error_of([&] { parse_train_config(base + "[train]\nsteps = \"ten\"\n", "c.toml", {}); });
  EXPECT_NE(e.find("train.steps"), std::string::npos) << e;
  EXPECT_NE(e.find("integer"), std::string::npos) << e;
  e = error_of([&] { parse_train_config(base, "c.toml", {"train.stepz=3"}); });
  EXPECT_NE(e.find("train.stepz"), std::string::npos) << e;
  e = error_of([&] { parse_train_config(base, "c.toml", {"train.seq_len=16"}); });
  EXPECT_NE(e.find("model.block_size"), std::string::npos) << e;
  TrainConfig c =
      parse_train_config(base, "c.toml", {"train.seq_len=8", "train.lr=0.5", "train.out_dir=x/y"});
  EXPECT_EQ(c.lr, 0.5);
  EXPECT_EQ(c.out_dir, "x/y");
}

// checkpoint.async's copy of what rank 0 writes counts in the start-up memory check: a config
// that fits with synchronous saves is refused with async ones when the copy does not fit, and
// the message says so.
TEST(TrainConfigTest, TheMemoryCheckCountsTheAsyncCheckpointCopy) {
  const std::string base =
      "[model]\nn_layer=2\nn_head=4\nn_embd=256\nblock_size=16\nvocab_size=256\n"
      "[train]\nbatch_size=1\nseq_len=16\n";
  TrainConfig sync = parse_train_config(base, "c.toml", {});
  TrainConfig async = parse_train_config(base, "c.toml", {"checkpoint.async=true"});
  const double params = static_cast<double>(param_layout(sync.model).total);
  // Fits: 16 bytes a parameter of state and 6 more (well above this micro-batch's activations);
  // not the copy's 12 more.
  const double memory = params * 22;
  EXPECT_NO_THROW(check_memory_fits(sync, memory));
  const std::string e = error_of([&] { check_memory_fits(async, memory); });
  EXPECT_NE(e.find("for checkpoint.async's copy"), std::string::npos) << e;
  EXPECT_NE(e.find("set checkpoint.async = false"), std::string::npos) << e;
  // With ZeRO-1 the copy is the weights only (each rank's optimizer shard is not counted).
  TrainConfig zero1 = parse_train_config(base, "c.toml", {"checkpoint.async=true", "train.zero=1"});
  EXPECT_NO_THROW(check_memory_fits(zero1, params * (8 + 4 + 6)));
}

TEST(LearningRate, WarmupThenCosineToMin) {
  TrainConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 4;
  c.steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 4), 1.0);
  EXPECT_NEAR(learning_rate(c, 9), 0.55, 1e-12);  // half-way through the decay
  EXPECT_GT(learning_rate(c, 13), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 14), 0.1);
}

}  // namespace
}  // namespace kiln
