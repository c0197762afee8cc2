#include "data/tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
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

// ---- Unicode classes of the pre-tokenizer patterns (tokenizer.h) -------------------------------

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

// End of the GPT-2 piece that starts at i.
size_t gpt2_piece_end(const uint8_t* s, size_t n, size_t i) {
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

bool is_newline(uint8_t c) {
  return c == '\r' || c == '\n';
}

// End of the Llama 3 (and cl100k) piece that starts at i: the pattern's alternatives in order,
// each taken where the regex would take it (leftmost alternative that matches, greedy runs).
size_t llama3_piece_end(const uint8_t* s, size_t n, size_t i) {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive, so Unicode's simple case folding also lets
  // U+017F (long s, bytes C5 BF) stand for s.
  if (s[i] == '\'' && i + 1 < n) {
    uint8_t c = s[i + 1] | 0x20;  // ASCII lower case (letters only are compared)
    if (c == 's' || c == 'd' || c == 'm' || c == 't') return i + 2;
    if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return i + 3;
    if (i + 2 < n) {
      uint8_t d = s[i + 2] | 0x20;
      if ((c == 'l' && d == 'l') || (c == 'v' && d == 'e') || (c == 'r' && d == 'e')) return i + 3;
    }
  }
  auto letters_end = [&](size_t j) {  // end of the run of letters at j
    while (j < n) {
      Char d = next_char(s, n, j);
      if (d.cls != kLetter) break;
      j += d.len;
    }
    return j;
  };
  const Char c = next_char(s, n, i);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == kLetter) return letters_end(i);
  if (c.cls != kNumber && !is_newline(s[i]) && i + c.len < n &&
      next_char(s, n, i + c.len).cls == kLetter)
    return letters_end(i + c.len);
  // \p{N}{1,3}
  if (c.cls == kNumber) {
    size_t j = i + c.len;
    for (int k = 1; k < 3 && j < n; k++) {
      Char d = next_char(s, n, j);
      if (d.cls != kNumber) break;
      j += d.len;
    }
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t j = i;
  if (s[i] == ' ' && i + 1 < n && next_char(s, n, i + 1).cls == kOther) j = i + 1;
  if (next_char(s, n, j).cls == kOther) {
    while (j < n) {
      Char d = next_char(s, n, j);
      if (d.cls != kOther) break;
      j += d.len;
    }
    while (j < n && is_newline(s[j])) j++;
    return j;
  }
  // Here s[i] is whitespace. \s*[\r\n]+ ends after the run's last newline, if it has one;
  // else \s+(?!\S) | \s+ as in GPT-2's pattern.
  size_t last = i, after_newline = 0;
  j = i;
  while (j < n) {
    Char d = next_char(s, n, j);
    if (d.cls != kSpace) break;
    last = j;
    j += d.len;
    if (is_newline(s[last])) after_newline = j;
  }
  if (after_newline) return after_newline;
  if (j == n) return j;
  if (last > i) return last;
  return j;
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

// bytes -> rank, the lookup BPE spends most of its time in: open addressing with linear
// probing, at most half full, the keys' bytes in one arena. A slot is 16 bytes, so a probe is
// one cache line and no pointer is chased (std::unordered_map's nodes were, and were as slow
// as where the allocator happened to put them).
class RankTable {
 public:
  // Returns the id already holding these bytes, or -1 once inserted.
  int32_t insert(std::string_view key, int32_t id) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    const uint64_t h = std::hash<std::string_view>{}(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        KILN_CHECK(arena_.size() + key.size() <= UINT32_MAX);
        s = {static_cast<uint32_t>(h >> 32), static_cast<uint32_t>(arena_.size()),
             static_cast<uint32_t>(key.size()), id};
        arena_.append(key);
        count_++;
        return -1;
      }
      if (equal(s, h, key)) return s.id;
    }
  }
  int32_t find(std::string_view key) const {
    const uint64_t h = std::hash<std::string_view>{}(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return INT32_MAX;
      if (equal(s, h, key)) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t hash_high = 0, offset = 0, length = 0;
    int32_t id = -1;  // -1: empty
  };
  bool equal(const Slot& s, uint64_t h, std::string_view key) const {
    return s.hash_high == static_cast<uint32_t>(h >> 32) && s.length == key.size() &&
           std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0;
  }
  void grow() {
    std::vector<Slot> old(std::max<size_t>(16, slots_.size() * 2));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      const uint64_t h =
          std::hash<std::string_view>{}(std::string_view(arena_).substr(s.offset, s.length));
      size_t i = h & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0, count_ = 0;
  std::string arena_;
};

// One vocabulary, whatever file it came from: every id's bytes (a special token's are its text),
// which ids are special, the pattern, and a hash of the files.
struct BpeVocabulary {
  std::string name;
  Pattern pattern = Pattern::kGpt2;
  std::vector<std::string> tokens;  // id -> bytes; an id no file names is empty (cl100k's 100256)
  std::vector<std::pair<std::string, int32_t>> specials;  // text, id
  int32_t eot = -1;
  std::string hash;
  std::string source;  // the file, for errors
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocabulary v);
  std::string name() const override { return v_.name; }
  int vocab_size() const override { return static_cast<int>(v_.tokens.size()); }
  int32_t eot() const override { return v_.eot; }
  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
              EncodeCache* cache) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::string hash() const override { return v_.hash; }

 private:
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out, EncodeCache* cache) const;
  template <size_t (*PieceEnd)(const uint8_t*, size_t, size_t)>
  void encode_pieces(std::string_view text, std::vector<int32_t>& out, EncodeCache* cache) const;
  static constexpr size_t kShortPiece = 64;  // longer pieces merge through a heap (bpe_long)
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_long(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t rank(std::string_view bytes) const { return ranks_.find(bytes); }

  BpeVocabulary v_;
  RankTable ranks_;                                        // bytes -> id (= merge rank)
  std::unordered_map<std::string_view, int32_t> special_;  // "<|...|>" -> id
};

