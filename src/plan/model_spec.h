// The published architectures `kiln plan` knows (presets), each a model/spec.h ModelSpec (the
// description the trainer uses too) with the recipe it was trained with.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/spec.h"
#include "plan/job.h"

namespace kiln::plan {

using kiln::attention_core_forward_flops_per_token;
using kiln::block_forward_flops_per_token;
using kiln::count_params;
using kiln::FfnKind;
using kiln::model_flops_per_token;
using kiln::ModelSpec;
using kiln::NormKind;
using kiln::ParamCounts;

// A published architecture with the training recipe it was published with; the recipe gives
// `kiln plan` its defaults for sequence length, batch and training tokens.
struct Preset {
  ModelSpec model;
  int seq_len = 0;
  int64_t global_batch_tokens = 0;
  double train_tokens = 0;
  std::string source;  // where the architecture and recipe are published
  // The job of that recipe: its sequence length, global batch and training tokens (the job's
  // other fields at their defaults).
  JobSpec job() const;
};
const std::vector<Preset>& presets();
// Throws kiln::Error listing the known names (and the closest one) when `name` is unknown.
const Preset& find_preset(const std::string& name);

}  // namespace kiln::plan
