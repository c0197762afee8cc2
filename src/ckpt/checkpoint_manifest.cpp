#include "ckpt/checkpoint_manifest.h"

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/sha256.h"

namespace fs = std::filesystem;

namespace kiln {

ManifestEntry manifest_entry(const std::string& dir, const std::string& name, int rank) {
  const std::string path = (fs::path(dir) / name).string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{}: cannot stat it for the manifest", path);
  return {name, static_cast<int64_t>(st.st_size), sha256_file(path), rank};
}

std::string manifest_json(int64_t step, const std::vector<ManifestEntry>& files) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : files)
    list.push_back({{"name", f.name}, {"bytes", f.bytes}, {"sha256", f.sha256}, {"rank", f.rank}});
  nlohmann::json j = {
      {"format", "kiln-checkpoint"}, {"version", 1}, {"step", step}, {"files", list}};
  return j.dump(2) + "\n";
}

std::vector<ManifestEntry> parse_manifest(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array())
    fail("{}: not a kiln checkpoint manifest (no \"files\" list)", source);
  std::vector<ManifestEntry> out;
  for (const auto& f : j["files"]) {
    ManifestEntry e;
    try {
      e.name = f.at("name").get<std::string>();
      e.bytes = f.at("bytes").get<int64_t>();
      e.sha256 = f.at("sha256").get<std::string>();
      e.rank = f.at("rank").get<int>();
    } catch (const std::exception& ex) {
      fail("{}: a file entry is malformed: {}", source, ex.what());
    }
    // A name is a file of the directory, never a path out of it.
    if (e.name.empty() || e.name.find('/') != std::string::npos || e.name == "." || e.name == "..")
      fail("{}: file name '{}' is not a file of the checkpoint directory", source, e.name);
    if (e.bytes < 0) fail("{}: {} has a negative size", source, e.name);
    out.push_back(std::move(e));
  }
  return out;
}

bool verify_checkpoint_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  for (const auto& e : parse_manifest(read_file(path, "checkpoint manifest"), path)) {
    const std::string file = (fs::path(dir) / e.name).string();
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      fail(
          "cannot resume from {}: {} is missing (the manifest lists it, written by rank {}); "
          "resume from another checkpoint",
          dir, file, e.rank);
    if (st.st_size != e.bytes)
      fail(
          "cannot resume from {}: {} has {} bytes, the manifest says {} (a truncated or "
          "replaced part); resume from another checkpoint",
          dir, file, static_cast<int64_t>(st.st_size), e.bytes);
    if (sha256_file(file) != e.sha256)
      fail(
          "cannot resume from {}: {} does not have the SHA-256 its manifest gives (its bytes "
          "changed since the save); resume from another checkpoint",
          dir, file);
  }
  return true;
}

}  // namespace kiln
