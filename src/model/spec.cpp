#include "model/spec.h"

#include "core/error.h"

namespace kiln {

Recompute parse_recompute(const std::string& s, const std::string& what) {
  if (s == "none") return Recompute::none;
  if (s == "attention" || s == "selective") return Recompute::attention;
  if (s == "full") return Recompute::full;
  fail("{} must be none, attention (also called selective) or full, got '{}'", what, s);
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::attention:
      return "attention";
    case Recompute::full:
      return "full";
  }
  return "?";
}

void ModelSpec::validate(const std::string& where) const {
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) fail("{}: model {} must be positive, got {}", where, field, v);
  };
  positive(n_layer, "n_layer");
  positive(hidden, "hidden size");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(ffn_hidden, "ffn_hidden");
  positive(vocab, "vocab");
  positive(max_seq, "max_seq");
  if (head_size < 0) fail("{}: model head size must be positive (or 0 for hidden / n_head)", where);
  if (head_size == 0 && hidden % n_head != 0)
    fail(
        "{}: hidden size {} is not a multiple of n_head {} (give the head size if it is set apart)",
        where, hidden, n_head);
  if (n_head % n_kv_head != 0)
    fail(
        "{}: n_head {} is not a multiple of n_kv_head {} (each key/value head serves a group of "
        "query heads)",
        where, n_head, n_kv_head);
}

ParamCounts count_params(const ModelSpec& m) {
  const int64_t h = m.hidden, f = m.ffn_hidden, d = m.head_dim();
  const int64_t q = int64_t{m.n_head} * d, kv = int64_t{m.n_kv_head} * d;
  ParamCounts c;
  c.embedding = m.vocab * h + (m.learned_positions ? int64_t{m.max_seq} * h : 0);
  const int64_t attn = h * (q + 2 * kv) + q * h;
  const int64_t mlp = (m.ffn == FfnKind::swiglu ? 3 : 2) * h * f;
  c.per_layer_matmul = attn + mlp;
  const int64_t norm = m.norm == NormKind::layernorm ? 2 * h : h;  // weight (+ bias)
  int64_t biases = 0;
  if (m.bias) biases = (q + 2 * kv) + h + (m.ffn == FfnKind::swiglu ? 2 * f : f) + h;
  c.per_layer = c.per_layer_matmul + 2 * norm + biases;
  c.final_norm = norm;
  c.head = m.tied_embeddings ? 0 : m.vocab * h;
  c.total = c.embedding + m.n_layer * c.per_layer + c.final_norm + c.head;
  return c;
}

double attention_core_forward_flops_per_token(const ModelSpec& m, int seq) {
  // Scores Q·Kᵀ and the weighted sum P·V: 2 products of 2·s·d FLOPs per query head and token.
  return 4.0 * m.n_layer * double(m.n_head) * m.head_dim() * seq;
}

double block_forward_flops_per_token(const ModelSpec& m, int seq) {
  return 2.0 * m.n_layer * double(count_params(m).per_layer_matmul) +
         attention_core_forward_flops_per_token(m, seq);
}

double model_flops_per_token(const ModelSpec& m, int seq) {
  const double head = double(m.vocab) * m.hidden;  // the LM head runs whether tied or not
  return 3.0 * block_forward_flops_per_token(m, seq) + 6.0 * head;
}

}  // namespace kiln
