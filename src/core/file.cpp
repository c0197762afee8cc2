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

AtomicFileWriter::AtomicFileWriter(std::string path, bool durable)
    : path_(std::move(path)),
      tmp_(path_ + ".tmp." + std::to_string(::getpid())),
      durable_(durable) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create {}: {}", tmp_, std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {  // never committed: the target keeps what it had
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::abandon(const char* what) {
  const int e = errno;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  fail("{} {} failed: {}", what, path_, std::strerror(e));
}

void AtomicFileWriter::append(const void* data, size_t bytes) {
  KILN_CHECK(fd_ >= 0);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0) {
      if (errno == EINTR) continue;
      abandon("writing");
    }
    p += w;
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFileWriter::commit() {
  KILN_CHECK(fd_ >= 0);
  if (durable_ && ::fsync(fd_) != 0) abandon("writing");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    fail("writing {} failed: {}", path_, std::strerror(e));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename {} to {}: {}", tmp_, path_, std::strerror(e));
  }
  if (!durable_) return;
  auto dir = std::filesystem::path(path_).parent_path();
  fsync_path(dir.empty() ? "." : dir.string());
}

namespace {

void write_then_rename(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces, bool durable) {
  AtomicFileWriter w(path, durable);
  for (const auto& [data, bytes] : pieces) w.append(data, bytes);
  w.commit();
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
