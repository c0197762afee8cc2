// The data manifest (manifest.json beside the shards) on arbitrary text.
#include <string_view>

#include "data/manifest.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::refusal_allowed([&] {
    kiln::parse_data_manifest(std::string_view(reinterpret_cast<const char*>(data), size),
                              "fuzz/manifest.json");
  });
  return 0;
}
