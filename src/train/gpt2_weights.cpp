#include "train/gpt2_weights.h"

#include <cstring>

#include "core/error.h"

namespace kiln {

std::vector<SafeTensorOut> gpt2_named_tensors(const ParamLayout& layout, const ModelConfig& c,
                                              const float* base, const std::string& prefix) {
  std::vector<SafeTensorOut> out;
  for (const auto& t : layout.tensors) {
    std::vector<int64_t> shape = t.shape;
    if (t.name == "wte.weight") shape[0] = c.vocab_size;  // the padded rows are a suffix
    out.push_back({prefix + t.name, "F32", shape, base + t.offset});
  }
  return out;
}

void gpt2_load_tensors(const SafeTensorsReader& f, const ParamLayout& layout, const ModelConfig& c,
                       float* base, const std::string& prefix) {
  for (const auto& [name, e] : f.entries()) {
    std::string n = name;
    if (n.rfind(prefix, 0) != 0) continue;
    n = n.substr(prefix.size());
    if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
    bool known =
        n == "lm_head.weight" || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias");
    for (const auto& t : layout.tensors) known = known || t.name == n;
    if (!known)
      fail(
          "{}: unexpected tensor '{}' for a GPT-2 with n_layer={} (is this a GPT-2 checkpoint of "
          "the same size?)",
          f.path(), name, c.n_layer);
  }
  for (const auto& t : layout.tensors) {
    std::string name = prefix + t.name;
    if (!f.has(name) && f.has(prefix + "transformer." + t.name))
      name = prefix + "transformer." + t.name;
    std::vector<int64_t> shape = t.shape;
    float* dst = base + t.offset;
    if (t.name == "wte.weight") {
      shape[0] = c.vocab_size;
      std::memset(dst + static_cast<int64_t>(c.vocab_size) * c.n_embd, 0,
                  sizeof(float) * (t.numel - static_cast<int64_t>(c.vocab_size) * c.n_embd));
    }
    f.read_f32(name, shape, dst);
  }
}

nlohmann::json gpt2_hf_config(const ModelConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_embd", c.n_embd},
          {"n_positions", c.block_size},
          {"n_ctx", c.block_size},
          {"vocab_size", c.vocab_size},
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5},
          {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},
          {"attn_pdrop", 0.0},
          {"tie_word_embeddings", true},
          {"bos_token_id", c.vocab_size - 1},
          {"eos_token_id", c.vocab_size - 1},
          {"torch_dtype", "float32"}};
}

ModelConfig gpt2_config_from_hf(const nlohmann::json& j, const std::string& source,
                               int vocab_multiple) {
  ModelConfig c;
  auto get = [&](const char* key) {
    if (!j.contains(key) || !j[key].is_number_integer())
      fail("{}: missing or non-integer '{}'", source, key);
    return j[key].get<int>();
  };
  c.n_layer = get("n_layer");
  c.n_head = get("n_head");
  c.n_embd = get("n_embd");
  c.block_size = get("n_positions");
  c.vocab_size = get("vocab_size");
  c.padded_vocab_size = pad_vocab(c.vocab_size, vocab_multiple);
  c.validate();
  return c;
}

}  // namespace kiln
