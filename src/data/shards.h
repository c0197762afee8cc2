// Token shards in llm.c's format: a header of 256 little-endian int32 (magic, version, token
// count), then the tokens. Two kinds, both llm.c's own (dev/data/data_common.py):
//   magic 20240520, version 1: uint16 tokens (GPT-2; vocabularies of at most 65,536 ids)
//   magic 20240801, version 7: uint32 tokens (Llama 3; any vocabulary with an id >= 65,536)
// A vocabulary that fits uint16 is always written as version 1, so GPT-2 shards are the bytes
// they always were and llm.c's uint16 readers keep working. Shards are memory-mapped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/input_file.h"

namespace kiln {

constexpr int32_t kShardMagic = 20240520;  // uint16 tokens
constexpr int32_t kShardVersion = 1;
constexpr int32_t kShardMagicU32 = 20240801;  // uint32 tokens
constexpr int32_t kShardVersionU32 = 7;
constexpr int64_t kShardHeaderBytes = 256 * 4;

// Bytes per token a vocabulary's shards need: 2 up to 65,536 ids, else 4.
inline int shard_token_bytes(int64_t vocab_size) {
  return vocab_size <= 65536 ? 2 : 4;
}

// Expands a path or glob pattern into a sorted list of files; throws naming `what` (the config
// key) if nothing matches.
std::vector<std::string> expand_shard_pattern(const std::string& pattern, const std::string& what);

// Writes one shard (to a temporary name, fsynced, then renamed into place): version 1 for
// uint16 tokens, version 7 for uint32.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens);

// The concatenation of a list of shards, read through mmap.
class ShardSet {
 public:
  ShardSet() = default;
  // Opens and validates every file (a regular file; magic and version, token count, size); the
  // files may mix uint16 and uint32 shards. Errors name `what` (the config key) and the file,
  // and never block (a FIFO is refused unopened).
  ShardSet(const std::vector<std::string>& files, const std::string& what);

  int64_t num_tokens() const { return total_; }
  // Copies tokens [start, start+n) of the concatenation into out; checks each id < vocab.
  void read(int64_t start, int64_t n, int32_t* out, int vocab) const;
  const std::vector<std::string>& files() const { return files_; }

 private:
  struct Shard {
    std::string path;
    MappedFile file;
    const uint8_t* tokens = nullptr;
    int token_bytes = 2;  // 2: uint16, 4: uint32
    int64_t n = 0;
    int64_t start = 0;  // offset of its first token in the concatenation
  };
  std::vector<Shard> shards_;
  std::vector<std::string> files_;
  std::string what_;
  int64_t total_ = 0;
};

}  // namespace kiln
