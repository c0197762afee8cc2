#include "data/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "core/file.h"
#include "core/sha256.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// ---- Unicode classes of the GPT-2 pattern ------------------------------------------------------
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+

struct CodeRange {
  uint32_t lo, hi;
};
#include "data/unicode_tables.inc"

enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

template <size_t N>
bool in_ranges(const CodeRange (&r)[N], uint32_t cp) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp > r[mid].hi)
      lo = mid + 1;
    else if (cp < r[mid].lo)
      hi = mid;
    else
      return true;
  }
  return false;
}

struct AsciiTable {
  Cls cls[128];
  AsciiTable() {
    for (uint32_t c = 0; c < 128; c++)
      cls[c] = in_ranges(kLetterRanges, c)   ? kLetter
               : in_ranges(kNumberRanges, c) ? kNumber
               : in_ranges(kSpaceRanges, c)  ? kSpace
                                             : kOther;
  }
};
const AsciiTable kAscii;

Cls classify(uint32_t cp) {
  if (cp < 128) return kAscii.cls[cp];
  if (in_ranges(kLetterRanges, cp)) return kLetter;
  if (in_ranges(kNumberRanges, cp)) return kNumber;
  if (in_ranges(kSpaceRanges, cp)) return kSpace;
  return kOther;
}

// The code point at s[i]: its length and class. A byte that does not start a valid UTF-8
// sequence is one "character" of class Other, so invalid input is tokenized as bytes.
struct Char {
  int len;
  Cls cls;
};

inline Char next_char(const uint8_t* s, size_t n, size_t i) {
  if (s[i] < 0x80) return {1, kAscii.cls[s[i]]};
  uint32_t cp;
  int len = decode_utf8(s, n, i, &cp);
  if (len == 0) return {1, kOther};
  return {len, classify(cp)};
}

// End of the piece that starts at i.
size_t piece_end(const uint8_t* s, size_t n, size_t i) {
  // '(?:[sdmt]|ll|ve|re)
  if (s[i] == '\'' && i + 1 < n) {
    uint8_t c = s[i + 1];
    if (c == 's' || c == 'd' || c == 'm' || c == 't') return i + 2;
    if (i + 2 < n) {
      uint8_t d = s[i + 2];
      if ((c == 'l' && d == 'l') || (c == 'v' && d == 'e') || (c == 'r' && d == 'e')) return i + 3;
    }
  }
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
  size_t j = i;
  if (s[i] == ' ' && i + 1 < n) j = i + 1;
  Char c = next_char(s, n, j);
  if (c.cls != kSpace) {
    Cls cls = c.cls;
    j += c.len;
    while (j < n) {
      Char d = next_char(s, n, j);
      if (d.cls != cls) break;
      j += d.len;
    }
    return j;
  }
  // \s+(?!\S) | \s+
  j = i;
  size_t last = i;
  while (j < n) {
    Char d = next_char(s, n, j);
    if (d.cls != kSpace) break;
    last = j;
    j += d.len;
  }
  if (j == n) return j;       // the run reaches the end: all of it
  if (last > i) return last;  // leave the last whitespace to join the next piece
  return j;                   // a single whitespace character
}

// ---- GPT-2's byte <-> unicode map --------------------------------------------------------------

// bytes_to_unicode() of OpenAI's encoder.py: printable bytes map to themselves, the others to
// U+0100 and up, in byte order.
std::vector<uint32_t> byte_to_unicode() {
  std::vector<uint32_t> m(256);
  std::vector<bool> printable(256, false);
  for (int b = '!'; b <= '~'; b++) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; b++) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; b++) printable[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; b++) m[b] = printable[b] ? b : next++;
  return m;
}