BpeTokenizer::BpeTokenizer(BpeVocabulary v) : v_(std::move(v)) {
  std::vector<bool> special(v_.tokens.size(), false);
  for (const auto& [text, id] : v_.specials) {
    // Every special token is "<|" + name + "|>" with no "|>" inside: encode finds one by its
    // first "|>", and no special token is a prefix of another.
    if (text.size() < 5 || text.compare(0, 2, "<|") != 0 ||
        text.compare(text.size() - 2, 2, "|>") != 0 || text.find("|>", 2) != text.size() - 2 ||
        text[text.size() - 3] == '|')
      fail("{}: special token '{}' is not of the form <|name|>", v_.source, text);
    KILN_CHECK(id >= 0 && static_cast<size_t>(id) < v_.tokens.size());
    special[id] = true;
    if (!special_.emplace(v_.tokens[id], id).second)
      fail("{}: special token '{}' appears twice", v_.source, text);
  }
  KILN_CHECK(v_.eot >= 0 && special[v_.eot]);
  for (size_t id = 0; id < v_.tokens.size(); id++) {
    if (special[id] || v_.tokens[id].empty()) continue;
    if (int32_t same = ranks_.insert(v_.tokens[id], static_cast<int32_t>(id)); same >= 0)
      fail("{}: token id {} repeats the bytes of id {}", v_.source, id, same);
  }
  for (int b = 0; b < 256; b++)
    if (rank(std::string(1, static_cast<char>(b))) == INT32_MAX)
      fail("{}: the vocabulary has no token for the byte 0x{:02x}", v_.source, b);
}

// ---- vocabulary files --------------------------------------------------------------------------

// A key of encoder.json or tokenizer.json: GPT-2's byte-level string, one character per byte.
std::string byte_level_to_bytes(const std::string& key, const std::string& path) {
  static const std::vector<int> u2b = [] {
    std::vector<int> m(512, -1);
    std::vector<uint32_t> b2u = byte_to_unicode();
    for (int b = 0; b < 256; b++) m[b2u[b]] = b;
    return m;
  }();
  std::string bytes;
  const auto* s = reinterpret_cast<const uint8_t*>(key.data());
  for (size_t i = 0; i < key.size();) {
    uint32_t cp;
    int len = decode_utf8(s, key.size(), i, &cp);
    if (len == 0 || cp >= u2b.size() || u2b[cp] < 0)
      fail("{}: token '{}' holds a character outside the byte map", path, key);
    bytes.push_back(static_cast<char>(u2b[cp]));
    i += len;
  }
  return bytes;
}

