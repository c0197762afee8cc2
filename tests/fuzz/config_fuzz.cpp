// The TOML training config on arbitrary text, parsed and validated as `kiln train` does.
#include <string>

#include "fuzz_input.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::refusal_allowed([&] {
    kiln::parse_train_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz.toml",
                             {});
  });
  return 0;
}
