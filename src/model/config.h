// What every model family shares: the config a run trains (model.* in a TOML file), the flat
// parameter layout named as Hugging Face names the family's tensors, the options of a forward and
// backward (precision, recompute, pipeline stage, activation slots), and the per-kind timings of
// a profiled step. The families themselves (model/gpt2.h, model/llama.h) sit behind the Model
// interface of model/model.h.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/llama_kernels.h"
#include "model/spec.h"
#include "parallel/tensor_parallel.h"

namespace kiln {

struct ModelConfig {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int block_size = 0;           // maximum sequence length (n_positions)
  int vocab_size = 0;           // real vocabulary
  int padded_vocab_size = 0;    // vocab_size rounded up; padded logits are masked out of the loss
  std::string family = "gpt2";  // "gpt2" or "llama"
  // Llama only (a GPT-2 config refuses them): key/value heads (grouped-query attention; 0 means
  // n_head), the SwiGLU width, RMSNorm's epsilon, the rotary base, Llama 3's rotary frequency
  // scaling (kernels/llama_kernels.h) when rope_llama3 is set, and whether the LM head shares the
  // token embedding.
  int n_kv_head = 0;
  int ffn_hidden = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool rope_llama3 = false;
  RopeScaling rope_scaling = {};
  bool tie_embeddings = false;

  bool llama() const { return family == "llama"; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int head_dim() const { return n_embd / n_head; }
  // Throws kiln::Error naming the offending field.
  void validate() const;
};

// Rounds vocab up to a multiple of `multiple`.
int pad_vocab(int vocab, int multiple);

// One tensor of the flat parameter buffer, named as Hugging Face names the family's tensors.
struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;  // logical shape in the flat buffer (embeddings hold Vp rows)
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;  // weight decay applies to matrices only
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  int64_t total = 0;
  // Where each block's parameters start, and after the last one where its parameters end
  // (n_layer + 1 offsets): block l is the range [blocks[l], blocks[l+1]).
  std::vector<int64_t> blocks;
  const ParamTensor& find(const std::string& name) const;  // throws if absent
  // Appends a tensor after the last one.
  void add(std::string name, std::vector<int64_t> shape, bool decay);
};

// A pipeline stage: layers [first, last) of the model, with the embedding (the stage reads token
// ids) and/or the head (final norm, LM head, loss). Without the embedding a stage reads the
// previous stage's output (B,T,C); without the head its backward takes the gradient of its output
// and leaves the gradient of its input. The default is the whole model.
struct StageSpec {
  int first = 0;
  int last = -1;  // -1: n_layer
  bool embedding = true;
  bool head = true;
};

struct ModelOptions {
  // Mixed precision: matmul operands in bf16 (activations converted as they are produced, the
  // weights from a bf16 copy, model/weight_copy.h), accumulation and everything else in fp32.
  bool bf16 = false;
  Recompute recompute = Recompute::none;  // model/spec.h
  // Flash-style attention kernels: no (B,NH,T,T) probabilities kept or scratch (other bits than
  // the default kernels, same function).
  bool flash_attention = false;
  StageSpec stage;
  // Micro-batches whose activations can be held at once (a pipeline schedule keeps several in
  // flight): each slot holds one's activations; backward's scratch is shared.
  int slots = 1;
  // Incremental decoding (B = T = 1): each layer keeps the keys and values of every position up
  // to block_size, and Model::decode runs.
  bool kv_cache = false;
  // Zero-bubble pipelines: a backward leaves the weight gradients of its matrix products for
  // Model::backward_weight (model/model.h). Needs the blocks' inputs kept (no full recompute).
  bool split_backward = false;
  // Tensor (and sequence) parallelism: this rank's part of each layer (parallel/
  // tensor_parallel.h); the parameter layout then holds this rank's slices (tp_local_layout).
  TensorParallel tp;
};

// Bytes of one micro-batch's activations, by kind.
struct ActivationBytes {
  int64_t kept = 0;     // kept per block for backward (each block's input included)
  int64_t shared = 0;   // one set shared by all blocks: recomputed tensors, fp32 forms of bf16 ones
  int64_t head = 0;     // final norm, logits (and their bf16 gradient), losses
  int64_t scratch = 0;  // backward's scratch, reused by every block
  int64_t fp32_floats = 0, bf16_values = 0;  // the sizes of the fp32 and bf16 activation buffers
  int64_t total() const { return kept + shared + head + scratch; }
};

// Hands out one micro-batch's activation buffers in order and counts their bytes by kind. A
// family's plan runs once with null buffers to size them, then once per slot on the sized
// buffers to hand out the pointers (the same calls, so the same offsets).
class ActivationPlanner {
 public:
  ActivationPlanner(float* mem, bf16* mem_bf16) : mem_(mem), mem_bf16_(mem_bf16) {}
  float* take(int64_t n);
  bf16* take_bf(int64_t n);
  // A tensor kept per block, or (`shared`) one buffer for every block, made at the first
  // request of field number `id`: recomputed tensors, or fp32 forms dead once rounded to bf16.
  float* field(bool shared, int id, int64_t n);
  bf16* field_bf(bool shared, int id, int64_t n);
  void head() { kind_ = &bytes_.head; }  // what is taken from here on is the head's
  // The bytes by kind (no scratch) and the buffers' sizes, checked against the buffers' when
  // handing out pointers.
  ActivationBytes finish(int64_t mem_floats = -1, int64_t mem_bf16_values = -1) const;

 private:
  float* mem_;
  bf16* mem_bf16_;
  int64_t nf_ = 0, nb_ = 0;
  ActivationBytes bytes_;
  int64_t* kind_ = &bytes_.kept;
  std::map<int, float*> shared_;
  std::map<int, bf16*> shared_bf16_;
};

// Times spent per kind of work, in seconds, when profiling is on. `norm` is LayerNorm or RMSNorm,
// `activation` GELU or SwiGLU, `attention` includes the rotary embedding.
struct Profile {
  bool enabled = false;
  double matmul = 0, attention = 0, norm = 0, activation = 0, lm_head = 0, loss = 0, embedding = 0,
         residual = 0;
  double tp_comm = 0;  // tensor-parallel collectives (waits included)
  void reset() { *this = Profile{enabled}; }
};

// Times a region into one of the profile's counters when profiling is on.
class ProfileTimer {
 public:
  ProfileTimer(Profile& p, double Profile::*field);
  ~ProfileTimer();
  ProfileTimer(const ProfileTimer&) = delete;
  ProfileTimer& operator=(const ProfileTimer&) = delete;

 private:
  Profile& p_;
  double Profile::*field_;
  double t0_;
};

}  // namespace kiln
