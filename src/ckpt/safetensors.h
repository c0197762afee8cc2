// safetensors files (Hugging Face's format): an 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then raw
// little-endian data. Reading maps the file and applies the format's own checks before any
// tensor is used: the header is at most 100 MB and a JSON object without duplicate keys; every
// entry has a known dtype, a shape of non-negative integers whose byte size does not overflow
// and equals end - begin of its data_offsets; the entries' byte ranges tile the data section
// exactly (no overlap, no hole, nothing after the last); __metadata__ maps strings to strings.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/file.h"
#include "core/input_file.h"

namespace kiln {

struct SafeTensorEntry {
  std::string dtype;  // "F32", "F64", "BF16", "F16", "I32", "I64", ...
  std::vector<int64_t> shape;
  size_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;      // throws if the product of the shape overflows
};

// The largest header the reader accepts (the format's own limit).
constexpr uint64_t kSafeTensorsMaxHeaderBytes = 100'000'000;

class SafeTensorsReader {
 public:
  // Throws naming the file (and the tensor) if the file breaks any rule above, or is not a
  // regular file.
  explicit SafeTensorsReader(const std::string& path);
  SafeTensorsReader(const SafeTensorsReader&) = delete;
  SafeTensorsReader& operator=(const SafeTensorsReader&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  const SafeTensorEntry& entry(const std::string& name) const;  // throws naming the tensor
  const std::map<std::string, SafeTensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads a float tensor (F32, F64, BF16 or F16 on disk) into out, converting to float32. The
  // stored shape must equal `shape`, else an error names the tensor and both shapes.
  void read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  std::vector<double> read_f64(const std::string& name) const;  // any float dtype
  std::vector<int32_t> read_i32(const std::string& name) const;

 private:
  void parse_header();

  std::string path_;
  MappedFile file_;
  const uint8_t* data_ = nullptr;
  std::map<std::string, SafeTensorEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

struct SafeTensorOut {
  std::string name;
  std::string dtype;  // "F32" or "I32"
  std::vector<int64_t> shape;
  const void* data;
};

// Writes the file durably (temporary name, fsync, rename).
void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

// The same, one tensor at a time (e.g. each gathered just before it is written): the header
// comes from the tensors' names, dtypes and shapes (their data pointers are not read); write()
// takes each tensor's bytes in that order; finish() publishes the file. Destroyed unfinished, it
// leaves nothing behind.
class SafeTensorsWriter {
 public:
  SafeTensorsWriter(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                    const std::map<std::string, std::string>& metadata);
  void write(const void* data);
  void finish();

 private:
  AtomicFileWriter file_;
  std::vector<size_t> bytes_;
  size_t next_ = 0;
};

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace kiln
