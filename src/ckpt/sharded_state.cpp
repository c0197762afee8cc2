#include "ckpt/sharded_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "core/split_index.h"

namespace fs = std::filesystem;

namespace kiln {

std::string state_shard_name(const std::string& stem, int rank, int ranks) {
  return fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, rank, ranks);
}

void write_state_shard(const std::string& dir, const std::string& stem, int rank, int ranks,
                       const std::vector<FlatTensor>& tensors, int64_t begin, int64_t end,
                       const std::vector<StateBuffer>& buffers,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafeTensorOut> out;
  nlohmann::json slices = nlohmann::json::object();
  for (const auto& b : buffers)
    for (const auto& t : tensors) {
      const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (lo >= hi) continue;
      const std::string name = b.prefix + t.name;
      out.push_back({name, "F32", {hi - lo}, b.data + (lo - begin)});
      slices[name] = {{"shape", t.shape}, {"begin", lo - t.offset}, {"end", hi - t.offset}};
      if (t.split_dim >= 0)
        slices[name]["split"] = {
            {"shape", t.split_shape}, {"dim", t.split_dim}, {"part", t.part}, {"parts", t.parts}};
    }
  auto meta = metadata;
  meta["kiln_slices"] = slices.dump();
  meta["kiln_shard"] = fmt::format("{}/{}", rank, ranks);
  write_safetensors((fs::path(dir) / state_shard_name(stem, rank, ranks)).string(), out, meta);
}

std::vector<std::string> state_shard_files(const std::string& dir, const std::string& stem) {
  const std::regex pattern(R"((\d{5})-of-(\d{5})\.safetensors)");
  std::map<int, std::string> found;
  int ranks = -1;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem + "-", 0) != 0) continue;
    std::smatch m;
    const std::string rest = name.substr(stem.size() + 1);
    if (!std::regex_match(rest, m, pattern)) continue;
    const int r = std::stoi(m[1]), n = std::stoi(m[2]);
    if (ranks >= 0 && n != ranks)
      fail(
          "{}: holds {} files of {} and of {} ranks ({}); a checkpoint's shards come from one "
          "save",
          dir, stem, ranks, n, name);
    ranks = n;
    if (r >= n) fail("{}: {} names rank {} of {}", dir, name, r, n);
    found[r] = e.path().string();
  }
  std::vector<std::string> files;
  for (int r = 0; r < ranks; r++) {
    auto it = found.find(r);
    if (it == found.end())
      fail(
          "{}: {} is missing (the checkpoint holds {} of its {} shards); resume from another "
          "checkpoint",
          dir, state_shard_name(stem, r, ranks), found.size(), ranks);
    files.push_back(it->second);
  }
  return files;
}

