#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "data/shards.h"

namespace fs = std::filesystem;

namespace kiln::cli {
namespace {

constexpr int kBytesEot = 256;  // the byte tokenizer's end-of-text token; its vocabulary is 257

struct PrepareOpts {
  std::string tokenizer = "bytes";
  std::vector<std::string> inputs;
  std::string output;
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
};

void write_split(const std::string& dir, const std::string& split, const std::vector<uint16_t>& t,
                 int64_t per_shard, nlohmann::json& manifest) {
  nlohmann::json files = nlohmann::json::array();
  for (int64_t i = 0, k = 0; i < static_cast<int64_t>(t.size()); i += per_shard, k++) {
    int64_t end = std::min<int64_t>(t.size(), i + per_shard);
    std::string name = fmt::format("{}_{:06d}.bin", split, k);
    write_shard((fs::path(dir) / name).string(),
                std::vector<uint16_t>(t.begin() + i, t.begin() + end));
    files.push_back({{"file", name}, {"tokens", end - i}});
  }
  manifest[split] = {{"tokens", t.size()}, {"shards", files}};
}

void prepare(const PrepareOpts& o) {
  if (o.tokenizer != "bytes")
    fail(
        "--tokenizer {}: this build knows the 'bytes' tokenizer (vocabulary 257: one token per "
        "byte, 256 = end of text)",
        o.tokenizer);
  if (o.val_fraction < 0 || o.val_fraction >= 1)
    fail("--val-fraction must be in [0, 1), got {}", o.val_fraction);
  std::vector<std::string> files;
  for (const auto& in : o.inputs) {
    if (fs::is_directory(in)) {
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file()) files.push_back(e.path().string());
    } else {
      files.push_back(in);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) fail("--input names no files");
  std::vector<uint16_t> tokens;
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& f : files) {
    std::string text = read_file(f, "input");
    tokens.push_back(kBytesEot);  // every document starts with end-of-text, as in GPT-2 data
    for (unsigned char c : text) tokens.push_back(c);
    sources.push_back({{"path", f}, {"bytes", text.size()}});
  }
  if (tokens.size() < 2) fail("the input holds no text");
  int64_t n_val = static_cast<int64_t>(tokens.size() * o.val_fraction);
  std::vector<uint16_t> train(tokens.begin(), tokens.end() - n_val);
  std::vector<uint16_t> val(tokens.end() - n_val, tokens.end());
  fs::create_directories(o.output);
  nlohmann::json manifest = {{"tokenizer", "bytes"}, {"vocab_size", 257}, {"sources", sources}};
  write_split(o.output, "train", train, o.shard_tokens, manifest);
  if (!val.empty()) write_split(o.output, "val", val, o.shard_tokens, manifest);
  write_file_atomic((fs::path(o.output) / "manifest.json").string(), manifest.dump(2) + "\n");
  fmt::print("{} files, {} tokens: {} train, {} val -> {}\n", files.size(), tokens.size(),
             train.size(), val.size(), o.output);
}

}  // namespace

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  auto* prep = data->add_subcommand("prepare", "Tokenize text files into token shards");
  auto o = std::make_shared<PrepareOpts>();
  prep->add_option("--tokenizer", o->tokenizer, "tokenizer: bytes")->capture_default_str();
  prep->add_option("--input", o->inputs, "text files or directories")->required();
  prep->add_option("--output", o->output, "output directory")->required();
  prep->add_option("--val-fraction", o->val_fraction, "share of tokens held out for validation")
      ->capture_default_str();
  prep->add_option("--shard-tokens", o->shard_tokens, "tokens per shard")->capture_default_str();
  prep->callback([o]() { prepare(*o); });
}

}  // namespace kiln::cli
