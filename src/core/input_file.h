// Files kiln reads from its users (shards, safetensors, manifests, text): opened only when they
// are regular files. A FIFO, a device or a directory is refused by name before anything could
// block on it (the open is O_NONBLOCK, then fstat decides).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

// Opens path read-only if it is a regular file and returns the descriptor, its size in *size.
// Throws naming `what` and the path otherwise: missing, unreadable, "a directory", "a FIFO",
// "a character device", ...
int open_regular_file(const std::string& path, const std::string& what, size_t* size);

// The whole file, if it is a regular file of at most max_bytes; errors as open_regular_file.
std::string read_regular_file(const std::string& path, const std::string& what,
                              size_t max_bytes = size_t{1} << 30);

// "a directory", "a FIFO", "a character device", ... for a path that exists but is not a
// regular file; "" for a regular file, "missing" if it does not exist.
std::string file_kind(const std::string& path);

// A regular file mapped read-only (an empty file maps to no bytes). Not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const std::string& path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln
