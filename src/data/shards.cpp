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

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  KILN_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX));  // the header's count is an int32
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size() * 2);
  int32_t header[256] = {0};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, sizeof(header));
  std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size() * 2);
  write_file_atomic(path, bytes.data(), bytes.size());
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
    if (header[0] != kShardMagic)
      fail("{}: {} is not a token shard: magic number {} (expected {}, llm.c's format)", what, path,
           header[0], kShardMagic);
    if (header[1] != kShardVersion)
      fail("{}: shard {} has version {}; kiln reads version {} (uint16 tokens)", what, path,
           header[1], kShardVersion);
    const int64_t n = header[2];
    if (n < 0)
      fail(
          "{}: shard {} is damaged: its header gives a negative token count ({}); prepare it again",
          what, path, n);
    const size_t expect = kShardHeaderBytes + static_cast<size_t>(n) * 2;
    if (size != expect)
      fail(
          "{}: shard {} is {}: its header says {} tokens ({} bytes), the file has {} bytes; "
          "prepare it again",
          what, path, size < expect ? "truncated" : "damaged (bytes after its tokens)", n, expect,
          size);
    Shard s;
    s.path = path;
    s.tokens = reinterpret_cast<const uint16_t*>(file.data() + kShardHeaderBytes);
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
    for (int64_t i = 0; i < take; i++) {
      int32_t tok = s.tokens[off + i];
      if (tok >= vocab)
        fail(
            "{}: token id {} at position {} of shard {} is outside the vocabulary "
            "(model.vocab_size = {})",
            what_, tok, off + i, s.path, vocab);
      out[done + i] = tok;
    }
    done += take;
    si++;
  }
}

}  // namespace kiln
