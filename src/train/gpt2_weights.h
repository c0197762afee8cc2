// GPT-2 weights in Hugging Face's naming: what kiln writes as model.safetensors and config.json,
// and what --init-from and `kiln generate` read. The exported vocabulary is unpadded, so a file
// kiln writes is a valid Hugging Face GPT-2 checkpoint and the other way round.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "model/gpt2.h"

namespace kiln {

// Views of the flat buffer `base` as logical tensors (wte with vocab_size rows), named with
// `prefix` prepended (e.g. "exp_avg."). No copy: the views point into base.
std::vector<SafeTensorOut> gpt2_named_tensors(const ParamLayout& layout, const ModelConfig& c,
                                              const float* base, const std::string& prefix = "");

// Fills `base` from a safetensors file holding the tensors named as gpt2_named_tensors does.
// Accepts a "transformer." prefix and ignores attention-mask buffers and lm_head.weight (tied).
// Padded vocabulary rows are set to zero. Errors name the file and tensor.
void gpt2_load_tensors(const SafeTensorsReader& f, const ParamLayout& layout, const ModelConfig& c,
                       float* base, const std::string& prefix = "");

// Hugging Face config.json for GPT2LMHeadModel.
nlohmann::json gpt2_hf_config(const ModelConfig& c);
// Reads model sizes from a Hugging Face config.json (n_layer, n_head, n_embd, n_positions,
// vocab_size).
ModelConfig gpt2_config_from_hf(const nlohmann::json& j, const std::string& source,
                               int vocab_multiple);

}  // namespace kiln
