#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "data/prepare.h"
#include "data/tokenizer.h"

namespace kiln::cli {

void register_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  auto* prep = data->add_subcommand(
      "prepare", "Tokenize text files into token shards (llm.c's format) and a manifest");
  auto o = std::make_shared<PrepareOptions>();
  prep->add_option("--tokenizer", o->tokenizer,
                   "gpt2 (OpenAI's BPE), llama3 (Meta's Llama 3), cl100k (OpenAI's cl100k_base) or "
                   "bytes; vocabularies over 65,536 ids are written as uint32 shards")
      ->capture_default_str();
  prep->add_option("--input", o->inputs, "text files or directories (each file is a document)")
      ->required();
  prep->add_option("--output", o->output, "output directory")->required();
  prep->add_option("--val-fraction", o->val_fraction,
                   "share of the tokens (the last ones) held out for validation")
      ->capture_default_str();
  prep->add_option("--shard-tokens", o->shard_tokens, "tokens per shard")->capture_default_str();
  prep->add_option("--threads", o->threads,
                   "threads (0 = all cores); the output does not depend on it")
      ->capture_default_str();
  prep->add_flag("--allow-invalid-utf8", o->allow_invalid_utf8,
                 "tokenize bytes that are not UTF-8 as bytes instead of stopping");
  prep->callback([o]() {
    PrepareSummary s = prepare_dataset(*o);
    fmt::print("{} files, {:.1f} MB -> {} train + {} val tokens in {} ({:.1f} s, {:.1f} MB/s)\n",
               s.files, s.bytes / 1e6, s.train_tokens, s.val_tokens, o->output, s.seconds,
               s.bytes / 1e6 / std::max(s.seconds, 1e-9));
  });
}

void register_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "tokenize", "Text on stdin to token ids on stdout (or ids to text with --decode)");
  struct Opts {
    std::string tokenizer = "gpt2";
    bool decode = false;
    bool allow_special = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--tokenizer", o->tokenizer, "gpt2, llama3, cl100k or bytes")
      ->capture_default_str();
  cmd->add_flag("--decode", o->decode, "read whitespace-separated ids, print the text");
  cmd->add_flag("--allow-special", o->allow_special,
                "read special tokens (\"<|endoftext|>\", \"<|begin_of_text|>\", ...) as their ids "
                "(otherwise they are plain text)");
  cmd->callback([o]() {
    auto tok = make_tokenizer(o->tokenizer);
    std::string input(std::istreambuf_iterator<char>(std::cin), {});
    if (o->decode) {
      std::vector<int32_t> ids;
      std::istringstream ss(input);
      std::string word;
      while (ss >> word) {
        try {
          size_t used;
          long long v = std::stoll(word, &used);
          if (used != word.size()) throw std::invalid_argument(word);
          // Checked here, before the narrowing: 4294967296 must not become token 0.
          if (v < 0 || v >= tok->vocab_size())
            fail("--decode: token id {} is outside the {} vocabulary [0, {})", word, tok->name(),
                 tok->vocab_size());
          ids.push_back(static_cast<int32_t>(v));
        } catch (const std::invalid_argument&) {
          fail("--decode: '{}' is not a token id", word);
        } catch (const std::out_of_range&) {
          fail("--decode: token id {} is outside the {} vocabulary [0, {})", word, tok->name(),
               tok->vocab_size());
        }
      }
      std::string text = tok->decode(ids.data(), ids.size());
      std::fwrite(text.data(), 1, text.size(), stdout);
      return;
    }
    std::vector<int32_t> ids;
    tok->encode(input, o->allow_special, ids);
    std::string out;
    for (size_t i = 0; i < ids.size(); i++) out += (i ? " " : "") + std::to_string(ids[i]);
    fmt::print("{}\n", out);
  });
}

}  // namespace kiln::cli
