// Every bad input is refused: a message naming the key or the file, a non-zero exit below 128
// (no signal) and no hang. The bulk (every numeric config key x NaN, inf, -inf, negative, zero,
// huge, wrong types; as a TOML value and as --set) runs in-process through parse_train_config
// and check_memory_fits, the same calls `kiln train` makes first; a row per key and the file,
// --set, generate and tokenize rows run the kiln binary, each under `timeout 60`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/exit_codes.h"
#include "data/shards.h"
#include "model/gpt2.h"
#include "test_util.h"
#include "train/config.h"
#include "train/hf_weights.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::run_command;
using kiln::testing::RunResult;
using kiln::testing::TempDir;

// A word for the shell, whatever it holds (newlines included).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `kiln <args>` under `timeout 60`: a hang shows as exit code 124 and fails the caller's checks.
RunResult run_kiln_bounded(const std::string& args, const std::string& stdin_text = "") {
  std::string cmd = "timeout 60 " + std::string(KILN_BIN) + " " + args;
  if (!stdin_text.empty()) cmd = "printf '%s' " + quoted(stdin_text) + " | " + cmd;
  return run_command(cmd);
}

// Refused the way a user should see it: our own exit code, no signal, no timeout.
void expect_refused(const RunResult& r, int code, const std::string& names,
                    const std::string& what) {
  EXPECT_EQ(r.exit_code, code) << what << "\n" << r.output;
  EXPECT_LT(r.exit_code, 128) << what << ": ended by a signal\n" << r.output;
  EXPECT_NE(r.exit_code, 124) << what << ": timed out\n" << r.output;
  EXPECT_NE(r.output.find(names), std::string::npos)
      << what << ": the message does not name " << names << "\n"
      << r.output;
}

// A valid config: each key's value as TOML text, by "section.key".
std::map<std::string, std::string> base_values() {
  return {{"model.n_layer", "2"},
          {"model.n_head", "2"},
          {"model.n_embd", "32"},
          {"model.block_size", "32"},
          {"model.vocab_size", "257"},
          {"train.batch_size", "2"},
          {"train.seq_len", "16"},
          {"train.steps", "10"},
          {"train.lr", "1e-3"},
          {"train.min_lr", "1e-4"},
          {"train.out_dir", "\"/nonexistent/run\""},
          {"data.train", "\"/nonexistent/*.bin\""}};
}

std::string render(const std::map<std::string, std::string>& values) {
  std::map<std::string, std::string> sections;
  for (const auto& [name, value] : values) {
    auto dot = name.find('.');
    sections[name.substr(0, dot)] += name.substr(dot + 1) + " = " + value + "\n";
  }
  std::string out;
  for (const auto& [section, body] : sections) out += "[" + section + "]\n" + body;
  return out;
}

// What `kiln train` checks before it starts, on a machine of 64 GiB (so that the outcome does
// not depend on this one's): the message, or "" if the config is accepted.
constexpr double kMachineBytes = 64.0 * 1024 * 1024 * 1024;
std::string check_error(const std::string& text, const std::vector<std::string>& sets) {
  return error_of([&] {
    TrainConfig c = parse_train_config(text, "c.toml", sets);
    check_memory_fits(c, kMachineBytes);
  });
}

enum Outcome { kRefused, kAccepted };
const char* outcome_name(Outcome o) {
  return o == kRefused ? "refused" : "accepted";
}

