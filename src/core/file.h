// Durable file writes: write to a temporary name beside the target, fsync, rename, fsync the
// directory. A crash leaves either the old file or the new one, never a torn one.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// The file's contents are the pieces, in order.
void write_file_atomic(const std::string& path,
                       const std::vector<std::pair<const void*, size_t>>& pieces);
void write_file_atomic(const std::string& path, const void* data, size_t bytes);
void write_file_atomic(const std::string& path, const std::string& text);
// Readers see the old contents or the new, never a mix (temporary + rename), but nothing is
// fsynced: for small files rewritten every second that a crash may lose (heartbeats).
void replace_file(const std::string& path, const std::string& text);
void fsync_path(const std::string& path);  // a file or a directory

// The same written piece by piece (a file larger than memory, or whose parts come one at a
// time): bytes go to a temporary name beside `path`; commit() fsyncs it (durable), renames it into
// place and fsyncs the directory. Destroyed without commit(), or after a failed write, it leaves
// `path` as it was and removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, bool durable = true);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void append(const void* data, size_t bytes);
  void commit();

 private:
  [[noreturn]] void abandon(const char* what);
  std::string path_, tmp_;
  bool durable_;
  int fd_ = -1;
};
std::string read_file(const std::string& path, const std::string& what);
// The path of the running executable ("" if it cannot be found).
std::string self_executable();

}  // namespace kiln