nlohmann::json read_json(const std::string& path, const char* what) {
  if (!fs::exists(path))
    fail("the {} file {} is missing; run ./scripts/setup.sh, which fetches it", what, path);
  try {
    return nlohmann::json::parse(read_file(path, what));
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not valid JSON ({}); run ./scripts/setup.sh to fetch it again", path, e.what());
  }
}

BpeVocabulary read_gpt2_vocabulary(const std::string& dir) {
  std::string enc_path = (fs::path(dir) / "encoder.json").string();
  std::string bpe_path = (fs::path(dir) / "vocab.bpe").string();
  for (const auto& p : {enc_path, bpe_path})
    if (!fs::exists(p))
      fail("the GPT-2 vocabulary file {} is missing; run ./scripts/setup.sh, which fetches it", p);
  nlohmann::json enc = read_json(enc_path, "GPT-2 vocabulary");
  BpeVocabulary v;
  v.name = "gpt2";
  v.pattern = Pattern::kGpt2;
  v.source = enc_path;
  v.tokens.resize(enc.size());
  std::vector<bool> seen(enc.size(), false);
  for (auto& [key, value] : enc.items()) {
    int64_t id = value.get<int64_t>();
    if (id < 0 || id >= static_cast<int64_t>(enc.size()) || seen[id])
      fail("{}: token '{}' has a bad or repeated id {}", enc_path, key, id);
    seen[id] = true;
    if (key == kEndOfText) {
      v.tokens[id] = std::string(kEndOfText);
      v.eot = static_cast<int32_t>(id);
      v.specials.emplace_back(key, v.eot);
      continue;
    }
    v.tokens[id] = byte_level_to_bytes(key, enc_path);
  }
  if (v.eot < 0) fail("{}: no <|endoftext|> token", enc_path);
  // vocab.bpe lists the merges in rank order; tiktoken ranks a merged piece by its id, which is
  // the same order. Check it, so a mismatched pair of files is caught here.
  std::unordered_map<std::string_view, int32_t> id_of;
  for (size_t id = 0; id < v.tokens.size(); id++)
    if (static_cast<int32_t>(id) != v.eot) id_of.emplace(v.tokens[id], static_cast<int32_t>(id));
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
      merged += v.tokens[it->get<int64_t>()];
    }
    auto it = id_of.find(merged);
    if (it == id_of.end() || it->second != 256 + merge)
      fail("{}: merge {} ('{}') does not match encoder.json's id order", bpe_path, merge, line);
    merge++;
  }
  v.hash = sha256_hex((sha256_file(enc_path) + sha256_file(bpe_path)).data(), 128);
  return v;
}

constexpr std::string_view kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Hugging Face's tokenizer.json for Llama 3: model.vocab maps 128,000 byte-level strings to
// their ids, which are tiktoken's ranks (Meta's tokenizer.model); added_tokens holds the 256
// special tokens. The merges list is not needed: tiktoken's BPE merges by the ranks alone.
BpeVocabulary read_llama3_vocabulary(const std::string& dir) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  nlohmann::json j = read_json(path, "Llama 3 vocabulary");
  BpeVocabulary v;
  v.name = "llama3";
  v.pattern = Pattern::kLlama3;
  v.source = path;
  try {
    const auto& model = j.at("model");
    if (model.at("type") != "BPE")
      fail("{}: model.type is {}, not BPE", path, model.at("type").dump());
    const auto& pre = j.at("pre_tokenizer").at("pretokenizers").at(0).at("pattern").at("Regex");
    if (pre.get<std::string>() != kLlama3Regex)
      fail(
          "{}: the pre-tokenizer pattern {} is not Llama 3's, which kiln's llama3 scanner "
          "implements",
          path, pre.dump());
    const auto& vocab = model.at("vocab");
    constexpr int32_t kRanks = 128000, kSpecials = 256;
    if (vocab.size() != static_cast<size_t>(kRanks))
      fail("{}: model.vocab has {} tokens, Llama 3 has {}", path, vocab.size(), kRanks);
    v.tokens.resize(kRanks + kSpecials);
    std::vector<bool> seen(v.tokens.size(), false);
    for (auto& [key, value] : vocab.items()) {
      int64_t id = value.get<int64_t>();
      if (id < 0 || id >= kRanks || seen[id])
        fail("{}: token '{}' has a bad or repeated id {}", path, key, id);
      seen[id] = true;
      v.tokens[id] = byte_level_to_bytes(key, path);
    }
    for (const auto& t : j.at("added_tokens")) {
      int64_t id = t.at("id").get<int64_t>();
      std::string text = t.at("content");
      if (id < kRanks || id >= kRanks + kSpecials || seen[id])
        fail("{}: added token '{}' has a bad or repeated id {} (Llama 3's are {}..{})", path, text,
             id, kRanks, kRanks + kSpecials - 1);
      seen[id] = true;
      v.tokens[id] = text;
      v.specials.emplace_back(text, static_cast<int32_t>(id));
    }
    if (v.specials.size() != static_cast<size_t>(kSpecials))
      fail("{}: {} added tokens, Llama 3 has {}", path, v.specials.size(), kSpecials);
    if (v.tokens[128000] != "<|begin_of_text|>" || v.tokens[128001] != "<|end_of_text|>")
      fail("{}: ids 128000 and 128001 are not <|begin_of_text|> and <|end_of_text|>", path);
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not a Llama 3 tokenizer.json ({}); run ./scripts/setup.sh", path, e.what());
  }
  v.eot = 128001;
  v.hash = sha256_file(path);
  return v;
}

