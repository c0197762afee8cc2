#include "ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace kiln {
namespace {

size_t dtype_size(const std::string& dt) {
  if (dt == "F64" || dt == "I64" || dt == "U64") return 8;
  if (dt == "F32" || dt == "I32" || dt == "U32") return 4;
  if (dt == "F16" || dt == "BF16" || dt == "I16" || dt == "U16") return 2;
  if (dt == "I8" || dt == "U8" || dt == "BOOL" || dt == "F8_E4M3" || dt == "F8_E5M2") return 1;
  return 0;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) mant <<= 1, exp--;
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t SafeTensorEntry::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafeTensorsReader::SafeTensorsReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open safetensors file {}: {}", path, std::strerror(errno));
  struct stat st;
  fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("{} is not a safetensors file: {} bytes, too short for the header length", path, size_);
  }
  void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail("cannot mmap {}: {}", path, std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);

  try {
    uint64_t hlen;
    std::memcpy(&hlen, map_, 8);
    if (hlen > size_ - 8)
      fail("{}: broken safetensors header: it claims {} bytes, the file has {} after the length",
           path, hlen, size_ - 8);
    data_ = map_ + 8 + hlen;
    size_t data_bytes = size_ - 8 - hlen;
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(map_ + 8, map_ + 8 + hlen);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: broken safetensors header (not valid JSON): {}", path, e.what());
    }
    if (!h.is_object()) fail("{}: broken safetensors header: not a JSON object", path);
    for (auto& [name, v] : h.items()) {
      if (name == "__metadata__") {
        if (v.is_object())
          for (auto& [k, mv] : v.items())
            if (mv.is_string()) metadata_[k] = mv.get<std::string>();
        continue;
      }
      try {
        SafeTensorEntry e;
        e.dtype = v.at("dtype").get<std::string>();
        e.shape = v.at("shape").get<std::vector<int64_t>>();
        auto off = v.at("data_offsets").get<std::vector<size_t>>();
        if (off.size() != 2) fail("data_offsets must have two numbers");
        e.begin = off[0];
        e.end = off[1];
        size_t es = dtype_size(e.dtype);
        if (es == 0) fail("unknown dtype '{}'", e.dtype);
        for (auto d : e.shape)
          if (d < 0) fail("negative dimension in shape {}", shape_str(e.shape));
        if (e.begin > e.end || e.end > data_bytes)
          fail("data_offsets [{}, {}] lie outside the {} data bytes of the file", e.begin, e.end,
               data_bytes);
        if (e.end - e.begin != static_cast<size_t>(e.numel()) * es)
          fail("shape {} of {} needs {} bytes, data_offsets give {}", shape_str(e.shape), e.dtype,
               e.numel() * es, e.end - e.begin);
        entries_[name] = e;
      } catch (const nlohmann::json::exception& ex) {
        fail("{}: broken safetensors header entry for tensor '{}': {}", path, name, ex.what());
      } catch (const Error& ex) {
        fail("{}: broken safetensors header entry for tensor '{}': {}", path, name, ex.what());
      }
    }
  } catch (...) {
    munmap(const_cast<uint8_t*>(map_), size_);
    throw;
  }
}

SafeTensorsReader::~SafeTensorsReader() {
  if (map_) munmap(const_cast<uint8_t*>(map_), size_);
}

const SafeTensorEntry& SafeTensorsReader::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("{}: tensor '{}' is missing", path_, name);
  return it->second;
}

void SafeTensorsReader::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                                 float* out) const {
  const SafeTensorEntry& e = entry(name);
  if (e.shape != shape)
    fail("{}: tensor '{}' has shape {}, expected {}", path_, name, shape_str(e.shape),
         shape_str(shape));
  const uint8_t* p = data_ + e.begin;
  int64_t n = e.numel();
  if (e.dtype == "F32") {
    std::memcpy(out, p, n * 4);
  } else if (e.dtype == "F64") {
    for (int64_t i = 0; i < n; i++) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else if (e.dtype == "BF16") {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  } else if (e.dtype == "F16") {
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = half_to_float(h);
    }
  } else {
    fail("{}: tensor '{}' has dtype {}; expected a float type", path_, name, e.dtype);
  }
}

std::vector<double> SafeTensorsReader::read_f64(const std::string& name) const {
  const SafeTensorEntry& e = entry(name);
  std::vector<double> out(e.numel());
  if (e.dtype == "F64") {
    std::memcpy(out.data(), data_ + e.begin, out.size() * 8);
  } else {
    std::vector<float> f(e.numel());
    read_f32(name, e.shape, f.data());
    for (size_t i = 0; i < f.size(); i++) out[i] = f[i];
  }
  return out;
}

std::vector<int32_t> SafeTensorsReader::read_i32(const std::string& name) const {
  const SafeTensorEntry& e = entry(name);
  if (e.dtype != "I32") fail("{}: tensor '{}' has dtype {}, expected I32", path_, name, e.dtype);
  std::vector<int32_t> out(e.numel());
  std::memcpy(out.data(), data_ + e.begin, out.size() * 4);
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    size_t bytes = static_cast<size_t>(n) * dtype_size(t.dtype);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  uint64_t hlen = header.size();
  std::vector<std::pair<const void*, size_t>> pieces{{&hlen, 8}, {header.data(), header.size()}};
  for (const auto& t : tensors) {
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    pieces.emplace_back(t.data, static_cast<size_t>(n) * dtype_size(t.dtype));
  }
  write_file_atomic(path, pieces);
}

}  // namespace kiln
