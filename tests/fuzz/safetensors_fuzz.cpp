// The safetensors reader on arbitrary bytes: the header checks, then every tensor read.
#include <vector>

#include "ckpt/safetensors.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = kiln::fuzz::as_file(data, size, "model.safetensors");
  kiln::fuzz::refusal_allowed([&] {
    kiln::SafeTensorsReader r(path);
    for (const auto& entry : r.entries()) {
      const std::string& name = entry.first;
      const kiln::SafeTensorEntry& e = entry.second;
      kiln::fuzz::refusal_allowed([&] {
        std::vector<float> out(static_cast<size_t>(e.numel()));
        r.read_f32(name, e.shape, out.data());
      });
      kiln::fuzz::refusal_allowed([&] { r.read_f64(name); });
      kiln::fuzz::refusal_allowed([&] { r.read_i32(name); });
    }
  });
  return 0;
}