// Every numeric key: whether a negative, zero and huge value is accepted. NaN, inf, -inf and
// values of the wrong type (string, bool, table, array) are refused for every key. "Huge" is
// 1e300 for floating-point keys and 2^31 - 1 for integer ones (and 99999999999, past int32, is
// refused for every int32 key).
struct KeyRow {
  const char* key;
  bool integer;
  Outcome negative, zero, huge;
};
const KeyRow kKeys[] = {
    {"model.n_layer", true, kRefused, kRefused, kRefused},     // parameter limit
    {"model.n_head", true, kRefused, kRefused, kRefused},      // n_embd % n_head
    {"model.n_embd", true, kRefused, kRefused, kRefused},      // n_embd % n_head
    {"model.block_size", true, kRefused, kRefused, kRefused},  // memory (wpe)
    {"model.vocab_size", true, kRefused, kRefused, kRefused},  // uint16 shards
    {"model.vocab_multiple", true, kRefused, kRefused, kRefused},
    // The Llama keys, on this GPT-2 config: a GPT-2 has no kv-heads nor ffn_hidden (0: unset).
    {"model.n_kv_head", true, kRefused, kAccepted, kRefused},
    {"model.ffn_hidden", true, kRefused, kAccepted, kRefused},
    {"model.norm_eps", false, kRefused, kRefused, kAccepted},
    {"model.rope_theta", false, kRefused, kRefused, kAccepted},
    {"model.rope_factor", false, kRefused, kRefused, kRefused},  // float: 1e300 is out of range
    {"model.rope_low_freq_factor", false, kRefused, kRefused, kRefused},
    {"model.rope_high_freq_factor", false, kRefused, kRefused, kRefused},  // > low_freq_factor
    {"model.rope_original_max_position", true, kRefused, kRefused, kAccepted},
    {"train.batch_size", true, kRefused, kRefused, kRefused},  // memory (activations)
    {"train.seq_len", true, kRefused, kRefused, kRefused},     // > block_size
    {"train.grad_accum", true, kRefused, kRefused, kAccepted},
    {"train.steps", true, kRefused, kRefused, kAccepted},
    {"train.warmup_steps", true, kRefused, kAccepted, kAccepted},
    {"train.seed", true, kAccepted, kAccepted, kAccepted},
    {"train.threads", true, kRefused, kAccepted, kRefused},  // 0: the cores; at most 1024
    {"train.zero", true, kRefused, kAccepted, kRefused},     // stages 0..3
    {"train.val_every", true, kRefused, kAccepted, kAccepted},
    {"train.val_batches", true, kRefused, kRefused, kAccepted},
    {"train.log_every", true, kRefused, kRefused, kAccepted},
    {"train.sample_tokens", true, kRefused, kAccepted, kAccepted},
    {"checkpoint.every", true, kRefused, kAccepted, kAccepted},
    {"checkpoint.keep_last", true, kRefused, kAccepted, kAccepted},
    {"train.nonfinite_limit", true, kRefused, kAccepted, kAccepted},  // 0: never stop
    {"train.lr", false, kRefused, kRefused, kAccepted},  // 0 < min_lr: the decay cannot go up
    {"train.min_lr", false, kRefused, kAccepted, kRefused},
    {"train.weight_decay", false, kRefused, kAccepted, kAccepted},
    {"train.beta1", false, kRefused, kAccepted, kRefused},  // [0, 1)
    {"train.beta2", false, kRefused, kAccepted, kRefused},
    {"train.eps", false, kRefused, kRefused, kAccepted},  // 0 gives 0/0 on zero gradients
    {"train.grad_clip", false, kRefused, kAccepted, kAccepted},
    {"train.bucket_mb", false, kRefused, kRefused, kRefused},  // (0, 1e6]
    {"train.watchdog_seconds", false, kRefused, kAccepted, kAccepted},
    {"hardware.peak_gflops", false, kRefused, kAccepted, kAccepted},
    {"parallel.dp", true, kRefused, kAccepted, kAccepted},  // 0: world / (tp x pp)
    {"parallel.tp", true, kRefused, kRefused, kRefused},    // only 1 so far
    {"parallel.pp", true, kRefused, kRefused, kRefused},
    {"parallel.virtual_stages", true, kRefused, kRefused, kRefused},  // > 1: interleaved only
};

TEST(BadInput, TheTableCoversEveryNumericConfigKey) {
  nlohmann::json j = TrainConfig().to_json();
  for (auto& [section, keys] : j.items())
    for (auto& [key, value] : keys.items()) {
      if (!value.is_number()) continue;
      std::string name = section + "." + key;
      bool found = false;
      for (const auto& row : kKeys) found |= name == row.key;
      EXPECT_TRUE(found) << name << " is missing from kKeys";
    }
}

