#include "train/hf_weights.h"

#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file.h"

namespace fs = std::filesystem;

namespace kiln {

TensorFiles::TensorFiles(const std::string& path) : path_(path) {
  if (!fs::is_directory(path)) {
    owned_.push_back(std::make_unique<SafeTensorsReader>(path));
    files_.push_back(owned_.back().get());
    return;
  }
  const fs::path single = fs::path(path) / "model.safetensors";
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  if (fs::exists(single)) {
    owned_.push_back(std::make_unique<SafeTensorsReader>(single.string()));
  } else if (fs::exists(index)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(index.string(), "weights index"));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: no \"weight_map\" object (a Hugging Face index maps each tensor to its file)",
           index.string());
    std::set<std::string> shards;
    for (auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        fail("{}: weight_map[\"{}\"] is not a file name", index.string(), name);
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == "." || f == "..")
        fail("{}: weight_map[\"{}\"] = \"{}\" is not a file in the directory", index.string(), name,
             f);
      shards.insert(f);
    }
    for (const auto& f : shards)
      owned_.push_back(std::make_unique<SafeTensorsReader>((fs::path(path) / f).string()));
  } else {
    fail(
        "{}: neither model.safetensors nor model.safetensors.index.json there (give a Hugging "
        "Face model directory or a .safetensors file)",
        path);
  }
  for (const auto& f : owned_) files_.push_back(f.get());
}

const SafeTensorsReader* TensorFiles::find(const std::string& name) const {
  for (const SafeTensorsReader* f : files_)
    if (f->has(name)) return f;
  return nullptr;
}

std::vector<std::pair<std::string, const SafeTensorsReader*>> TensorFiles::names() const {
  std::vector<std::pair<std::string, const SafeTensorsReader*>> out;
  for (const SafeTensorsReader* f : files_)
    for (const auto& [name, e] : f->entries()) out.push_back({name, f});
  return out;
}

namespace {

// The tensors whose rows are the (padded) vocabulary.
bool vocab_table(const ModelConfig& c, const std::string& name) {
  if (c.llama()) return name == "model.embed_tokens.weight" || name == "lm_head.weight";
  return name == "wte.weight";
}

}  // namespace

std::vector<SafeTensorOut> named_tensors(const ParamLayout& layout, const ModelConfig& c,
                                         const float* base, const std::string& prefix) {
  std::vector<SafeTensorOut> out;
  for (const auto& t : layout.tensors) {
    std::vector<int64_t> shape = t.shape;
    if (vocab_table(c, t.name)) shape[0] = c.vocab_size;  // the padded rows are a suffix
    out.push_back({prefix + t.name, "F32", shape, base + t.offset});
  }
  return out;
}

void load_tensors(const TensorFiles& f, const ParamLayout& layout, const ModelConfig& c,
                  float* base, const std::string& prefix) {
  const char* family = c.llama() ? "Llama" : "GPT-2";
  for (const auto& [name, file] : f.names()) {
    std::string n = name;
    if (n.rfind(prefix, 0) != 0) continue;
    n = n.substr(prefix.size());
    bool known = false;
    if (c.llama()) {
      known = n.ends_with(".rotary_emb.inv_freq") || (n == "lm_head.weight" && c.tie_embeddings);
    } else {
      if (n.rfind("transformer.", 0) == 0) n = n.substr(12);
      known =
          n == "lm_head.weight" || n.ends_with(".attn.bias") || n.ends_with(".attn.masked_bias");
    }
    for (const auto& t : layout.tensors) known = known || t.name == n;
    if (!known)
      fail(
          "{}: unexpected tensor '{}' for a {} with n_layer={} (is this a {} checkpoint of the "
          "same size?)",
          file->path(), name, family, c.n_layer, family);
  }
  for (const auto& t : layout.tensors) {
    std::string name = prefix + t.name;
    if (!c.llama() && !f.has(name) && f.has(prefix + "transformer." + t.name))
      name = prefix + "transformer." + t.name;
    const SafeTensorsReader* file = f.find(name);
    if (!file)
      fail("{}: no tensor '{}' (a {} with n_layer={} has one)", f.path(), name, family, c.n_layer);
    std::vector<int64_t> shape = t.shape;
    float* dst = base + t.offset;
    if (vocab_table(c, t.name)) {
      shape[0] = c.vocab_size;
      const int64_t real = static_cast<int64_t>(c.vocab_size) * c.n_embd;
      std::memset(dst + real, 0, sizeof(float) * (t.numel - real));
    }
    file->read_f32(name, shape, dst);
  }
}

