// trainer_state.json: the step, AdamW's step count, the data position, the RNG and the resolved
// config of the run that wrote a checkpoint. Read back it is untrusted input: every value is
// checked (type, range, consistency) and errors name the file and the key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/config.h"

namespace kiln {

struct TrainerState {
  int64_t step = 0;           // optimizer steps done
  int64_t adam_steps = 0;     // steps that updated the weights (step - skipped_steps)
  int64_t skipped_steps = 0;  // steps skipped for a non-finite loss or norm
  // The loader's position: micro-batches served, each a global micro-batch of world * B
  // sequences (data/loader.h).
  uint64_t train_position = 0;
  // Sequences of the training data consumed by the whole job; 0 in checkpoints of kiln 0.1.0
  // before it was recorded (the position is then taken in the writer's units).
  uint64_t train_sequences = 0;
  uint64_t train_tokens = 0;  // tokens in data.train: its identity for a resume (0: unknown)
  uint64_t rng_state = 0;
  nlohmann::json config;  // TrainConfig::to_json() of the writer
};

nlohmann::json trainer_state_to_json(const TrainerState& s);
// Throws kiln::Error naming `path` and the key for a missing key, a wrong type, a negative or
// fractional count, or counts that contradict each other.
TrainerState parse_trainer_state(const std::string& text, const std::string& path);

// What changes between the checkpoint's config and this run's a resume accepts (docs/
// checkpoints.md, "Resuming with another config"): the model and the data's identity must stay
// (refused, naming the key); optimizer and schedule keys may change and are reported; layout,
// logging and checkpoint cadence change freely.
struct ResumeDiff {
  std::vector<std::string> refused;  // "model.n_embd: the checkpoint has 32, the config 64"
  std::vector<std::string> changed;  // "train.lr: 0.0006 -> 0.0003"
};
ResumeDiff compare_resume_config(const TrainConfig& saved, const TrainConfig& now);

}  // namespace kiln
