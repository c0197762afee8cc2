#include "train/trainer_state.h"

#include <cmath>

#include "core/error.h"

namespace kiln {

nlohmann::json trainer_state_to_json(const TrainerState& s) {
  return {
      {"step", s.step},
      {"adam_steps", s.adam_steps},
      {"skipped_steps", s.skipped_steps},
      {"data",
       {{"train_position", s.train_position},
        {"train_sequences", s.train_sequences},
        {"train_tokens", s.train_tokens}}},
      {"rng_state", s.rng_state},
      {"config", s.config},
      {"kiln_version", KILN_VERSION},
  };
}

namespace {

// A count: a JSON integer >= 0 (not 1.5, not -1, not "3").
uint64_t count_at(const nlohmann::json& obj, const char* key, const std::string& where,
                  const std::string& path, bool required, uint64_t fallback = 0) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required)
      fail(
          "{}: '{}{}' is missing; the checkpoint is damaged or not kiln's: resume from another "
          "checkpoint (remove this one's directory)",
          path, where, key);
    return fallback;
  }
  if (!it->is_number_integer() || (it->is_number_integer() && !it->is_number_unsigned()))
    fail(
        "{}: '{}{}' must be a non-negative integer, got {}; the checkpoint is damaged: resume "
        "from another checkpoint (remove this one's directory)",
        path, where, key, it->dump());
  return it->get<uint64_t>();
}

}  // namespace

TrainerState parse_trainer_state(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    fail(
        "{}: not a JSON object; the checkpoint is damaged: resume from another checkpoint "
        "(remove this one's directory)",
        path);
  TrainerState s;
  // Steps beyond 2^62 cannot be real and would overflow the arithmetic on them.
  constexpr uint64_t kMaxSteps = uint64_t{1} << 62;
  const uint64_t step = count_at(j, "step", "", path, true);
  const uint64_t adam = count_at(j, "adam_steps", "", path, true);
  if (step > kMaxSteps) fail("{}: 'step' = {} is out of range", path, step);
  if (adam > step)
    fail("{}: 'adam_steps' = {} exceeds 'step' = {}; the checkpoint is damaged", path, adam, step);
  const uint64_t skipped = count_at(j, "skipped_steps", "", path, false, step - adam);
  if (skipped != step - adam)
    fail(
        "{}: 'skipped_steps' = {} contradicts 'step' - 'adam_steps' = {}; the checkpoint is "
        "damaged",
        path, skipped, step - adam);
  s.step = static_cast<int64_t>(step);
  s.adam_steps = static_cast<int64_t>(adam);
  s.skipped_steps = static_cast<int64_t>(skipped);
  auto data = j.find("data");
  if (data == j.end() || !data->is_object())
    fail("{}: 'data' is missing or not an object; the checkpoint is damaged", path);
  s.train_position = count_at(*data, "train_position", "data.", path, true);
  s.train_sequences = count_at(*data, "train_sequences", "data.", path, false);
  s.train_tokens = count_at(*data, "train_tokens", "data.", path, false);
  if (s.train_position > kMaxSteps || s.train_sequences > kMaxSteps)
    fail("{}: 'data' holds a position out of range; the checkpoint is damaged", path);
  s.rng_state = count_at(j, "rng_state", "", path, true);
  auto cfg = j.find("config");
  if (cfg == j.end() || !cfg->is_object())
    fail("{}: 'config' is missing or not an object; the checkpoint is damaged", path);
  s.config = *cfg;
  return s;
}

namespace {
std::string show(double v) {
  return fmt::format("{}", v);
}
std::string show(const std::string& v) {
  return "\"" + v + "\"";
}
std::string show(bool v) {
  return v ? "true" : "false";
}
template <typename T>
std::string show(T v) requires std::is_integral_v<T> {
  return std::to_string(v);
}
}  // namespace

ResumeDiff compare_resume_config(const TrainConfig& a, const TrainConfig& b) {
  ResumeDiff d;
  auto refuse = [&](const char* key, const auto& was, const auto& now, const char* why) {
    if (was != now)
      d.refused.push_back(fmt::format("{}: the checkpoint has {}, the config {} ({})", key,
                                      show(was), show(now), why));
  };
  auto report = [&](const char* key, const auto& was, const auto& now) {
    if (was != now) d.changed.push_back(fmt::format("{}: {} -> {}", key, show(was), show(now)));
  };
  const char* shape = "the weights have another shape";
  refuse("model.n_layer", a.model.n_layer, b.model.n_layer, shape);
  refuse("model.n_head", a.model.n_head, b.model.n_head, shape);
  refuse("model.n_embd", a.model.n_embd, b.model.n_embd, shape);
  refuse("model.block_size", a.model.block_size, b.model.block_size, shape);
  refuse("model.vocab_size", a.model.vocab_size, b.model.vocab_size, shape);
  refuse("model.vocab_multiple", a.vocab_multiple, b.vocab_multiple, shape);
  refuse("model.family", a.model.family, b.model.family, shape);
  refuse("model.n_kv_head", a.model.n_kv_head, b.model.n_kv_head, shape);
  refuse("model.ffn_hidden", a.model.ffn_hidden, b.model.ffn_hidden, shape);
  if (a.model.llama() || b.model.llama())
    refuse("model.tie_embeddings", a.model.tie_embeddings, b.model.tie_embeddings, shape);
  // The same weights computing with another norm epsilon or rotary base or scaling (a context
  // extension changes these on purpose): allowed, and said.
  report("model.norm_eps", a.model.norm_eps, b.model.norm_eps);
  report("model.rope_theta", a.model.rope_theta, b.model.rope_theta);
  report("model.rope_scaling", a.rope_scaling, b.rope_scaling);
  const char* order = "the data position would point into another order of the data";
  refuse("train.seed", a.seed, b.seed, order);
  refuse("data.shuffle", a.shuffle, b.shuffle, order);
  refuse("train.seq_len", a.seq_len, b.seq_len, order);
  refuse("data.tokenizer", a.tokenizer, b.tokenizer, "the tokens would mean other text");
  // Optimizer and schedule: a run may go on with other values (a longer run, a lower rate), as
  // Megatron's --override-opt_param-scheduler allows; the run says so.
  report("train.steps", a.steps, b.steps);
  report("train.lr", a.lr, b.lr);
  report("train.min_lr", a.min_lr, b.min_lr);
  report("train.warmup_steps", a.warmup_steps, b.warmup_steps);
  report("train.weight_decay", a.weight_decay, b.weight_decay);
  report("train.beta1", a.beta1, b.beta1);
  report("train.beta2", a.beta2, b.beta2);
  report("train.eps", a.eps, b.eps);
  report("train.grad_clip", a.grad_clip, b.grad_clip);
  report("train.dtype", a.dtype, b.dtype);
  report("train.attention", a.attention, b.attention);
  report("data.train", a.train_data, b.train_data);
  report("data.val", a.val_data, b.val_data);
  return d;
}

}  // namespace kiln
