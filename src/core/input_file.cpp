#include "core/input_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace kiln {
namespace {

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string file_kind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return S_ISREG(st.st_mode) ? "" : kind_of(st.st_mode);
}

int open_regular_file(const std::string& path, const std::string& what, size_t* size) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) fail("{} {} does not exist", what, path);
    // A path that cannot name a readable file is the input's fault; the rest is the system's.
    if (e == EACCES || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG || e == EPERM)
      fail("cannot open {} {}: {}", what, path, std::strerror(e));
    fail_io("cannot open {} {}: {}", what, path, std::strerror(e));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail_io("cannot stat {} {}: {}", what, path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{} {} is {}, not a regular file", what, path, kind_of(st.st_mode));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<size_t>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path, const std::string& what, size_t max_bytes) {
  size_t size;
  int fd = open_regular_file(path, what, &size);
  if (size > max_bytes) {
    ::close(fd);
    fail("{} {} is {} bytes, more than the {} this file can be", what, path, size, max_bytes);
  }
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t k = ::read(fd, out.data() + got, size - got);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = errno;
      ::close(fd);
      fail_io("cannot read {} {}: {}", what, path, std::strerror(e));
    }
    if (k == 0) break;  // shrank while we read
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

MappedFile::MappedFile(const std::string& path, const std::string& what) {
  size_t size;
  int fd = open_regular_file(path, what, &size);
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    if (m == MAP_FAILED) fail_io("cannot map {} {}: {}", what, path, std::strerror(e));
    data_ = static_cast<const uint8_t*>(m);
    size_ = size;
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}

}  // namespace kiln
