// trainer_state.json on arbitrary text: parsed, its config read through the config schema, and
// compared with a default config as a resume does.
#include <string>

#include "fuzz_input.h"
#include "train/trainer_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::refusal_allowed([&] {
    kiln::TrainerState s = kiln::parse_trainer_state(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz/trainer_state.json");
    kiln::TrainConfig saved = kiln::train_config_from_json(s.config, "fuzz/trainer_state.json");
    kiln::compare_resume_config(saved, saved);
  });
  return 0;
}