nlohmann::json hf_config(const ModelConfig& c) {
  if (c.llama()) {
    nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                        {"model_type", "llama"},
                        {"num_hidden_layers", c.n_layer},
                        {"num_attention_heads", c.n_head},
                        {"num_key_value_heads", c.kv_heads()},
                        {"hidden_size", c.n_embd},
                        {"intermediate_size", c.ffn_hidden},
                        {"vocab_size", c.vocab_size},
                        {"max_position_embeddings", c.block_size},
                        {"rms_norm_eps", c.norm_eps},
                        {"rope_theta", c.rope_theta},
                        {"hidden_act", "silu"},
                        {"tie_word_embeddings", c.tie_embeddings},
                        {"attention_bias", false},
                        {"mlp_bias", false},
                        {"torch_dtype", "float32"}};
    if (c.rope_llama3) {
      const RopeScaling& r = c.rope_scaling;
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", r.factor},
          {"low_freq_factor", r.low_freq_factor},
          {"high_freq_factor", r.high_freq_factor},
          {"original_max_position_embeddings", r.original_max_position_embeddings}};
    }
    return j;
  }
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

ModelConfig config_from_hf(const nlohmann::json& j, const std::string& source, int vocab_multiple) {
  ModelConfig c;
  auto get = [&](const nlohmann::json& o, const char* key) {
    if (!o.contains(key) || !o[key].is_number_integer())
      fail("{}: missing or non-integer '{}'", source, key);
    return o[key].get<int>();
  };
  auto number = [&](const nlohmann::json& o, const char* key, double dflt) {
    if (!o.contains(key) || o[key].is_null()) return dflt;
    if (!o[key].is_number()) fail("{}: '{}' is not a number", source, key);
    return o[key].get<double>();
  };
  const std::string type = j.value("model_type", "gpt2");
  if (type == "llama" || type == "mistral") {
    c.family = "llama";
    c.n_layer = get(j, "num_hidden_layers");
    c.n_head = get(j, "num_attention_heads");
    c.n_kv_head = j.contains("num_key_value_heads") ? get(j, "num_key_value_heads") : c.n_head;
    c.n_embd = get(j, "hidden_size");
    c.ffn_hidden = get(j, "intermediate_size");
    c.block_size = get(j, "max_position_embeddings");
    c.vocab_size = get(j, "vocab_size");
    c.norm_eps = number(j, "rms_norm_eps", 1e-6);
    c.rope_theta = number(j, "rope_theta", 10000.0);
    c.tie_embeddings = j.value("tie_word_embeddings", false);
    if (j.contains("head_dim") && j["head_dim"].is_number_integer() &&
        j["head_dim"].get<int>() != c.n_embd / c.n_head)
      fail("{}: head_dim = {} is not hidden_size / num_attention_heads; kiln does not support it",
           source, j["head_dim"].get<int>());
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      const auto& r = j["rope_scaling"];
      const std::string rt = r.value("rope_type", r.value("type", ""));
      if (rt != "llama3")
        fail("{}: rope_scaling of type '{}' is not supported (kiln knows \"llama3\")", source, rt);
      c.rope_llama3 = true;
      c.rope_scaling.factor = static_cast<float>(number(r, "factor", 8));
      c.rope_scaling.low_freq_factor = static_cast<float>(number(r, "low_freq_factor", 1));
      c.rope_scaling.high_freq_factor = static_cast<float>(number(r, "high_freq_factor", 4));
      c.rope_scaling.original_max_position_embeddings = get(r, "original_max_position_embeddings");
    }
  } else if (type == "gpt2") {
    c.n_layer = get(j, "n_layer");
    c.n_head = get(j, "n_head");
    c.n_embd = get(j, "n_embd");
    c.block_size = get(j, "n_positions");
    c.vocab_size = get(j, "vocab_size");
  } else {
    fail("{}: model_type '{}' is not one kiln trains (\"gpt2\" or \"llama\")", source, type);
  }
  c.padded_vocab_size = pad_vocab(c.vocab_size, vocab_multiple);
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", source, e.what());
  }
  return c;
}

}  // namespace kiln