// The base64 alphabet; -1 for other bytes.
int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < in.size() && in[i] != '='; i++) {
    int v = base64_value(in[i]);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  for (; i < in.size(); i++)
    if (in[i] != '=') return false;
  return !out.empty();
}

// tiktoken's cl100k_base.json (npm package tiktoken): {"pat_str", "special_tokens": {text: id},
// "bpe_ranks"}, the ranks in js-tiktoken's packed form: lines "<name> <first rank> <base64>...",
// the tokens of consecutive ranks.
BpeVocabulary read_cl100k_vocabulary(const std::string& dir) {
  const std::string path = (fs::path(dir) / "cl100k_base.json").string();
  nlohmann::json j = read_json(path, "cl100k vocabulary");
  BpeVocabulary v;
  v.name = "cl100k";
  v.pattern = Pattern::kLlama3;
  v.source = path;
  try {
    if (j.at("pat_str").get<std::string>() != kLlama3Regex)
      fail("{}: the pattern {} is not the one kiln's scanner implements", path,
           j.at("pat_str").dump());
    std::istringstream lines(j.at("bpe_ranks").get<std::string>());
    std::string line, bytes;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name, word;
      int64_t rank = -1;
      if (!(fields >> name >> rank) || rank < 0 || rank > 1000000)
        fail("{}: bpe_ranks has a bad line header", path);
      while (fields >> word) {
        if (!base64_decode(word, bytes)) fail("{}: bpe_ranks holds bad base64 '{}'", path, word);
        if (static_cast<size_t>(rank) >= v.tokens.size()) v.tokens.resize(rank + 1);
        if (!v.tokens[rank].empty()) fail("{}: rank {} is given twice", path, rank);
        v.tokens[rank++] = bytes;
      }
    }
    for (auto& [text, value] : j.at("special_tokens").items()) {
      int64_t id = value.get<int64_t>();
      if (id < 0 || id > 1000000) fail("{}: special token {} has a bad id {}", path, text, id);
      if (static_cast<size_t>(id) >= v.tokens.size()) v.tokens.resize(id + 1);
      if (!v.tokens[id].empty()) fail("{}: special token {} reuses id {}", path, text, id);
      v.tokens[id] = text;
      v.specials.emplace_back(text, static_cast<int32_t>(id));
      if (text == kEndOfText) v.eot = static_cast<int32_t>(id);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{} is not tiktoken's cl100k_base.json ({}); run ./scripts/setup.sh", path, e.what());
  }
  if (v.eot < 0) fail("{}: no <|endoftext|> special token", path);
  v.hash = sha256_file(path);
  return v;
}

// tiktoken's byte_pair_merge: the piece starts as single bytes; repeatedly merge the adjacent
// pair whose merged bytes have the lowest rank, the leftmost on ties, until no pair is in the
// vocabulary. Short pieces (nearly all of real text) scan a small array for the minimum, as
// tiktoken does; that is O(n^2) per piece, so long ones (a 1 MB word) keep the candidate pairs
// in a min-heap by (rank, position) over a linked list of parts: O(n log n), the same merges.
void BpeTokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
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

