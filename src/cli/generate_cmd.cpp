#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/safetensors.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file.h"
#include "data/tokenizer.h"
#include "kernels/matmul.h"
#include "model/sampler.h"
#include "train/config.h"
#include "train/hf_weights.h"
#include "train/model_dir.h"

namespace fs = std::filesystem;

namespace kiln::cli {
namespace {

struct GenerateOpts {
  std::string checkpoint;
  std::string prompt;
  std::string tokenizer;
  bool ids = false;
  int max_new_tokens = 64;
  double temperature = 1.0;
  int top_k = 0;
  int64_t seed = 1337;
  std::string prompt_ids;
  int threads = 0;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used;
      out.push_back(std::stoi(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      fail("--prompt-ids: '{}' is not a token id (expected e.g. 50256,464,3290)", item);
    }
  }
  return out;
}

// The options that need no checkpoint, checked before it is read.
void check_options(const GenerateOpts& o) {
  if (!std::isfinite(o.temperature) || o.temperature < 0)
    fail("--temperature {}: must be a finite number, 0 (greedy) or more", o.temperature);
  if (o.top_k < 0) fail("--top-k {}: must be 0 (all tokens) or more", o.top_k);
  if (o.max_new_tokens < 0) fail("--max-new-tokens {}: must be 0 or more", o.max_new_tokens);
  if (o.threads < 0 || o.threads > kMaxThreads)
    fail("--threads {}: must be 0 (all cores) to {}", o.threads, kMaxThreads);
}

void generate(const GenerateOpts& o) {
  check_options(o);
  set_num_threads(o.threads);
  // A run directory or its checkpoints folder resolves to the newest checkpoint in it.
  const std::string dir = resolve_model_dir(o.checkpoint, "--checkpoint");
  LoadedModel model = load_model_dir(dir);
  const ModelConfig& c = model.config;
  Buffer<float>& params = model.params;

  // The tokenizer the run was trained with, from its trainer state; else by vocabulary size.
  std::string tok_name = o.tokenizer;
  if (tok_name.empty()) {
    std::string state_path = (fs::path(dir) / "trainer_state.json").string();
    if (fs::exists(state_path)) {
      auto st = nlohmann::json::parse(read_file(state_path, "trainer state"), nullptr, false);
      if (!st.is_discarded() && st.contains("config") && st["config"].contains("data"))
        tok_name = st["config"]["data"].value("tokenizer", "");
    }
    if (tok_name.empty())
      tok_name = c.vocab_size == 257      ? "bytes"
                 : c.vocab_size >= 128256 ? "llama3"
                 : c.vocab_size >= 100277 ? "cl100k"
                                          : "gpt2";
  }
  std::unique_ptr<Tokenizer> tok;
  if (!o.ids || !o.prompt.empty()) tok = make_tokenizer(tok_name);
  if (tok && tok->vocab_size() > c.vocab_size)
    fail("tokenizer {} has {} tokens but the model only {}; pass --tokenizer", tok_name,
         tok->vocab_size(), c.vocab_size);

  std::vector<int32_t> prompt = parse_ids(o.prompt_ids);
  if (!o.prompt.empty()) {
    if (!prompt.empty()) fail("give --prompt or --prompt-ids, not both");
    prompt = tok->encode(o.prompt, true);
  }
  if (prompt.empty()) prompt.push_back(c.vocab_size - 1);  // end-of-text starts a document
  for (int32_t id : prompt)
    if (id < 0 || id >= c.vocab_size)
      fail("--prompt-ids: token id {} is outside the model's vocabulary [0, {})", id, c.vocab_size);
  if (o.top_k > c.vocab_size)
    fail("--top-k {}: the model has only {} tokens (0 samples from all of them)", o.top_k,
         c.vocab_size);
  if (static_cast<int64_t>(prompt.size()) + o.max_new_tokens > c.block_size)
    fail(
        "the prompt ({} tokens) and --max-new-tokens ({}) exceed the model's {} positions "
        "(block_size); shorten the prompt or lower --max-new-tokens",
        prompt.size(), o.max_new_tokens, c.block_size);
  SampleOptions so;
  so.max_new_tokens = o.max_new_tokens;
  so.temperature = static_cast<float>(o.temperature);
  so.top_k = o.top_k;
  so.seed = static_cast<uint64_t>(o.seed);
  std::vector<int32_t> out = generate_tokens(c, params.data(), prompt, so);
  if (o.ids) {
    std::string line;
    for (size_t i = 0; i < out.size(); i++) line += (i ? " " : "") + std::to_string(out[i]);
    fmt::print("{}\n", line);
    return;
  }
  std::string text = (o.prompt.empty() ? "" : o.prompt) + tok->decode(out.data(), out.size());
  fmt::print("{}\n", text);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("generate", "Sample text from a trained checkpoint (KV-cached decoding)");
  auto o = std::make_shared<GenerateOpts>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "checkpoint directory, or a run directory (its newest checkpoint)")
      ->required();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "softmax temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens (0 = all)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--prompt", o->prompt, "text to continue (default: start a new document)");
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "comma-separated token ids to start from, instead of --prompt");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "gpt2, llama3, cl100k or bytes (default: the one the run was trained with)");
  cmd->add_flag("--ids", o->ids, "print token ids instead of text");
  cmd->add_option("--threads", o->threads, "threads (0 = all cores)")->capture_default_str();
  cmd->callback([o]() { generate(*o); });
}

}  // namespace kiln::cli