TEST(BadInput, EveryNumericKeyRefusesNonFiniteNegativeZeroHugeAndWrongTypesNamingTheKey) {
  const auto base = base_values();
  for (const auto& row : kKeys) {
    std::vector<std::pair<std::string, Outcome>> cases = {
        {"nan", kRefused},
        {"inf", kRefused},
        {"-inf", kRefused},
        {"\"fast\"", kRefused},
        {"true", kRefused},
        {"{ a = 1 }", kRefused},
        {"[1, 2]", kRefused},
        {row.integer ? "-1" : "-0.5", row.negative},
        {row.integer ? "0" : "0.0", row.zero},
        {row.integer ? "2147483647" : "1e300", row.huge},
    };
    if (row.integer)
      cases.push_back({"99999999999", std::string(row.key) == "train.seed" ? kAccepted : kRefused});
    for (const auto& [value, outcome] : cases) {
      // As a value in the TOML file, and as --set on a file without the key.
      auto in_file = base;
      in_file[row.key] = value;
      auto without = base;
      without.erase(row.key);
      for (bool by_set : {false, true}) {
        std::string what = std::string(row.key) + " = " + value + (by_set ? " (--set)" : "");
        std::string err = by_set
                              ? check_error(render(without), {std::string(row.key) + "=" + value})
                              : check_error(render(in_file), {});
        if (outcome == kAccepted) {
          EXPECT_EQ(err, "") << what << " should be " << outcome_name(outcome);
        } else {
          EXPECT_NE(err, "") << what << " should be " << outcome_name(outcome);
          EXPECT_NE(err.find(row.key), std::string::npos)
              << what << ": the message does not name the key: " << err;
        }
      }
    }
  }
}

class BadInputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = dir_ / "c.toml";
    std::ofstream(config_) << render(base_values());
  }
  TempDir dir_;
  std::string config_;
};

TEST_F(BadInputCli, KilnTrainRefusesNanForEveryNumericKeyWithTheBadInputCode) {
  for (const auto& row : kKeys) {
    auto r = run_kiln_bounded("train " + config_ + " --check --set " + row.key + "=nan");
    expect_refused(r, kExitBadInput, row.key, std::string(row.key) + "=nan");
  }
  // And from the file: the message names the file and the key.
  std::ofstream(dir_ / "nan.toml") << render(base_values()) << "[hardware]\npeak_gflops = -inf\n";
  auto r = run_kiln_bounded("train " + (dir_ / "nan.toml") + " --check");
  expect_refused(r, kExitBadInput, "hardware.peak_gflops", "peak_gflops = -inf");
  EXPECT_NE(r.output.find(dir_ / "nan.toml"), std::string::npos) << r.output;
}

