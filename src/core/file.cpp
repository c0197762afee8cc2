#include "core/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kiln {

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open {} to sync it: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) fail("fsync of {} failed: {}", path, std::strerror(errno));
}

void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  write_file_atomic(path, {{data, bytes}});
}

namespace {

void write_then_rename(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces, bool durable) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fail("cannot create {}: {}", tmp, std::strerror(errno));
  for (const auto& [data, bytes] : pieces) {
    const char* p = static_cast<const char*>(data);
    size_t left = bytes;
    while (left > 0) {
      ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        fail("writing {} failed: {}", path, std::strerror(e));
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
  }
  if ((durable && ::fsync(fd) != 0) || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("writing {} failed: {}", path, std::strerror(e));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename {} to {}: {}", tmp, path, std::strerror(e));
  }
  if (!durable) return;
  auto dir = std::filesystem::path(path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());
}

}  // namespace

void write_file_atomic(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces) {
  write_then_rename(path, pieces, /*durable=*/true);
}

void replace_file(const std::string& path, const std::string& text) {
  write_then_rename(path, {{text.data(), text.size()}}, /*durable=*/false);
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

std::string self_executable() {
  char exe[4096];
  ssize_t len = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  return len > 0 ? std::string(exe, static_cast<size_t>(len)) : std::string();
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read {} {}: {}", what, path, std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kiln
