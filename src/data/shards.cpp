#include "data/shards.h"

#include <glob.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.h"
#include "core/file.h"

namespace kiln {

std::vector<std::string> expand_shard_pattern(const std::string& pattern, const std::string& what) {
  if (pattern.empty())
    fail("{} is empty: set it to a shard file or a glob such as 'dir/*.bin'", what);
  glob_t g;
  std::memset(&g, 0, sizeof(g));
  int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; i++) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  if (out.empty())
    fail("{} = '{}' matches no file (prepare data with `kiln data prepare`, or fix the path)", what,
         pattern);
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

template <typename T>
void write_shard_of(const std::string& path, const std::vector<T>& tokens, int32_t magic,
                    int32_t version) {
  KILN_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX));  // the header's count is an int32
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size() * sizeof(T));
  int32_t header[256] = {0};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, sizeof(header));
  std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size() * sizeof(T));
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard_of(path, tokens, kShardMagic, kShardVersion);
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_shard_of(path, tokens, kShardMagicU32, kShardVersionU32);
}

// The header fields the reader trusts, checked against the file's size before any token is
// read. Errors name the config key and the file and say what to do.
ShardSet::ShardSet(const std::vector<std::string>& files, const std::string& what)
    : files_(files), what_(what) {
  for (const auto& path : files) {
    MappedFile file(path, what + ": shard");
    const size_t size = file.size();
    if (size == 0) fail("{}: shard {} is empty (0 bytes); prepare it again", what, path);
    if (size < static_cast<size_t>(kShardHeaderBytes))
      fail(
          "{}: shard {} is truncated: {} bytes, shorter than the {}-byte header; prepare it "
          "again",
          what, path, size, kShardHeaderBytes);
    int32_t header[3];
    std::memcpy(header, file.data(), sizeof(header));
    int token_bytes = 0;
    if (header[0] == kShardMagic && header[1] == kShardVersion)
      token_bytes = 2;
    else if (header[0] == kShardMagicU32 && header[1] == kShardVersionU32)
      token_bytes = 4;
    else if (header[0] == kShardMagic || header[0] == kShardMagicU32)
      fail(
          "{}: shard {} has version {} (magic {}); kiln reads version {} (magic {}, uint16 "
          "tokens) and version {} (magic {}, uint32 tokens)",
          what, path, header[1], header[0], kShardVersion, kShardMagic, kShardVersionU32,
          kShardMagicU32);
    else
      fail("{}: {} is not a token shard: magic number {} (expected {} or {}, llm.c's format)", what,
           path, header[0], kShardMagic, kShardMagicU32);
    const int64_t n = header[2];
    if (n < 0)
      fail(
          "{}: shard {} is damaged: its header gives a negative token count ({}); prepare it again",
          what, path, n);
    const size_t expect = kShardHeaderBytes + static_cast<size_t>(n) * token_bytes;
    if (size != expect)
      fail(
          "{}: shard {} is {}: its header says {} tokens ({} bytes), the file has {} bytes; "
          "prepare it again",
          what, path, size < expect ? "truncated" : "damaged (bytes after its tokens)", n, expect,
          size);
    Shard s;
    s.path = path;
    s.tokens = reinterpret_cast<const uint8_t*>(file.data()) + kShardHeaderBytes;
    s.token_bytes = token_bytes;
    s.file = std::move(file);
    s.n = n;
    s.start = total_;
    total_ += n;
    shards_.push_back(std::move(s));
  }
}

void ShardSet::read(int64_t start, int64_t n, int32_t* out, int vocab) const {
  KILN_CHECK(start >= 0 && start + n <= total_);
  // First shard holding `start`.
  auto it = std::upper_bound(shards_.begin(), shards_.end(), start,
                             [](int64_t v, const Shard& s) { return v < s.start; });
  size_t si = static_cast<size_t>(it - shards_.begin()) - 1;
  int64_t done = 0;
  while (done < n) {
    const Shard& s = shards_[si];
    int64_t off = start + done - s.start;
    int64_t take = std::min(n - done, s.n - off);
    auto copy = [&](auto token_type) {
      using T = decltype(token_type);
      for (int64_t i = 0; i < take; i++) {
        T tok;  // memcpy: no alignment assumed of the mapping
        std::memcpy(&tok, s.tokens + (off + i) * sizeof(T), sizeof(T));
        if (static_cast<int64_t>(tok) >= vocab)
          fail(
              "{}: token id {} at position {} of shard {} is outside the vocabulary "
              "(model.vocab_size = {})",
              what_, tok, off + i, s.path, vocab);
        out[done + i] = static_cast<int32_t>(tok);
      }
    };
    if (s.token_bytes == 2)
      copy(uint16_t{});
    else
      copy(uint32_t{});
    done += take;
    si++;
  }
}

}  // namespace kiln
