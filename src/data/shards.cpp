#include "data/shards.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
  std::vector<uint8_t> bytes(kShardHeaderBytes + tokens.size() * 2);
  int32_t header[256] = {0};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, sizeof(header));
  std::memcpy(bytes.data() + kShardHeaderBytes, tokens.data(), tokens.size() * 2);
  write_file_atomic(path, bytes.data(), bytes.size());
}

ShardSet::ShardSet(const std::vector<std::string>& files, const std::string& what)
    : files_(files), what_(what) {
  try {
    open_all(files, what);
  } catch (...) {
    for (auto& s : shards_) munmap(const_cast<uint8_t*>(s.map), s.map_bytes);
    shards_.clear();
    throw;
  }
}

void ShardSet::open_all(const std::vector<std::string>& files, const std::string& what) {
  for (const auto& path : files) {
    Shard s;
    s.path = path;
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) fail("{}: cannot open shard {}: {}", what, path, std::strerror(errno));
    struct stat st;
    fstat(fd, &st);
    size_t size = static_cast<size_t>(st.st_size);
    if (size < static_cast<size_t>(kShardHeaderBytes)) {
      ::close(fd);
      fail("{}: shard {} is truncated: {} bytes, shorter than the 1024-byte header", what, path,
           size);
    }
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) fail("{}: cannot mmap shard {}: {}", what, path, std::strerror(errno));
    s.map = static_cast<const uint8_t*>(m);
    s.map_bytes = size;
    shards_.push_back(s);  // owned from here: unmapped by the caller on any error below
    int32_t header[3];
    std::memcpy(header, s.map, sizeof(header));
    if (header[0] != kShardMagic)
      fail("{}: {} is not a token shard: magic number {} (expected {}, llm.c's format)", what, path,
           header[0], kShardMagic);
    if (header[1] != kShardVersion)
      fail("{}: shard {} has version {}; kiln reads version 1 (uint16 tokens)", what, path,
           header[1]);
    int64_t n = header[2];
    size_t expect = kShardHeaderBytes + static_cast<size_t>(n) * 2;
    if (n < 0 || size != expect)
      fail(
          "{}: shard {} is truncated or damaged: header says {} tokens ({} bytes), file has {} "
          "bytes; prepare it again",
          what, path, n, expect, size);
    Shard& b = shards_.back();
    b.tokens = reinterpret_cast<const uint16_t*>(b.map + kShardHeaderBytes);
    b.n = n;
    b.start = total_;
    total_ += n;
  }
}

ShardSet::~ShardSet() {
  for (auto& s : shards_)
    if (s.map) munmap(const_cast<uint8_t*>(s.map), s.map_bytes);
}

ShardSet::ShardSet(ShardSet&& o) noexcept {
  *this = std::move(o);
}

ShardSet& ShardSet::operator=(ShardSet&& o) noexcept {
  std::swap(shards_, o.shards_);
  std::swap(files_, o.files_);
  std::swap(what_, o.what_);
  std::swap(total_, o.total_);
  return *this;
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