// ---- the tokenizers ----------------------------------------------------------------------------

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "bytes"; }
  int vocab_size() const override { return 257; }
  int32_t eot() const override { return 256; }
  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
              EncodeCache*) const override {
    size_t i = 0;
    while (i < text.size()) {
      if (allow_special && text.compare(i, kEndOfText.size(), kEndOfText) == 0) {
        out.push_back(256);
        i += kEndOfText.size();
        continue;
      }
      out.push_back(static_cast<uint8_t>(text[i++]));
    }
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string out;
    for (size_t i = 0; i < n; i++) {
      if (ids[i] == 256)
        out += kEndOfText;
      else if (ids[i] >= 0 && ids[i] < 256)
        out.push_back(static_cast<char>(ids[i]));
      else
        fail("token id {} is outside the bytes vocabulary (0..256)", ids[i]);
    }
    return out;
  }
  std::string hash() const override { return "bytes-v1"; }
};

class Gpt2Tokenizer : public Tokenizer {
 public:
  explicit Gpt2Tokenizer(const std::string& dir);
  std::string name() const override { return "gpt2"; }
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int32_t eot() const override { return eot_; }
  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
              EncodeCache* cache) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::string hash() const override { return hash_; }

 private:
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out, EncodeCache* cache) const;
  static constexpr size_t kShortPiece = 64;  // longer pieces merge through a heap (bpe_long)
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_long(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t rank(std::string_view bytes) const {
    auto it = ranks_.find(bytes);
    return it == ranks_.end() ? INT32_MAX : it->second;
  }

  std::vector<std::string> tokens_;                      // id -> bytes
  std::unordered_map<std::string_view, int32_t> ranks_;  // bytes -> id (= merge rank)
  int32_t eot_ = -1;
  std::string hash_;
};

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) {
  std::string enc_path = (fs::path(dir) / "encoder.json").string();
  std::string bpe_path = (fs::path(dir) / "vocab.bpe").string();
  for (const auto& p : {enc_path, bpe_path})
    if (!fs::exists(p))
      fail("the GPT-2 vocabulary file {} is missing; run ./scripts/setup.sh, which fetches it", p);
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_file(enc_path, "GPT-2 vocabulary"));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON ({}); run ./scripts/setup.sh to fetch it again", enc_path, e.what());
  }
  // The unicode characters of encoder.json's keys stand for bytes.
  std::vector<uint32_t> b2u = byte_to_unicode();
  std::unordered_map<uint32_t, uint8_t> u2b;
  for (int b = 0; b < 256; b++) u2b[b2u[b]] = static_cast<uint8_t>(b);
  tokens_.resize(enc.size());
  std::vector<bool> seen(enc.size(), false);
  for (auto& [key, value] : enc.items()) {
    int64_t id = value.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(enc.size()) || seen[id])
      fail("{}: token '{}' has a bad or repeated id {}", enc_path, key, id);
    seen[id] = true;
    if (key == kEndOfText) {
      tokens_[id] = std::string(kEndOfText);
      eot_ = static_cast<int32_t>(id);
      continue;
    }
    std::string bytes;
    const auto* s = reinterpret_cast<const uint8_t*>(key.data());
    for (size_t i = 0; i < key.size();) {
      uint32_t cp;
      int len = s[i] < 0x80 ? 1 : (s[i] & 0xE0) == 0xC0 ? 2 : 3;
      cp = len == 1 ? s[i] : len == 2 ? (s[i] & 0x1F) : (s[i] & 0x0F);
      for (int k = 1; k < len; k++) cp = (cp << 6) | (s[i + k] & 0x3F);
      auto it = u2b.find(cp);
      if (it == u2b.end())
        fail("{}: token '{}' holds a character outside the byte map", enc_path, key);
      bytes.push_back(static_cast<char>(it->second));
      i += len;
    }
    tokens_[id] = std::move(bytes);
  }
  if (eot_ < 0) fail("{}: no <|endoftext|> token", enc_path);
  for (size_t id = 0; id < tokens_.size(); id++)
    if (static_cast<int32_t>(id) != eot_) ranks_.emplace(tokens_[id], static_cast<int32_t>(id));
  // vocab.bpe lists the merges in rank order; tiktoken ranks a merged piece by its id, which is
  // the same order. Check it, so a mismatched pair of files is caught here.
  std::ifstream bpe(bpe_path);
  if (!bpe) fail("cannot read {}; run ./scripts/setup.sh", bpe_path);
  std::string line;
  std::getline(bpe, line);  // "#version: 0.2"
  int32_t merge = 0;
  while (std::getline(bpe, line)) {
    if (line.empty()) continue;
    auto sp = line.find(' ');
    std::string merged;
    for (std::string part : {line.substr(0, sp), line.substr(sp + 1)}) {
      auto it = enc.find(part);
      if (it == enc.end())
        fail("{}: merge '{}' uses a piece missing from encoder.json", bpe_path, line);
      merged += tokens_[it->get<int64_t>()];
    }
    if (rank(merged) != 256 + merge)
      fail("{}: merge {} ('{}') does not match encoder.json's id order", bpe_path, merge, line);
    merge++;
  }
  hash_ = sha256_hex((sha256_file(enc_path) + sha256_file(bpe_path)).data(), 128);
}

