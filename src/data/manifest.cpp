#include "data/manifest.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"

namespace kiln {
namespace {

using nlohmann::json;

// A non-negative integer that fits int64.
bool is_count(const json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
}

DataManifest::Split parse_split(const json& j, const std::string& key, const std::string& path) {
  auto bad = [&](const std::string& why) {
    fail("data manifest {}: \"{}\" {}; prepare the data again with `kiln data prepare`", path, key,
         why);
  };
  if (!j.is_object()) bad("is not an object {tokens, shards}");
  DataManifest::Split s;
  if (!j.contains("tokens") || !is_count(j["tokens"]))
    bad("has no \"tokens\" count (a non-negative integer)");
  s.tokens = static_cast<int64_t>(j["tokens"].get<uint64_t>());
  if (!j.contains("shards") || !j["shards"].is_array()) bad("has no \"shards\" list");
  int64_t sum = 0;
  for (const auto& e : j["shards"]) {
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string() || !e.contains("tokens") ||
        !is_count(e["tokens"]))
      bad(fmt::format("lists a shard {} that is not {{\"file\": name, \"tokens\": count}}",
                      e.dump().substr(0, 200)));
    DataManifest::Shard sh{e["file"].get<std::string>(),
                           static_cast<int64_t>(e["tokens"].get<uint64_t>())};
    if (sh.file.empty() || sh.file.find('/') != std::string::npos || sh.file == "." ||
        sh.file == "..")
      bad(fmt::format("lists a shard file '{}' that is not a plain file name", sh.file));
    if (__builtin_add_overflow(sum, sh.tokens, &sum)) bad("has token counts that overflow");
    s.shards.push_back(std::move(sh));
  }
  if (sum != s.tokens) bad(fmt::format("says {} tokens, its shards hold {}", s.tokens, sum));
  return s;
}

}  // namespace

DataManifest parse_data_manifest(std::string_view text, const std::string& path) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    fail("data manifest {} is not valid JSON; prepare the data again with `kiln data prepare`",
         path);
  if (!j.is_object())
    fail("data manifest {} is not a JSON object; prepare the data again with `kiln data prepare`",
         path);
  DataManifest m;
  auto bad = [&](const std::string& why) {
    fail("data manifest {}: {}; prepare the data again with `kiln data prepare`", path, why);
  };
  if (!j.contains("tokenizer") || !j["tokenizer"].is_object())
    bad("no \"tokenizer\" object {name, vocab_size}");
  const json& t = j["tokenizer"];
  if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
    bad("\"tokenizer.name\" is missing or not a string");
  m.tokenizer = t["name"].get<std::string>();
  if (!t.contains("vocab_size") || !is_count(t["vocab_size"]) ||
      t["vocab_size"].get<uint64_t>() < 1 || t["vocab_size"].get<uint64_t>() > kMaxVocabSize)
    bad(fmt::format("\"tokenizer.vocab_size\" is missing or not an integer in 1..{}",
                    kMaxVocabSize));
  m.vocab_size = static_cast<int64_t>(t["vocab_size"].get<uint64_t>());
  if (t.contains("hash")) {
    if (!t["hash"].is_string()) bad("\"tokenizer.hash\" is not a string");
    m.tokenizer_hash = t["hash"].get<std::string>();
  }
  if (j.contains("train")) m.train = parse_split(j["train"], "train", path);
  if (j.contains("val")) m.val = parse_split(j["val"], "val", path);
  return m;
}

DataManifest read_data_manifest(const std::string& path) {
  return parse_data_manifest(read_regular_file(path, "data manifest", size_t{64} << 20), path);
}

}  // namespace kiln
