#include "data/prepare.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"
#include "core/input_file.h"
#include "core/sha256.h"
#include "data/shards.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;

namespace kiln {

size_t first_invalid_utf8(const std::string& text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    int len = decode_utf8(s, text.size(), i, &cp);
    if (len == 0 || cp == 0) return i;  // a NUL byte means binary, not text
    i += static_cast<size_t>(len);
  }
  return std::string::npos;
}

std::vector<size_t> safe_split_points(const std::string& text, size_t target) {
  // At p with text[p-1] == '\n', text[p-2] not whitespace and text[p] an ASCII letter, the
  // pre-tokenizer ends a piece "\n" at p whether or not the text continues: the newline cannot
  // join the letters (only a space can), nor the character before it.
  std::vector<size_t> cuts;
  auto space = [](char c) {
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  };
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  size_t next = target;
  for (size_t p = 2; p < text.size(); p++) {
    if (p < next) {
      p = next - 1;
      continue;
    }
    if (text[p - 1] == '\n' && !space(text[p - 2]) &&
        static_cast<unsigned char>(text[p - 2]) < 0x80 && letter(text[p])) {
      cuts.push_back(p);
      next = p + target;
    }
  }
  return cuts;
}

namespace {

struct Chunk {
  size_t file;
  size_t begin, end;
  bool starts_document;
  std::vector<int32_t> tokens;
};

std::vector<std::string> list_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    const auto st = fs::status(in, ec);  // follows symbolic links
    if (fs::is_directory(st)) {
      // Regular files only: a FIFO or a device found inside is skipped, not read.
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file()) found.push_back(e.path().string());
      if (found.empty()) fail("--input {}: the directory holds no regular files", in);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(st)) {
      files.push_back(in);
    } else if (!fs::exists(st)) {
      fail("--input {}: no such file or directory", in);
    } else {
      fail("--input {} is {}, not a regular file or a directory of text files", in, file_kind(in));
    }
  }
  if (files.empty()) fail("no input: give --input FILE_OR_DIR");
  return files;
}

}  // namespace

PrepareSummary prepare_dataset(const PrepareOptions& o) {
  const double t0 = now_seconds();
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))  // also refuses NaN
    fail("--val-fraction must be a number in [0, 1), got {}", o.val_fraction);
  if (o.shard_tokens < 1 || o.shard_tokens > kMaxShardTokens)
    fail("--shard-tokens must be in 1..{} (a shard's header counts its tokens in an int32), got {}",
         kMaxShardTokens, o.shard_tokens);
  if (o.threads < 0 || o.threads > kMaxPrepareThreads)
    fail("--threads must be in 0..{} (0 = all cores), got {}", kMaxPrepareThreads, o.threads);
  if (o.output.empty()) fail("--output is required");
  auto tok = make_tokenizer(o.tokenizer);
  const int token_bytes = shard_token_bytes(tok->vocab_size());

  std::vector<std::string> files = list_inputs(o.inputs);
  std::vector<std::string> texts(files.size());
  nlohmann::json sources = nlohmann::json::array();
  int64_t total_bytes = 0;
  for (size_t f = 0; f < files.size(); f++) {
    texts[f] = read_regular_file(files[f], "--input", SIZE_MAX);
    if (!o.allow_invalid_utf8) {
      size_t bad = first_invalid_utf8(texts[f]);
      if (bad != std::string::npos)
        fail(
            "{} is not UTF-8 text: invalid byte 0x{:02x} at offset {} (convert it to UTF-8, or "
            "pass --allow-invalid-utf8 to tokenize such bytes as bytes)",
            files[f], static_cast<unsigned char>(texts[f][bad]), bad);
    }
    total_bytes += static_cast<int64_t>(texts[f].size());
    sources.push_back({{"path", files[f]},
                       {"bytes", texts[f].size()},
                       {"sha256", sha256_hex(texts[f].data(), texts[f].size())}});
  }
  if (total_bytes == 0) {
    std::string names;
    for (size_t f = 0; f < files.size() && f < 5; f++) names += (f ? ", " : "") + files[f];
    fail("--input {}{}: empty, there is no text to tokenize", names,
         files.size() > 5 ? " and the others" : "");
  }

  // Chunks at fixed places, tokenized in parallel, joined in order.
  std::vector<Chunk> chunks;
  for (size_t f = 0; f < files.size(); f++) {
    size_t begin = 0;
    for (size_t cut : safe_split_points(texts[f], 1 << 20)) {
      chunks.push_back({f, begin, cut, begin == 0, {}});
      begin = cut;
    }
    chunks.push_back({f, begin, texts[f].size(), begin == 0, {}});
  }
  const bool show = o.progress && isatty(STDERR_FILENO);
  std::atomic<int64_t> done_bytes{0};
  int threads = o.threads > 0 ? o.threads : omp_get_num_procs();
