#include "ckpt/safetensors.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

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
  for (auto d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      fail("shape {} has no valid element count", shape_str(shape));
  return n;
}

namespace {

// The header's JSON parsed with every object's keys checked for duplicates (the format forbids
// them; a plain parse would keep the last one silently).
nlohmann::json parse_header_json(const uint8_t* p, size_t n, const std::string& path) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      keys.pop_back();
    } else if (ev == E::key && !keys.back().insert(parsed.get<std::string>()).second) {
      fail("{}: broken safetensors header: the key '{}' appears twice in one object", path,
           parsed.get<std::string>());
    }
    return true;
  };
  try {
    return nlohmann::json::parse(p, p + n, cb);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: broken safetensors header (not valid JSON): {}", path, e.what());
  }
}

// A JSON number that is a non-negative integer (nlohmann stores those as unsigned).
bool is_count(const nlohmann::json& v) {
  return v.is_number_unsigned();
}

}  // namespace

SafeTensorsReader::SafeTensorsReader(const std::string& path)
    : path_(path), file_(path, "safetensors file") {
  parse_header();
}

void SafeTensorsReader::parse_header() {
  const std::string& path = path_;
  const uint8_t* map = file_.data();
  const size_t size = file_.size();
  if (size < 8)
    fail("{} is not a safetensors file: {} bytes, too short for the 8-byte header length", path,
         size);
  uint64_t hlen;
  std::memcpy(&hlen, map, 8);
  if (hlen > kSafeTensorsMaxHeaderBytes)
    fail("{}: broken safetensors header: it claims {} bytes, more than the format's limit of {}",
         path, hlen, kSafeTensorsMaxHeaderBytes);
  if (hlen > size - 8)
    fail("{}: broken safetensors header: it claims {} bytes, the file has {} after the length",
         path, hlen, size - 8);
  if (hlen == 0 || map[8] != '{')
    fail("{}: broken safetensors header: it must start with '{{' (a JSON object)", path);
  data_ = map + 8 + hlen;
  const size_t data_bytes = size - 8 - hlen;
  nlohmann::json h = parse_header_json(map + 8, hlen, path);
  if (!h.is_object()) fail("{}: broken safetensors header: not a JSON object", path);
  for (auto& item : h.items()) {
    const std::string& name = item.key();
    const nlohmann::json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        fail("{}: broken safetensors header: __metadata__ must map strings to strings", path);
      for (auto& [k, mv] : v.items()) {
        if (!mv.is_string())
          fail("{}: broken safetensors header: __metadata__ '{}' is not a string", path, k);
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) {
      fail("{}: broken safetensors header entry for tensor '{}': {}", path, name, why);
    };
    if (!v.is_object()) bad("not an object {dtype, shape, data_offsets}");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) bad(fmt::format("no \"{}\"", key));
    if (!v["dtype"].is_string()) bad("dtype is not a string");
    SafeTensorEntry e;
    e.dtype = v["dtype"].get<std::string>();
    const size_t es = dtype_size(e.dtype);
    if (es == 0) bad(fmt::format("unknown dtype '{}'", e.dtype));
    const auto& shape = v["shape"];
    if (!shape.is_array()) bad("shape is not a list");
    for (const auto& d : shape) {
      if (!is_count(d) || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        bad(fmt::format("shape {} holds something other than a non-negative integer",
                        shape.dump()));
      e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !is_count(off[0]) || !is_count(off[1]))
      bad(fmt::format("data_offsets {} must be two non-negative integers [begin, end]",
                      off.dump()));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end)
      bad(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
    if (e.end > data_bytes)
      bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes of the file", e.begin,
                      e.end, data_bytes));
    uint64_t bytes = es;
    for (auto d : e.shape)
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
        bad(fmt::format("shape {} of {} overflows a 64-bit byte count", shape_str(e.shape),
                        e.dtype));
    if (e.end - e.begin != bytes)
      bad(fmt::format("shape {} of {} needs {} bytes, data_offsets [{}, {}] give {}",
                      shape_str(e.shape), e.dtype, bytes, e.begin, e.end, e.end - e.begin));
    entries_[name] = e;
  }
  // The byte ranges must tile the data section: sorted by offset, each begins where the one
  // before ends, and the last ends at the end of the file.
  std::vector<std::pair<const std::string*, const SafeTensorEntry*>> order;
  for (const auto& [name, e] : entries_) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->begin, a.second->end) < std::pair(b.second->begin, b.second->end);
  });
  size_t at = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, e] : order) {
    if (e->begin < at)
      fail(
          "{}: broken safetensors file: tensor '{}' (bytes [{}, {})) overlaps tensor '{}' "
          "(which ends at {})",
          path, *name, e->begin, e->end, *prev, at);
    if (e->begin > at)
      fail("{}: broken safetensors file: bytes [{}, {}) before tensor '{}' belong to no tensor",
           path, at, e->begin, *name);
    at = e->end;
    prev = name;
  }
  if (at != data_bytes)
    fail(
        "{}: broken safetensors file: the data section has {} bytes, the tensors cover {} (bytes "
        "after {} belong to no tensor)",
        path, data_bytes, at, prev ? "tensor '" + *prev + "'" : std::string("the header"));
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
  if (n == 0) return;
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
  if (out.empty()) return out;
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
  if (!out.empty()) std::memcpy(out.data(), data_ + e.begin, out.size() * 4);
  return out;
}

namespace {
size_t tensor_bytes(const SafeTensorOut& t) {
  int64_t n = 1;
  for (auto d : t.shape) n *= d;
  return static_cast<size_t>(n) * dtype_size(t.dtype);
}
}  // namespace

SafeTensorsWriter::SafeTensorsWriter(const std::string& path,
                                     const std::vector<SafeTensorOut>& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : file_(path) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  size_t off = 0;
  for (const auto& t : tensors) {
    const size_t bytes = tensor_bytes(t);
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    bytes_.push_back(bytes);
    off += bytes;
  }
  std::string header = h.dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  const uint64_t hlen = header.size();
  file_.append(&hlen, 8);
  file_.append(header.data(), header.size());
}

void SafeTensorsWriter::write(const void* data) {
  KILN_CHECK(next_ < bytes_.size());
  file_.append(data, bytes_[next_++]);
}

void SafeTensorsWriter::finish() {
  KILN_CHECK(next_ == bytes_.size());
  file_.commit();
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafeTensorsWriter w(path, tensors, metadata);
  for (const auto& t : tensors) w.write(t.data);
  w.finish();
}

}  // namespace kiln
