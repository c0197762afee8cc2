// The data manifest, manifest.json beside the shards that `kiln data prepare` writes: which
// tokenizer made the tokens, and the shards of each split with their token counts. Training
// reads it to refuse data made with another tokenizer before any step runs.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// The largest vocabulary kiln takes (uint32 shards hold any id; this bounds what a damaged or
// foreign manifest or config may claim). Llama 3 has 128,256.
constexpr int64_t kMaxVocabSize = int64_t{1} << 20;

struct DataManifest {
  struct Shard {
    std::string file;  // relative to the manifest's directory
    int64_t tokens = 0;
  };
  struct Split {
    int64_t tokens = 0;
    std::vector<Shard> shards;
  };
  std::string tokenizer;       // "gpt2", "bytes"
  int64_t vocab_size = 0;      // 1 .. kMaxVocabSize (uint16 shards up to 65,536, else uint32)
  std::string tokenizer_hash;  // may be empty
  Split train, val;            // val may have no shards
};

// Parses and checks a manifest's text; errors name `path` and the key and say what to do.
// Rules: a JSON object; "tokenizer" an object with a string "name", an integer "vocab_size" in
// 1..kMaxVocabSize and an optional string "hash"; "train" and "val", where present, objects with a
// non-negative integer "tokens" equal to the sum of their "shards" [{file, tokens}], each file a
// plain name (no directory part).
DataManifest parse_data_manifest(std::string_view text, const std::string& path);

// Reads the manifest at path (a regular file of at most 64 MB) and parses it.
DataManifest read_data_manifest(const std::string& path);

}  // namespace kiln
