// `kiln data prepare`: text files in, token shards and a manifest out.
//
// Each input file is a document and starts with the end-of-text token; inside a file, the text
// "<|endoftext|>" also separates documents. The last `val_fraction` of the token stream becomes
// the validation split. Files are tokenized in chunks cut at fixed places (where the GPT-2
// pre-tokenizer must break anyway), in parallel, so the output is the same for any thread count.
// Everything is written under a temporary name and published only when complete.
#pragma once
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

constexpr int64_t kMaxShardTokens = INT32_MAX;  // the shard header's count is an int32
constexpr int kMaxPrepareThreads = 1024;

struct PrepareOptions {
  std::string tokenizer = "gpt2";
  std::vector<std::string> inputs;  // files or directories (searched recursively)
  std::string output;
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
  int threads = 0;                  // 0: all cores
  bool allow_invalid_utf8 = false;  // otherwise a file that is not UTF-8 is an error
  bool progress = true;             // on a terminal only
};

struct PrepareSummary {
  int64_t files = 0, bytes = 0, train_tokens = 0, val_tokens = 0;
  double seconds = 0;
};

// Refuses options out of range and inputs that are not regular files or directories (naming the
// flag or the path) before anything is read.
PrepareSummary prepare_dataset(const PrepareOptions& o);

// Offsets where text may be cut without changing its GPT-2 pieces, about every `target` bytes:
// just after a newline that follows a non-space character and precedes an ASCII letter.
std::vector<size_t> safe_split_points(const std::string& text, size_t target);

// Byte offset of the first invalid UTF-8 sequence, or npos.
size_t first_invalid_utf8(const std::string& text);

}  // namespace kiln
