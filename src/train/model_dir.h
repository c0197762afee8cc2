// A model directory in Hugging Face's form (model.safetensors + config.json), as `kiln generate`
// reads one and `kiln ckpt export` writes one: found in a checkpoint, a run directory or its
// checkpoints folder, loaded into kiln's flat layout, and written back whole.
#pragma once
#include <string>

#include "core/buffer.h"
#include "model/gpt2.h"

namespace kiln {

// `dir` itself when it holds model.safetensors, else the newest complete checkpoint of a run
// directory or checkpoints folder. An error names `what` (the option) and says what to give.
std::string resolve_model_dir(const std::string& dir, const std::string& what);

struct LoadedModel {
  std::string dir;
  ModelConfig config;
  Buffer<float> params;  // the flat layout of `config` (padded vocabulary rows zero)
};
// Reads config.json and model.safetensors of a model directory, checking both.
LoadedModel load_model_dir(const std::string& dir, int vocab_multiple = 128);

// `kiln ckpt export`: the model of a checkpoint (or run directory's newest), re-written from
// its logical tensors as a Hugging Face directory `out` (model.safetensors, config.json),
// without the optimizer state. `out` must not exist or be empty; it appears whole or not at all.
// Returns the checkpoint it exported.
std::string export_model(const std::string& from, const std::string& out);

}  // namespace kiln
