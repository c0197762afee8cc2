// Model weights in Hugging Face's naming, for every family: what kiln writes as
// model.safetensors and config.json, and what --init-from, `kiln generate` and resume read.
// GPT-2's tensors are named as GPT2LMHeadModel's (without the "transformer." prefix), Llama's as
// LlamaForCausalLM's. The exported vocabulary is unpadded, so a file kiln writes is a valid
// Hugging Face checkpoint and the other way round.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/safetensors.h"
#include "model/model.h"

namespace kiln {

// One set of tensors from one or more safetensors files: a single file, or a Hugging Face
// directory holding model.safetensors or the shards model.safetensors.index.json lists.
class TensorFiles {
 public:
  // A .safetensors file or such a directory; errors name the path and say what was expected.
  explicit TensorFiles(const std::string& path);
  // A file already open (not owned; must outlive this).
  explicit TensorFiles(const SafeTensorsReader& file) : files_{&file} {}

  const std::string& path() const { return path_.empty() ? files_[0]->path() : path_; }
  bool has(const std::string& name) const { return find(name) != nullptr; }
  // The file holding `name`, or null.
  const SafeTensorsReader* find(const std::string& name) const;
  // Every tensor name, with the file it is in.
  std::vector<std::pair<std::string, const SafeTensorsReader*>> names() const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafeTensorsReader>> owned_;
  std::vector<const SafeTensorsReader*> files_;
};

// Views of the flat buffer `base` as logical tensors (vocabulary tables with vocab_size rows),
// named with `prefix` prepended (e.g. "exp_avg."). No copy: the views point into base.
std::vector<SafeTensorOut> named_tensors(const ParamLayout& layout, const ModelConfig& c,
                                         const float* base, const std::string& prefix = "");

// Fills `base` from tensors named as named_tensors does. GPT-2: accepts a "transformer." prefix
// and ignores attention-mask buffers and lm_head.weight (tied). Llama: ignores rotary inv_freq
// buffers, and lm_head.weight when the config ties it. Padded vocabulary rows are set to zero.
// Errors name the file and tensor.
void load_tensors(const TensorFiles& f, const ParamLayout& layout, const ModelConfig& c,
                  float* base, const std::string& prefix = "");

// Hugging Face config.json for GPT2LMHeadModel or LlamaForCausalLM.
nlohmann::json hf_config(const ModelConfig& c);
// Model sizes from a Hugging Face config.json (its model_type says the family; GPT-2's when it
// has none). Errors name `source` and the key.
ModelConfig config_from_hf(const nlohmann::json& j, const std::string& source, int vocab_multiple);

}  // namespace kiln
