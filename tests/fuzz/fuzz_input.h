// Shared by the fuzz targets: the input as a file (for readers that take a path), and the one
// failure kiln allows for bad bytes, kiln::Error. Anything else (another exception, a crash, a
// leak, undefined behaviour, a hang) is a finding.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace kiln::fuzz {

// Writes the input to one file per process (in /dev/shm when there is one) and returns its path.
inline const std::string& as_file(const uint8_t* data, size_t size, const char* name) {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    return base + "/kiln-fuzz-" + std::to_string(getpid());
  }();
  static std::string path;
  path = dir + "-" + name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    ssize_t k = ::write(fd, data + done, size - done);
    if (k <= 0) std::abort();
    done += static_cast<size_t>(k);
  }
  ::close(fd);
  return path;
}

// Runs fn; a kiln::Error (bad input refused with a message) is the expected way to fail.
template <typename Fn>
void refusal_allowed(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

}  // namespace kiln::fuzz
