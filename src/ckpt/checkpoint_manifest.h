// A checkpoint's manifest (`manifest.json`, written last before the directory is published):
// every file of the checkpoint, which rank wrote it, its size in bytes and its SHA-256. A resume
// reads it first and refuses a checkpoint whose part is missing, of another size or another
// digest, naming the file, instead of failing later inside a reader (or not at all: a truncated
// shard can still parse). SHA-256 rather than a cheaper CRC: OpenSSL runs it at about 2 GB/s
// with the CPU's SHA extensions, `sha256sum` checks it by hand, and a checkpoint is written once
// and read rarely. Checkpoints of earlier kiln versions have no manifest and are read as before.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

struct ManifestEntry {
  std::string name;  // relative to the checkpoint directory
  int64_t bytes = 0;
  std::string sha256;
  int rank = 0;  // the rank that wrote it
};

inline constexpr const char* kManifestFile = "manifest.json";

// The entry of dir/name as it is on disk now (stat and a digest of its bytes).
ManifestEntry manifest_entry(const std::string& dir, const std::string& name, int rank);

std::string manifest_json(int64_t step, const std::vector<ManifestEntry>& files);
std::vector<ManifestEntry> parse_manifest(const std::string& text, const std::string& source);

// Checks dir against its manifest; false when it has none (an earlier kiln's checkpoint).
// Throws naming the file for a part that is missing, of another size or another SHA-256.
bool verify_checkpoint_manifest(const std::string& dir);

}  // namespace kiln