// tiktoken's byte_pair_merge: the piece starts as single bytes; repeatedly merge the adjacent
// pair whose merged bytes have the lowest rank, the leftmost on ties, until no pair is in the
// vocabulary. Short pieces (nearly all of real text) scan a small array for the minimum, as
// tiktoken does; that is O(n^2) per piece, so long ones (a 1 MB word) keep the candidate pairs
// in a min-heap by (rank, position) over a linked list of parts: O(n log n), the same merges.
void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kShortPiece) return bpe_long(piece, out);
  const size_t n = piece.size();
  struct Part {
    size_t start;
    int32_t rank;  // of this part merged with the next
  };
  Part parts[kShortPiece + 1];
  size_t count = 0;
  for (size_t i = 0; i + 1 < n; i++) parts[count++] = {i, rank(piece.substr(i, 2))};
  parts[count++] = {n - 1, INT32_MAX};
  parts[count++] = {n, INT32_MAX};
  auto rank_at = [&](size_t i) {  // rank of parts[i] merged with parts[i+1]
    if (i + 2 >= count) return INT32_MAX;
    return rank(piece.substr(parts[i].start, parts[i + 2].start - parts[i].start));
  };
  while (count > 2) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < count; i++)
      if (parts[i].rank < best) best = parts[i].rank, at = i;
    if (best == INT32_MAX) break;
    std::copy(parts + at + 2, parts + count, parts + at + 1);
    count--;
    parts[at].rank = rank_at(at);
    if (at > 0) parts[at - 1].rank = rank_at(at - 1);
  }
  for (size_t i = 0; i + 1 < count; i++) {
    int32_t id = rank(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start));
    KILN_CHECK(id != INT32_MAX);
    out.push_back(id);
  }
}

void Gpt2Tokenizer::bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  // A part is named by its first byte, which a merge never moves: next[i] is where part i ends
  // (the next part's start, n for the last), prev[i] the part before it; rank[i] the rank of
  // part i merged with the next, or kDead once part i has been merged into the one before it.
  constexpr int32_t kDead = -1;
  std::vector<size_t> next(n), prev(n);
  std::vector<int32_t> rank_of(n);
  auto pair_rank = [&](size_t i) {
    size_t j = next[i];
    if (j >= n) return INT32_MAX;
    return rank(piece.substr(i, next[j] - i));
  };
  // Candidates by (rank, position): the lowest rank first, the leftmost on ties. An entry is
  // stale when its part died or its rank changed since; a rank names its bytes, so an entry
  // whose rank is still current stands for the same merge.
  using Candidate = std::pair<int32_t, size_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (size_t i = 0; i < n; i++) next[i] = i + 1, prev[i] = i - 1;
  for (size_t i = 0; i < n; i++) {
    rank_of[i] = pair_rank(i);
    if (rank_of[i] != INT32_MAX) heap.emplace(rank_of[i], i);
  }
  while (!heap.empty()) {
    auto [r, i] = heap.top();
    heap.pop();
    if (rank_of[i] != r) continue;  // stale (or dead: r >= 0 > kDead)
    const size_t j = next[i];
    rank_of[j] = kDead;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    rank_of[i] = pair_rank(i);
    if (rank_of[i] != INT32_MAX) heap.emplace(rank_of[i], i);
    if (i > 0) {
      const size_t p = prev[i];
      rank_of[p] = pair_rank(p);
      if (rank_of[p] != INT32_MAX) heap.emplace(rank_of[p], p);
    }
  }
  for (size_t i = 0; i < n; i = next[i]) {
    int32_t id = rank(piece.substr(i, next[i] - i));
    KILN_CHECK(id != INT32_MAX);
    out.push_back(id);
  }
}