#pragma omp parallel num_threads(threads)
  {
    EncodeCache cache;
#pragma omp for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks.size(); c++) {
      Chunk& ch = chunks[c];
      if (ch.starts_document) ch.tokens.push_back(tok->eot());
      tok->encode(std::string_view(texts[ch.file]).substr(ch.begin, ch.end - ch.begin), true,
                  ch.tokens, &cache);
      int64_t d = done_bytes += static_cast<int64_t>(ch.end - ch.begin);
      if (show && omp_get_thread_num() == 0) {
        double el = now_seconds() - t0, rate = d / 1e6 / std::max(el, 1e-9);
        fmt::print(stderr, "\rprepare: {:.1f}/{:.1f} MB  {:.1f} MB/s  ETA {:.0f}s   ", d / 1e6,
                   total_bytes / 1e6, rate, (total_bytes - d) / 1e6 / std::max(rate, 1e-9));
      }
    }
  }
  if (show) fmt::print(stderr, "\r{:72}\r", "");
  // The stream in the shards' token type: uint16 when the vocabulary fits (GPT-2: the shards
  // are llm.c's version 1, as always), else uint32 (version 7).
  std::vector<uint16_t> all16;
  std::vector<uint32_t> all32;
  for (auto& ch : chunks) {
    for (int32_t t : ch.tokens) {
      if (token_bytes == 2)
        all16.push_back(static_cast<uint16_t>(t));
      else
        all32.push_back(static_cast<uint32_t>(t));
    }
    std::vector<int32_t>().swap(ch.tokens);
  }
  const size_t total_tokens = token_bytes == 2 ? all16.size() : all32.size();
  const int64_t n_val = static_cast<int64_t>(static_cast<double>(total_tokens) * o.val_fraction);
  const int64_t n_train = static_cast<int64_t>(total_tokens) - n_val;

  // Shards go to a temporary directory and are moved into place only when all are written.
  fs::create_directories(o.output);
  std::string tmp = (fs::path(o.output) / (".tmp-prepare-" + std::to_string(getpid()))).string();
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  nlohmann::json manifest = {
      {"format", token_bytes == 2 ? "llm.c token shards, version 1 (uint16)"
                                  : "llm.c token shards, version 7 (uint32)"},
      {"tokenizer",
       {{"name", tok->name()}, {"vocab_size", tok->vocab_size()}, {"hash", tok->hash()}}},
      {"sources", sources},
      {"kiln_version", KILN_VERSION},
  };
  std::vector<std::string> names;
  try {
    auto write_split = [&](const char* split, int64_t from, int64_t to) {
      nlohmann::json shards = nlohmann::json::array();
      for (int64_t i = from, k = 0; i < to; i += o.shard_tokens, k++) {
        int64_t end = std::min(to, i + o.shard_tokens);
        std::string name = fmt::format("{}_{:06d}.bin", split, k);
        std::string path = (fs::path(tmp) / name).string();
        if (token_bytes == 2)
          write_shard(path, std::vector<uint16_t>(all16.begin() + i, all16.begin() + end));
        else
          write_shard(path, std::vector<uint32_t>(all32.begin() + i, all32.begin() + end));
        shards.push_back({{"file", name}, {"tokens", end - i}});
        names.push_back(name);
      }
      manifest[split] = {{"tokens", to - from}, {"shards", shards}};
    };
    write_split("train", 0, n_train);
    if (n_val > 0) write_split("val", n_train, n_train + n_val);
    // Publish: old shards of an earlier run go first, then the new ones, the manifest last.
    for (const auto& e : fs::directory_iterator(o.output)) {
      std::string name = e.path().filename().string();
      if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && name.ends_with(".bin"))
        fs::remove(e.path());
    }
    fs::remove(fs::path(o.output) / "manifest.json");
    for (const auto& name : names) fs::rename(fs::path(tmp) / name, fs::path(o.output) / name);
    fs::remove_all(tmp);
    write_file_atomic((fs::path(o.output) / "manifest.json").string(), manifest.dump(2) + "\n");
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  PrepareSummary s;
  s.files = static_cast<int64_t>(files.size());
  s.bytes = total_bytes;
  s.train_tokens = n_train;
  s.val_tokens = n_val;
  s.seconds = now_seconds() - t0;
  return s;
}

}  // namespace kiln