void BpeTokenizer::bpe_long(std::string_view piece, std::vector<int32_t>& out) const {
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

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                                   EncodeCache* cache) const {
  // The scanner is a template argument so that it inlines into the loop.
  if (v_.pattern == Pattern::kGpt2)
    encode_pieces<gpt2_piece_end>(text, out, cache);
  else
    encode_pieces<llama3_piece_end>(text, out, cache);
}

template <size_t (*PieceEnd)(const uint8_t*, size_t, size_t)>
void BpeTokenizer::encode_pieces(std::string_view text, std::vector<int32_t>& out,
                                 EncodeCache* cache) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    size_t j = PieceEnd(s, n, i);
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

// With allow_special, the text between special tokens is encoded as ordinary text. A special
// token "<|name|>" ends at the first "|>" after its "<|" (none holds "|>" inside), so the
// leftmost one is found by trying each "<|" in turn.
void BpeTokenizer::encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
                          EncodeCache* cache) const {
  if (!allow_special) return encode_ordinary(text, out, cache);
  size_t i = 0, from = 0;
  while (true) {
    size_t k = text.find("<|", from);
    size_t e = k == std::string_view::npos ? k : text.find("|>", k + 2);
    if (e == std::string_view::npos) break;
    auto it = special_.find(text.substr(k, e + 2 - k));
    if (it == special_.end()) {
      from = k + 1;
      continue;
    }
    encode_ordinary(text.substr(i, k - i), out, cache);
    out.push_back(it->second);
    i = from = e + 2;
  }
  encode_ordinary(text.substr(i), out, cache);
}

std::string BpeTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      fail("token id {} is outside the {} vocabulary (0..{})", ids[i], v_.name, vocab_size() - 1);
    const std::string& t = v_.tokens[ids[i]];
    if (t.empty()) fail("token id {} is not a token of the {} vocabulary", ids[i], v_.name);
    out += t;
  }
  return out;
}

// Where a vocabulary's files are: the first directory that holds all of them.
std::string find_vocab_dir(const std::string& name, const std::vector<std::string>& files) {
  std::vector<std::string> tried;
  auto ok = [&](const fs::path& d) {
    tried.push_back(d.string());
    for (const auto& f : files)
      if (!fs::exists(d / f)) return false;
    return true;
  };
  if (const char* env = std::getenv("KILN_TOKENIZER_DIR"); env && *env) {
    if (ok(env)) return env;
    if (ok(fs::path(env) / name)) return (fs::path(env) / name).string();
  }
  if (std::string exe = self_executable(); !exe.empty()) {
    fs::path d = fs::path(exe).parent_path().parent_path() / "data" / "tokenizers" / name;
    if (ok(d)) return d.string();
  }
  if (ok(fs::path("data") / "tokenizers" / name)) return "data/tokenizers/" + name;
  std::string where, list;
  for (const auto& t : tried) where += (where.empty() ? "" : ", ") + t;
  for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
  fail(
      "the {} vocabulary ({}) was not found (looked in {}); run ./scripts/setup.sh, which fetches "
      "it, or set KILN_TOKENIZER_DIR",
      name, list, where);
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

void pretokenize(Pattern pattern, std::string_view text,
                 std::vector<std::pair<size_t, size_t>>& pieces) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    size_t j = pattern == Pattern::kGpt2 ? gpt2_piece_end(s, text.size(), i)
                                         : llama3_piece_end(s, text.size(), i);
    pieces.emplace_back(i, j);
    i = j;
  }
}

const char* const kTokenizerNames = "gpt2, llama3, cl100k or bytes";

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir) {
  return std::make_unique<BpeTokenizer>(read_gpt2_vocabulary(dir));
}

std::unique_ptr<Tokenizer> load_llama3_tokenizer(const std::string& dir) {
  return std::make_unique<BpeTokenizer>(read_llama3_vocabulary(dir));
}

std::unique_ptr<Tokenizer> load_cl100k_tokenizer(const std::string& dir) {
  return std::make_unique<BpeTokenizer>(read_cl100k_vocabulary(dir));
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2")
    return load_gpt2_tokenizer(find_vocab_dir(name, {"encoder.json", "vocab.bpe"}));
  if (name == "llama3") return load_llama3_tokenizer(find_vocab_dir(name, {"tokenizer.json"}));
  if (name == "cl100k") return load_cl100k_tokenizer(find_vocab_dir(name, {"cl100k_base.json"}));
  fail("unknown tokenizer '{}': use {}", name, kTokenizerNames);
}

}  // namespace kiln