void Gpt2Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                                    EncodeCache* cache) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t j = piece_end(s, n, i);
    std::string_view piece = text.substr(i, j - i);
    i = j;
    int32_t whole = rank(piece);
    if (whole != INT32_MAX) {
      out.push_back(whole);
      continue;
    }
    if (cache) {
      auto it = cache->pieces.find(piece);
      if (it != cache->pieces.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
      size_t before = out.size();
      bpe(piece, out);
      // Long pieces are rare in text and would fill the cache with their bytes.
      if (cache->pieces.size() < 200000 && piece.size() <= kShortPiece)
        cache->pieces.emplace(std::string(piece),
                              std::vector<int32_t>(out.begin() + before, out.end()));
      continue;
    }
    bpe(piece, out);
  }
}

void Gpt2Tokenizer::encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
                           EncodeCache* cache) const {
  if (!allow_special) return encode_ordinary(text, out, cache);
  size_t i = 0;
  while (i <= text.size()) {
    size_t k = text.find(kEndOfText, i);
    encode_ordinary(text.substr(i, (k == std::string_view::npos ? text.size() : k) - i), out,
                    cache);
    if (k == std::string_view::npos) break;
    out.push_back(eot_);
    i = k + kEndOfText.size();
  }
}

std::string Gpt2Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= static_cast<int32_t>(tokens_.size()))
      fail("token id {} is outside the GPT-2 vocabulary (0..{})", ids[i], tokens_.size() - 1);
    out += tokens_[ids[i]];
  }
  return out;
}

std::string find_gpt2_dir() {
  std::vector<std::string> tried;
  auto ok = [&](const fs::path& d) {
    tried.push_back(d.string());
    return fs::exists(d / "encoder.json") && fs::exists(d / "vocab.bpe");
  };
  if (const char* env = std::getenv("KILN_TOKENIZER_DIR"); env && *env) {
    if (ok(env)) return env;
  }
  if (std::string exe = self_executable(); !exe.empty()) {
    fs::path d = fs::path(exe).parent_path().parent_path() / "data" / "tokenizers" / "gpt2";
    if (ok(d)) return d.string();
  }
  if (ok(fs::path("data") / "tokenizers" / "gpt2")) return "data/tokenizers/gpt2";
  std::string where;
  for (const auto& t : tried) where += (where.empty() ? "" : ", ") + t;
  fail(
      "the GPT-2 vocabulary (encoder.json, vocab.bpe) was not found (looked in {}); run "
      "./scripts/setup.sh, which fetches it, or set KILN_TOKENIZER_DIR",
      where);
}

}  // namespace

int decode_utf8(const uint8_t* s, size_t n, size_t i, uint32_t* cp) {
  uint8_t b = s[i];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  int len;
  uint32_t c;
  if ((b & 0xE0) == 0xC0)
    len = 2, c = b & 0x1F;
  else if ((b & 0xF0) == 0xE0)
    len = 3, c = b & 0x0F;
  else if ((b & 0xF8) == 0xF0)
    len = 4, c = b & 0x07;
  else
    return 0;
  if (i + len > n) return 0;
  for (int k = 1; k < len; k++) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i + k] & 0x3F);
  }
  static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < min_cp[len] || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return 0;
  *cp = c;
  return len;
}

void gpt2_pretokenize(std::string_view text, std::vector<std::pair<size_t, size_t>>& pieces) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    size_t j = piece_end(s, text.size(), i);
    pieces.emplace_back(i, j);
    i = j;
  }
}

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir) {
  return std::make_unique<Gpt2Tokenizer>(dir);
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2") return load_gpt2_tokenizer(find_gpt2_dir());
  fail("unknown tokenizer '{}': use \"gpt2\" or \"bytes\"", name);
}

}  // namespace kiln
