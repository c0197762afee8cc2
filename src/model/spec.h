// One description of a transformer's shape, for the trainer and the planner alike: family
// traits (norm, MLP kind, positions, biases, tied embeddings, grouped-query attention) and sizes.
// GPT-2/GPT-3 style (learned positions, LayerNorm, GELU MLP, biases, tied embeddings) and Llama
// style (rotary positions, RMSNorm, SwiGLU MLP, grouped-query attention, no biases, untied head)
// are two settings of it; `kiln plan`'s presets are specs, and the trainer's GPT-2 config maps to
// one (model/gpt2.h, gpt2_spec).
//
// Shape vocabulary, used across src/plan: L layers, h hidden, a query heads, g key/value heads,
// d = h/a head size, f MLP width, V vocabulary, s sequence length, b micro-batch, t/p/d the
// tensor/pipeline/data-parallel degrees.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

enum class FfnKind { gelu, swiglu };  // h→f→h with GELU, or gate and up h→f, SiLU(gate)·up, f→h
enum class NormKind { layernorm, rmsnorm };

// What backward recomputes instead of keeping from forward: the trainer's train.recompute and
// the planner's recompute= share these names.
//   none:      every activation is kept.
//   attention: the attention core (the softmax probabilities, B·NH·T·T per block) is recomputed
//              from q and k; Megatron-LM calls this "selective", accepted as another name.
//   full:      each block keeps only its input; its forward runs again before its backward.
enum class Recompute { none, attention, full };
// "none", "attention" (or "selective") or "full"; `what` names the option in the error.
Recompute parse_recompute(const std::string& s, const std::string& what = "recompute");
const char* recompute_name(Recompute r);  // "none", "attention", "full"

struct ModelSpec {
  std::string name;
  std::string family = "gpt2";  // "gpt2" (GPT-2/GPT-3 style) or "llama"; the traits below say how
  int n_layer = 0;              // L
  int hidden = 0;               // h
  int n_head = 0;               // a: query heads
  int n_kv_head = 0;            // g: key/value heads (== a without grouped-query attention)
  int head_size = 0;   // d: per head; 0 for h / a (Gemma 7B and MaxText's configs set it apart)
  int ffn_hidden = 0;  // f
  int64_t vocab = 0;   // V as the run's matmuls see it (padded where the run pads it)
  int max_seq = 0;     // context length the model was built for
  FfnKind ffn = FfnKind::gelu;
  NormKind norm = NormKind::layernorm;
  bool learned_positions = true;  // a (max_seq, h) position table; else rotary (no parameters)
  bool bias = true;               // biases on every linear layer
  bool tied_embeddings = true;    // the LM head reuses the token embedding
  bool dropout = false;           // dropout layers present: masks are stored, extra passes run

  int head_dim() const { return head_size > 0 ? head_size : hidden / n_head; }
  // Throws kiln::Error naming the field (and `where`, e.g. a file) when a shape is impossible.
  void validate(const std::string& where) const;
};

struct ParamCounts {
  int64_t embedding = 0;         // token table V·h, plus the position table when learned
  int64_t per_layer = 0;         // one block: attention, MLP, norms, biases
  int64_t per_layer_matmul = 0;  // the weights of one block's matmuls
  int64_t final_norm = 0;
  int64_t head = 0;  // the untied output projection V·h; 0 when tied to the embedding
  int64_t total = 0;
};
ParamCounts count_params(const ModelSpec& m);

// Model FLOPs of one token's forward and backward at sequence length s, the convention MFU uses
// (PaLM, Chowdhery et al. 2022, appendix B): 6 × (weights of every matmul, the LM head included)
// + 12·L·a·d·s for the attention score and value products at full, non-causal size. Embedding
// lookups, norms and element-wise work are not counted, and neither is recomputation.
double model_flops_per_token(const ModelSpec& m, int seq);
// FLOPs of one token's forward through the blocks alone (what full recomputation repeats), and
// of the attention score and value products alone (what selective recomputation repeats).
double block_forward_flops_per_token(const ModelSpec& m, int seq);
double attention_core_forward_flops_per_token(const ModelSpec& m, int seq);

}  // namespace kiln
