// Tokenizers: text (UTF-8 bytes) to token ids and back.
//
// Every BPE vocabulary is one code, tiktoken's byte-level BPE over "ranks + pre-tokenizer
// pattern + special tokens": a rank is a token's id, a piece merges the adjacent pair of lowest
// rank until none is in the vocabulary.
//   gpt2    OpenAI's GPT-2, equal to tiktoken's "gpt2" encoding: GPT-2's pattern, 50,256 ranks
//           from encoder.json (checked against vocab.bpe); <|endoftext|> = 50256.
//   llama3  Meta's Llama 3, equal to its tiktoken reference: Llama 3's pattern, 128,000 ranks
//           from Hugging Face's tokenizer.json, 256 special tokens 128000..128255
//           (<|begin_of_text|> = 128000, <|end_of_text|> = 128001, the end of text); 128,256.
//   cl100k  OpenAI's cl100k_base (tiktoken's own JSON): Llama 3's pattern (the same regex),
//           100,256 ranks, <|endoftext|> = 100257 and four more special tokens; 100,277.
//   bytes   one token per byte; 256 = end of text; vocabulary 257.
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
  // Appends the ids of text to out. With allow_special, a special token's text ("<|endoftext|>",
  // "<|begin_of_text|>", ...) becomes its id; otherwise it is ordinary text (tiktoken's
  // encode_ordinary).
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

// The names make_tokenizer knows, for help texts and errors: "gpt2, llama3, cl100k or bytes".
extern const char* const kTokenizerNames;

// "gpt2", "llama3", "cl100k" or "bytes". A vocabulary's files (gpt2: encoder.json, vocab.bpe;
// llama3: tokenizer.json; cl100k: cl100k_base.json) are looked up in $KILN_TOKENIZER_DIR, then
// $KILN_TOKENIZER_DIR/<name>, then <dir of the kiln binary>/../data/tokenizers/<name>, then
// ./data/tokenizers/<name>; scripts/setup.sh puts them there.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

// Loads GPT-2's vocabulary from a directory holding encoder.json and vocab.bpe.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& dir);
// Loads Llama 3's vocabulary from a directory holding Hugging Face's tokenizer.json.
std::unique_ptr<Tokenizer> load_llama3_tokenizer(const std::string& dir);
// Loads cl100k_base from a directory holding tiktoken's cl100k_base.json (npm package tiktoken).
std::unique_ptr<Tokenizer> load_cl100k_tokenizer(const std::string& dir);

// Decodes the UTF-8 sequence at s[i] (n bytes in all): returns its length and sets *cp, or
// returns 0 if the bytes there are not valid UTF-8 (truncated, overlong, a surrogate, past
// U+10FFFF).
int decode_utf8(const uint8_t* s, size_t n, size_t i, uint32_t* cp);

// The pre-tokenizer patterns, each a hand-written scanner (no regex engine):
//   kGpt2    '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kLlama3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (also cl100k's)
enum class Pattern { kGpt2, kLlama3 };

// A pre-tokenizer alone: splits text into pieces, each appended as [begin, end). Exposed for
// tests and benchmarks.
void pretokenize(Pattern pattern, std::string_view text,
                 std::vector<std::pair<size_t, size_t>>& pieces);
inline void gpt2_pretokenize(std::string_view text,
                             std::vector<std::pair<size_t, size_t>>& pieces) {
  pretokenize(Pattern::kGpt2, text, pieces);
}

}  // namespace kiln
