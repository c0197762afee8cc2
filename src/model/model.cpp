#include "model/model.h"

#include "core/clock.h"
#include "core/error.h"
#include "model/gpt2.h"

namespace kiln {

void ModelConfig::validate() const {
  auto positive = [](int v, const char* name) {
    if (v <= 0) fail("model.{} must be positive, got {}", name, v);
  };
  if (family != "gpt2" && family != "llama")
    fail("model.family must be \"gpt2\" or \"llama\", got '{}'", family);
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  if (n_embd % n_head != 0)
    fail("model.n_embd ({}) must be divisible by model.n_head ({})", n_embd, n_head);
  if (padded_vocab_size < vocab_size)
    fail("padded vocabulary {} is smaller than model.vocab_size {}", padded_vocab_size, vocab_size);
  if (!llama()) return;
  if (n_kv_head < 0) fail("model.n_kv_head must be positive, got {}", n_kv_head);
  if (n_head % kv_heads() != 0)
    fail("model.n_head ({}) must be a multiple of model.n_kv_head ({})", n_head, kv_heads());
  positive(ffn_hidden, "ffn_hidden");
  if (head_dim() % 2 != 0)
    fail("rotary embeddings need an even head size; model.n_embd / model.n_head = {}", head_dim());
  if (!(norm_eps > 0)) fail("model.norm_eps must be positive, got {}", norm_eps);
  if (!(rope_theta > 0)) fail("model.rope_theta must be positive, got {}", rope_theta);
  if (rope_scaling.enabled() && (!(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
                                 rope_scaling.original_max_position <= 0))
    fail(
        "model.rope_scaling needs high_freq_factor > low_freq_factor and a positive "
        "original_max_position (got {}, {}, {})",
        rope_scaling.high_freq_factor, rope_scaling.low_freq_factor,
        rope_scaling.original_max_position);
}

int pad_vocab(int vocab, int multiple) {
  if (multiple <= 1) return vocab;
  return (vocab + multiple - 1) / multiple * multiple;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  fail("no parameter named '{}'", name);
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.offset = total;
  t.decay = decay;
  total += t.numel;
  tensors.push_back(std::move(t));
}

ProfileTimer::ProfileTimer(Profile& p, double Profile::*field)
    : p_(p), field_(field), t0_(p.enabled ? now_seconds() : 0) {}

ProfileTimer::~ProfileTimer() {
  if (p_.enabled) p_.*field_ += now_seconds() - t0_;
}

Model::Model(const ModelConfig& c, int B, int T, const ModelOptions& opts, ParamLayout layout)
    : cfg_(c), B_(B), T_(T), opts_(opts), layout_(std::move(layout)) {
  c.validate();
  if (T > c.block_size) fail("sequence length {} exceeds model.block_size {}", T, c.block_size);
  StageSpec& st = opts_.stage;
  if (st.last < 0) st.last = c.n_layer;
  if (st.first < 0 || st.first > st.last || st.last > c.n_layer)
    fail("a stage of layers [{}, {}) does not fit a model of {} layers", st.first, st.last,
         c.n_layer);
  if (st.embedding && st.first != 0)
    fail("a stage with the embedding starts at layer 0, not {}", st.first);
  if (st.head && st.last != c.n_layer)
    fail("a stage with the head ends at the last layer ({}), not {}", c.n_layer, st.last);
  if (opts_.slots < 1) fail("a model needs at least one activation slot, got {}", opts_.slots);
  if (opts_.kv_cache &&
      (B != 1 || T != 1 || !st.embedding || !st.head || opts_.slots != 1 || opts_.bf16))
    fail("a decoding model (kv_cache) is the whole fp32 model with B = T = 1 and one slot");
}

void Model::set_weights(const float* params) {
  if (!opts_.bf16) return;
  if (!own_weights_) own_weights_ = std::make_unique<Bf16WeightCopy>(layout_.total);
  own_weights_->refresh(params);
  weights_ = own_weights_.get();
}

std::unique_ptr<Model> make_model(const ModelConfig& c, int B, int T, ModelOptions opts) {
  c.validate();
  return std::make_unique<Gpt2>(c, B, T, opts);
}

ParamLayout param_layout(const ModelConfig& c) {
  return gpt2_param_layout(c);
}

void init_params(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed) {
  gpt2_init(layout, c, params, seed);
}

ModelSpec model_spec(const ModelConfig& c, bool padded, const std::string& name) {
  return gpt2_spec(c, padded, name.empty() ? c.family : name);
}

int64_t num_params(const ModelConfig& c) {
  return gpt2_num_params(c);
}

double flops_per_token(const ModelConfig& c, int T) {
  return gpt2_flops_per_token(c, T);
}

}  // namespace kiln
