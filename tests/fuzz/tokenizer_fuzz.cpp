// The GPT-2, Llama 3 and bytes tokenizers: arbitrary bytes encode and decode back to the same
// bytes (with and without special tokens); arbitrary ids decode or are refused.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "fuzz_input.h"

namespace {

// Mode bit 0: GPT-2; else bit 4: Llama 3; else bytes.
const kiln::Tokenizer& tokenizer(uint8_t mode) {
  static const bool dir_set =
      setenv("KILN_TOKENIZER_DIR", KILN_SOURCE_DIR "/data/tokenizers", 0) == 0;
  static std::unique_ptr<kiln::Tokenizer> g = kiln::make_tokenizer("gpt2"),
                                          l = kiln::make_tokenizer("llama3"),
                                          b = kiln::make_tokenizer("bytes");
  (void)dir_set;
  return mode & 1 ? *g : mode & 16 ? *l : *b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const kiln::Tokenizer& tok = tokenizer(mode);
  data++, size--;
  if (mode & 2) {  // ids
    std::vector<int32_t> ids(size / 4);
    if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    kiln::fuzz::refusal_allowed([&] { tok.decode(ids.data(), ids.size()); });
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::EncodeCache cache;
  std::vector<int32_t> ids;
  tok.encode(text, mode & 4, ids, mode & 8 ? &cache : nullptr);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  if (tok.decode(ids.data(), ids.size()) != text) std::abort();  // not the exact inverse
  return 0;
}
