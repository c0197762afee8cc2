// A token shard on arbitrary bytes: the header checks, every token read, and a few batches of
// the loader over it.
#include <algorithm>
#include <vector>

#include "data/loader.h"
#include "data/shards.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::as_file(data, size, "train_000000.bin");
  kiln::fuzz::refusal_allowed([&] {
    kiln::ShardSet s({path}, "data.train");
    std::vector<int32_t> all(static_cast<size_t>(s.num_tokens()));
    kiln::fuzz::refusal_allowed([&] { s.read(0, s.num_tokens(), all.data(), 50257); });
    const int T = 1 + static_cast<int>(size % 7), B = 1 + static_cast<int>(size % 3);
    kiln::Loader l(s, B, T, 65536, /*shuffle=*/size % 2 == 0, size);
    std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
    for (int k = 0; k < 3; k++) l.next(in.data(), tg.data());
  });
  return 0;
}