TEST_F(BadInputCli, CheckAcceptsZeroWhereZeroMeansOffAndPrintsTheResolvedConfig) {
  auto r = run_kiln_bounded("train " + config_ +
                            " --check --set train.grad_clip=0 --set train.watchdog_seconds=0 "
                            "--set train.threads=0 --set checkpoint.keep_last=0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["train"]["watchdog_seconds"], 0.0);
  EXPECT_EQ(j["checkpoint"]["keep_last"], 0);
  EXPECT_FALSE(fs::exists("/nonexistent/run"));  // --check starts nothing
}

TEST_F(BadInputCli, ConfigFileThatIsNotATomlFileIsNamedWithWhatItIs) {
  fs::create_directory(dir_ / "dir.toml");
  ASSERT_EQ(mkfifo((dir_ / "fifo.toml").c_str(), 0600), 0);
  std::ofstream(dir_ / "empty.toml");
  std::ofstream(dir_ / "comments.toml") << "# nothing but a comment\n";
  std::ofstream(dir_ / "truncated.toml") << render(base_values()).substr(0, 30);
  std::ofstream(dir_ / "garbage.toml", std::ios::binary) << std::string(
      "\x7f"
      "ELF\x02\x01\x01\0\0\xff\xfe[model\0\x80\x81",
      20);
  struct Row {
    std::string path, says;
  };
  const Row rows[] = {
      {dir_ / "missing.toml", "No such file"},
      {dir_ / "dir.toml", "is a directory"},
      {dir_ / "fifo.toml", "empty"},  // a named pipe with no writer: read as empty, no hang
      {dir_ / "empty.toml", "empty"},
      {dir_ / "comments.toml", "empty"},
      {"/dev/null", "character device"},
      {dir_ / "truncated.toml", "truncated.toml:"},
      {dir_ / "garbage.toml", "garbage.toml:"},
  };
  for (const auto& row : rows) {
    auto r = run_kiln_bounded("train " + quoted(row.path));
    expect_refused(r, kExitBadInput, row.path, row.path);
    EXPECT_NE(r.output.find(row.says), std::string::npos) << row.path << "\n" << r.output;
  }
  // A pipe with a writer is a config like any other (`kiln train <(make-config)`).
  auto r =
      run_command("cat " + config_ + " | timeout 60 " + KILN_BIN + " train /dev/stdin --check");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(BadInputCli, SetWithAControlCharacterIsRefusedNotCutShort) {
  // Before: the newline ended the TOML value and train.steps=5 was silently dropped.
  auto r = run_kiln_bounded("train " + config_ + " --check --set " +
                            quoted("train.lr=1e-3\ntrain.steps=5"));
  expect_refused(r, kExitBadInput, "train.lr", "newline in a --set value");
  EXPECT_NE(r.output.find("control character"), std::string::npos) << r.output;
  r = run_kiln_bounded("train " + config_ + " --check --set " + quoted("train.out_dir=runs/a\nb"));
  expect_refused(r, kExitBadInput, "train.out_dir", "newline in a path");
  r = run_kiln_bounded("train " + config_ + " --check --set " + quoted("train.st\teps=5"));
  expect_refused(r, kExitBadInput, "control character", "tab in a --set key");
  // A TOML comment after the value is still one value.
  r = run_kiln_bounded("train " + config_ + " --check --set " + quoted("train.steps=7 # seven"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["train"]["steps"], 7);
}

TEST_F(BadInputCli, ABatchThatCannotFitSaysHowMuchMemoryAndWhy) {
  // Before: a bare std::bad_alloc. 2^31 - 1 sequences need petabytes on any machine.
  auto r = run_kiln_bounded("train " + config_ + " --set train.batch_size=2147483647");
  expect_refused(r, kExitBadInput, "train.batch_size = 2147483647", "huge batch");
  EXPECT_NE(r.output.find("iB of activations"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of memory here"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train.recompute"), std::string::npos) << r.output;
  // The process's own limit counts as this machine's memory: 2 GiB of activations under
  // `ulimit -v` of 1 GB is refused up front, not met with a bad_alloc (or an OOM kill) later.
  r = run_command("ulimit -v 1000000 && timeout 60 " + std::string(KILN_BIN) + " train " + config_ +
                  " --check --set train.batch_size=20000");
  expect_refused(r, kExitBadInput, "train.batch_size = 20000", "activations above ulimit -v");
  EXPECT_NE(r.output.find("976.6 MiB of memory here"), std::string::npos) << r.output;
}

TEST_F(BadInputCli, MetricsPortOutsideTcpsRangeIsRefusedNamingTheOption) {
  // Before: 70000 bound port 4464 (70000 mod 65536) and printed 70000; -5 silently served none.
  struct Row {
    std::string command, args, names;
  };
  const Row rows[] = {
      {"train", "--metrics-port 70000", "--metrics-port 70000"},
      {"train", "--metrics-port 65536", "--metrics-port 65536"},
      {"train", "--metrics-port -5", "--metrics-port -5"},
      {"train", "--metrics-port=-1", "--metrics-port -1"},  // "off" is not a port
      {"launch -n 1", "--metrics-port 70000", "--metrics-port 70000"},
      {"launch -n 1", "--metrics-port=-5", "--metrics-port -5"},
  };
  for (const auto& row : rows) {
    auto r = run_kiln_bounded(row.command + " " + config_ + " " + row.args);
    expect_refused(r, kExitBadInput, row.names, row.command + " " + row.args);
    EXPECT_NE(r.output.find("0 (any free port) to 65535"), std::string::npos) << r.output;
  }
}

TEST(MetricsHost, AnIpv6HostPrintsABracketedUrl) {
  // Before: "metrics at http://::1:PORT/metrics", which no client parses.
  TempDir dir;
  std::vector<uint16_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = static_cast<uint16_t>(i % 200);
  write_shard(dir / "train.bin", tokens);
  auto values = base_values();
  values["data.train"] = "\"" + (dir / "train.bin") + "\"";
  values["train.out_dir"] = "\"" + (dir / "run") + "\"";
  values["train.steps"] = "1";
  values["train.val_every"] = "0";
  values["train.sample_tokens"] = "0";
  values["hardware.peak_gflops"] = "100.0";
  std::ofstream(dir / "c.toml") << render(values);
  auto r = run_kiln_bounded("train " + (dir / "c.toml") + " --metrics-host ::1 --metrics-port 0");
  if (r.exit_code != 0 && r.output.find("cannot listen on [::1]") != std::string::npos)
    GTEST_SKIP() << "no IPv6 loopback here (metrics_url is unit-tested in prometheus_test)";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics at http://[::1]:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("http://::1"), std::string::npos) << r.output;
}

// A checkpoint of a tiny model (zero weights), enough for generate's checks.
std::string write_tiny_checkpoint(const std::string& dir) {
  const ModelConfig c = gpt2_config(1, 2, 8, 8, 257);
  ParamLayout layout = gpt2_param_layout(c);
  std::vector<float> params(layout.total, 0.0f);
  fs::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", named_tensors(layout, c, params.data()),
                    {{"format", "pt"}});
  std::ofstream(dir + "/config.json") << hf_config(c).dump(2);
  return dir;
}

TEST_F(BadInputCli, GenerateRefusesBadSamplingOptionsNamingThem) {
  std::string ck = write_tiny_checkpoint(dir_ / "ck");
  auto ok = run_kiln_bounded("generate --checkpoint " + ck + " --ids --max-new-tokens 3");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  struct Row {
    std::string args, names;
  };
  const Row rows[] = {
      {"--temperature nan", "--temperature"},
      {"--temperature inf", "--temperature"},
      {"--temperature=-1", "--temperature"},
      {"--top-k=-1", "--top-k"},
      {"--top-k 1000", "--top-k"},  // more than the 257 tokens
      {"--max-new-tokens=-5", "--max-new-tokens"},
      {"--threads 100000", "--threads"},
      {"--threads=-1", "--threads"},
      {"--prompt-ids 5,257", "257"},  // outside the vocabulary
      {"--prompt-ids=-1", "-1"},
      {"--prompt-ids 1,2,3,4,5,6 --max-new-tokens 3", "positions"},  // 9 > block_size 8
  };
  for (const auto& row : rows) {
    auto r = run_kiln_bounded("generate --checkpoint " + ck + " --ids " + row.args);
    expect_refused(r, kExitFailure, row.names, row.args);
  }
}

TEST_F(BadInputCli, TokenizeDecodeRefusesIdsOutsideTheVocabularyInsteadOfWrapping) {
  auto r = run_kiln_bounded("tokenize --tokenizer bytes --decode", "72 105 256");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "Hi<|endoftext|>");
  // Before: 4294967296 wrapped modulo 2^32 to token 0, which GPT-2 decodes as "!".
  r = run_kiln_bounded("tokenize --tokenizer gpt2 --decode", "4294967296");
  expect_refused(r, kExitFailure, "4294967296", "gpt2 --decode 4294967296");
  for (std::string id : {"4294967296", "4294967329", "257", "-1", "99999999999999999999999"}) {
    r = run_kiln_bounded("tokenize --tokenizer bytes --decode", "72 " + id);
    expect_refused(r, kExitFailure, id, "--decode " + id);
    EXPECT_NE(r.output.find("vocabulary"), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace kiln
