// Token shards in llm.c's format: a header of 256 little-endian int32 (magic 20240520, version 1
// = uint16 tokens, token count), then the tokens. Shards are memory-mapped.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/input_file.h"

namespace kiln {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int64_t kShardHeaderBytes = 256 * 4;

// Expands a path or glob pattern into a sorted list of files; throws naming `what` (the config
// key) if nothing matches.
std::vector<std::string> expand_shard_pattern(const std::string& pattern, const std::string& what);

// Writes one shard (to a temporary name, fsynced, then renamed into place).
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// The concatenation of a list of shards, read through mmap.
class ShardSet {
 public:
  ShardSet() = default;
  // Opens and validates every file (a regular file; magic, version, token count, size); errors
  // name `what` (the config key) and the file, and never block (a FIFO is refused unopened).
  ShardSet(const std::vector<std::string>& files, const std::string& what);

  int64_t num_tokens() const { return total_; }
  // Copies tokens [start, start+n) of the concatenation into out; checks each id < vocab.
  void read(int64_t start, int64_t n, int32_t* out, int vocab) const;
  const std::vector<std::string>& files() const { return files_; }

 private:
  struct Shard {
    std::string path;
    MappedFile file;
    const uint16_t* tokens = nullptr;
    int64_t n = 0;
    int64_t start = 0;  // offset of its first token in the concatenation
  };
  std::vector<Shard> shards_;
  std::vector<std::string> files_;
  std::string what_;
  int64_t total_ = 0;
};

}  // namespace kiln