namespace {

// How a file's slice or this rank's tensor is cut (no cut: parts = 1).
struct Split {
  std::vector<int64_t> shape;
  int dim = -1, parts = 1, part = 0;
  bool whole() const { return dim < 0 || parts <= 1; }
};

Split parse_split(const nlohmann::json& s, const std::vector<int64_t>& shape,
                  const std::string& path, const std::string& key) {
  Split sp;
  if (!s.contains("split")) return sp;
  try {
    const auto& j = s.at("split");
    sp.shape = j.at("shape").get<std::vector<int64_t>>();
    sp.dim = j.at("dim").get<int>();
    sp.part = j.at("part").get<int>();
    sp.parts = j.at("parts").get<int>();
  } catch (const std::exception& e) {
    fail("{}: the split of {} is malformed: {}", path, key, e.what());
  }
  int64_t a = 1, b = 1;
  for (int64_t d : sp.shape) a *= d;
  for (int64_t d : shape) b *= d;
  if (a != b || sp.dim < 0 || sp.dim >= static_cast<int>(sp.shape.size()) || sp.parts < 1 ||
      sp.part < 0 || sp.part >= sp.parts || sp.shape[sp.dim] % sp.parts != 0)
    fail("{}: the split of {} (part {} of {} along dimension {} of {}) does not fit its shape {}",
         path, key, sp.part, sp.parts, sp.dim, shape_str(sp.shape), shape_str(shape));
  return sp;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

void read_state_shards(const std::vector<std::string>& files,
                       const std::vector<FlatTensor>& tensors, int64_t begin, int64_t end,
                       const std::vector<StateBuffer>& buffers) {
  std::map<std::string, const FlatTensor*> by_name;
  for (const auto& t : tensors) by_name[t.name] = &t;
  // The flat ranges filled per buffer: each element must be filled exactly once. Parts of
  // tensors cut differently here and in the file are filled element by element, marked in
  // `marks` (made on first use).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> filled(buffers.size());
  std::vector<std::vector<uint8_t>> marks(buffers.size());
  std::vector<int64_t> marked(buffers.size(), 0);
  for (const auto& path : files) {
    SafeTensorsReader f(path);
    auto it = f.metadata().find("kiln_slices");
    if (it == f.metadata().end()) fail("{}: no kiln_slices metadata; not a kiln state shard", path);
    nlohmann::json slices;
    try {
      slices = nlohmann::json::parse(it->second);
    } catch (const std::exception& e) {
      fail("{}: kiln_slices metadata is not JSON: {}", path, e.what());
    }
    if (!slices.is_object()) fail("{}: kiln_slices metadata is not a JSON object", path);
    for (size_t bi = 0; bi < buffers.size(); bi++) {
      const StateBuffer& b = buffers[bi];
      for (const auto& [key, s] : slices.items()) {
        if (key.rfind(b.prefix, 0) != 0) continue;
        const std::string name = key.substr(b.prefix.size());
        auto t = by_name.find(name);
        if (t == by_name.end())
          fail("{}: tensor {} is not a tensor of this model; resume with the model that wrote it",
               path, key);
        const FlatTensor& mine = *t->second;
        std::vector<int64_t> shape;
        int64_t lo = 0, hi = 0;
        try {
          shape = s.at("shape").get<std::vector<int64_t>>();
          lo = s.at("begin").get<int64_t>();
          hi = s.at("end").get<int64_t>();
        } catch (const std::exception& e) {
          fail("{}: the slice of {} is malformed: {}", path, key, e.what());
        }
        if (shape != mine.shape)
          fail("{}: {} has shape {} here but {} in the checkpoint", path, key,
               shape_str(mine.shape), shape_str(shape));
        const Split theirs = parse_split(s, shape, path, key);
        const Split ours{mine.split_shape, mine.split_dim, mine.parts, mine.part};
        const int64_t part_numel = numel_of(shape) / theirs.parts;
        if (lo < 0 || hi <= lo || hi > part_numel)
          fail("{}: the slice [{}, {}) of {} lies outside its {} elements", path, lo, hi, key,
               part_numel);
        const SafeTensorEntry& e = f.entry(key);
        if (e.shape != std::vector<int64_t>{hi - lo})
          fail("{}: {} holds {} values for a slice of {}", path, key, shape_str(e.shape), hi - lo);
        if (theirs.whole() && ours.whole()) {
          // The part of this slice inside [begin, end), in flat-buffer positions.
          const int64_t flat_lo = std::max(begin, mine.offset + lo);
          const int64_t flat_hi = std::min(end, mine.offset + hi);
          if (flat_lo >= flat_hi) continue;
          std::vector<float> values(static_cast<size_t>(hi - lo));
          f.read_f32(key, {hi - lo}, values.data());
          std::copy(values.begin() + (flat_lo - mine.offset - lo),
                    values.begin() + (flat_hi - mine.offset - lo), b.data + (flat_lo - begin));
          filled[bi].emplace_back(flat_lo, flat_hi);
          continue;
        }
        // Cut differently: each of the file's elements to its place in the whole tensor, and
        // from there to this rank's part, when it holds it.
        if (std::max(begin, mine.offset) >= std::min(end, mine.offset + mine.numel)) continue;
        std::vector<float> values(static_cast<size_t>(hi - lo));
        f.read_f32(key, {hi - lo}, values.data());
        std::vector<uint8_t>& m = marks[bi];
        if (m.empty()) m.assign(static_cast<size_t>(end - begin), 0);
        for (int64_t j = lo; j < hi; j++) {
          const int64_t whole =
              split_part_index(theirs.shape, theirs.dim, theirs.parts, theirs.part, j);
          const int64_t k = split_local_index(ours.shape, ours.dim, ours.parts, ours.part, whole);
          if (k < 0) continue;
          const int64_t pos = mine.offset + k;
          if (pos < begin || pos >= end) continue;
          if (m[pos - begin])
            fail(
                "{}: the shards give {} at flat position {} twice; the files come from "
                "different saves",
                path, key, pos);
          m[pos - begin] = 1;
          marked[bi]++;
          b.data[pos - begin] = values[j - lo];
        }
      }
    }
  }
  const std::string where =
      files.empty() ? std::string("(no files)") : fs::path(files[0]).parent_path().string();
  int64_t want = 0;
  for (const auto& t : tensors)
    want += std::max<int64_t>(0, std::min(end, t.offset + t.numel) - std::max(begin, t.offset));
  for (size_t bi = 0; bi < buffers.size(); bi++) {
    auto& ranges = filled[bi];
    std::sort(ranges.begin(), ranges.end());
    int64_t got = marked[bi];
    for (size_t i = 0; i < ranges.size(); i++) {
      if (i > 0 && ranges[i].first < ranges[i - 1].second)
        fail(
            "{}: the shards give {}* values at flat positions [{}, {}) twice; the files come from "
            "different saves",
            where, buffers[bi].prefix, ranges[i].first,
            std::min(ranges[i].second, ranges[i - 1].second));
      got += ranges[i].second - ranges[i].first;
    }
    if (got != want)
      fail(
          "{}: the shards give {} of the {} {}* values this rank needs (flat positions [{}, {})); "
          "a shard file is missing or incomplete",
          where, got, want, buffers[bi].prefix, begin, end);
  }
}

}  // namespace kiln
