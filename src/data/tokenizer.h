// Tokenizers: text (UTF-8 bytes) to token ids and back.
//
//   gpt2   OpenAI's GPT-2 byte-level BPE, equal to tiktoken's "gpt2" encoding: its
//          pre-tokenization pattern, byte-to-unicode map and merges by rank; <|endoftext|> = 50256.
//   bytes  one token per byte; 256 = end of text; vocabulary 257.
//
// encode() is const and thread-safe; each thread may pass its own EncodeCache to reuse the BPE
// of repeated pieces. Decoding is the exact inverse of encoding, for any bytes, valid UTF-8 or
// not.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln {

class EncodeCache {
 public:
  // Looked up by string_view without building a key (transparent hash and equality).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> pieces;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eot() const = 0;  // the end-of-text token
  // Appends the ids of text to out. With allow_special, "<|endoftext|>" in the text becomes the
  // end-of-text token; otherwise it is ordinary text (tiktoken's encode_ordinary).
  virtual void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out,
                      EncodeCache* cache = nullptr) const = 0;
  // Throws naming the id if one is outside the vocabulary.
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  // Identifies the vocabulary (a sha256), recorded in data manifests.
  virtual std::string hash() const = 0;

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const {
    std::vector<int32_t> out;
    encode(text, allow_special, out);
    return out;
  }
};

// "gpt2" or "bytes". The GPT-2 files (encoder.json, vocab.bpe) are looked up in
// $KILN_TOKENIZER_DIR, then <dir of the kiln binary>/../data/tokenizers/gpt2, then
// ./data/tokenizers/gpt2; scripts/setup.sh puts them there.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

// Loads GPT-2's vocabulary from a directory holding encoder.json and vocab.bpe.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir);

// Decodes the UTF-8 sequence at s[i] (n bytes in all): returns its length and sets *cp, or
// returns 0 if the bytes there are not valid UTF-8 (truncated, overlong, a surrogate, past
// U+10FFFF).
int decode_utf8(const uint8_t* s, size_t n, size_t i, uint32_t* cp);

// The GPT-2 pre-tokenizer alone: splits text into pieces, each appended as [begin, end).
// Exposed for tests and benchmarks.
void gpt2_pretokenize(std::string_view text, std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace kiln
