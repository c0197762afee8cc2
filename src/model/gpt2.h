// GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, causal self-attention, LM head
// tied to the token embedding. Explicit forward and backward; no autograd tape.
//
// Parameters, gradients and activations each live in one flat buffer; the structs below are
// typed views (one pointer per tensor) into them. Linear weights are stored in Hugging Face's
// Conv1D layout (in, out), so y = x @ W + b and checkpoints are a straight copy.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/bf16.h"
#include "model/spec.h"
#include "model/weight_copy.h"

namespace kiln {

struct Gpt2Config {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int block_size = 0;         // maximum sequence length (n_positions)
  int vocab_size = 0;         // real vocabulary
  int padded_vocab_size = 0;  // vocab_size rounded up; padded logits are masked out of the loss

  // Throws kiln::Error naming the offending field.
  void validate() const;
};

// The config as a model description (model/spec.h): GELU MLP of 4·n_embd, LayerNorm, learned
// positions, biases, tied embeddings, n_kv_head = n_head. `padded`: the vocabulary as the matmuls
// see it (padded_vocab_size), else the real one.
ModelSpec gpt2_spec(const Gpt2Config& c, bool padded = true, const std::string& name = "gpt2");

// A config from its sizes, the vocabulary padded to a multiple of `vocab_multiple`.
Gpt2Config gpt2_config(int n_layer, int n_head, int n_embd, int block_size, int vocab_size,
                       int vocab_multiple = 1);

// Rounds vocab up to a multiple of `multiple`.
int pad_vocab(int vocab, int multiple);

// One tensor of the flat parameter buffer, named as Hugging Face names GPT-2's tensors.
struct ParamTensor {
  std::string name;
  std::vector<int64_t> shape;  // logical shape in the flat buffer (wte holds Vp rows)
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = false;  // weight decay applies to matrices only
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;
  int64_t total = 0;
  const ParamTensor& find(const std::string& name) const;  // throws if absent
};

ParamLayout gpt2_param_layout(const Gpt2Config& c);

struct BlockParams {
  float *ln1_w, *ln1_b;          // (C)
  float *qkv_w, *qkv_b;          // (C,3C), (3C)
  float *attproj_w, *attproj_b;  // (C,C), (C)
  float *ln2_w, *ln2_b;          // (C)
  float *fc_w, *fc_b;            // (C,4C), (4C)
  float *fcproj_w, *fcproj_b;    // (4C,C), (C)
};

struct ModelParams {
  float* wte;  // (Vp,C)
  float* wpe;  // (block_size,C)
  std::vector<BlockParams> h;
  float *lnf_w, *lnf_b;  // (C)
};

ModelParams view_params(const ParamLayout& layout, const Gpt2Config& c, float* base);

// GPT-2 initialisation: normal(0, 0.02) for matrices, residual projections (attn.c_proj,
// mlp.c_proj) scaled by 1/sqrt(2*n_layer), zero biases, unit LayerNorm weights; padded vocabulary
// rows are zero. Each tensor draws from its own stream seeded by (seed, tensor index).
void gpt2_init(const ParamLayout& layout, const Gpt2Config& c, float* params, uint64_t seed);

// Recompute (none, attention, full) is declared in model/spec.h.

// A pipeline stage: layers [first, last) of the model, with the embedding (the stage reads token
// ids) and/or the head (final LayerNorm, tied LM head, loss). Without the embedding a stage reads
// the previous stage's output (B,T,C); without the head its backward takes the gradient of its
// output and leaves the gradient of its input. The default is the whole model.
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
  Recompute recompute = Recompute::none;
  // Flash-style attention kernels: no (B,NH,T,T) probabilities kept or scratch (other bits than
  // the default kernels, same function).
  bool flash_attention = false;
  StageSpec stage;
  // Micro-batches whose activations can be held at once (a pipeline schedule keeps several in
  // flight): each slot holds one's activations; backward's scratch is shared.
  int slots = 1;
};

// Activations kept for backward, for a micro-batch of B x T. Tensors that a mode does not keep
// (recomputed, or dead once converted to bf16) point into one buffer shared by all blocks.
struct Activations {
  int B = 0, T = 0;
  Buffer<float> mem;
  Buffer<bf16> mem_bf16;  // bf16 mode only
  float* encoded;         // (B,T,C)
  struct Block {
    float *ln1, *ln1_mean, *ln1_rstd;  // (B,T,C), (B,T), (B,T)
    float* qkv;                        // (B,T,3C)
    float* atty;                       // (B,T,C)
    float* att;                        // (B,NH,T,T); with flash attention the lse, (B,NH,T)
    float* residual2;                  // (B,T,C)
    float *ln2, *ln2_mean, *ln2_rstd;  // (B,T,C), (B,T), (B,T)
    float* fch;                        // (B,T,4C)
    float* fch_gelu;                   // (B,T,4C)
    float* residual3;                  // (B,T,C)
    // bf16 mode: the matmul inputs in bf16. ln1, ln2 and fch_gelu are then not kept in fp32
    // (null); atty's fp32 form is shared scratch unless flash attention's backward reads it.
    bf16 *ln1_bf, *atty_bf, *ln2_bf, *fch_gelu_bf;
  };
  std::vector<Block> h;
  float *lnf, *lnf_mean, *lnf_rstd;  // (B,T,C), (B,T), (B,T)
  bf16* lnf_bf;                      // (B,T,C), bf16 mode
  // fp32: (B,T,Vp), holding dlogits after a training forward. bf16: the logits of one chunk of
  // gpt2_head_chunk_rows rows, and dlogits_bf (B,T,Vp) the gradient of all rows.
  float* logits;
  bf16* dlogits_bf;
  float* losses;  // (B,T)
};

// Bytes of one micro-batch's activations, by kind.
struct ActivationBytes {
  int64_t kept = 0;     // kept per block for backward (each block's input included)
  int64_t shared = 0;   // one set shared by all blocks: recomputed tensors, fp32 forms of bf16 ones
  int64_t head = 0;     // final LayerNorm, logits (and their bf16 gradient), losses
  int64_t scratch = 0;  // backward's scratch, reused by every block
  int64_t fp32_floats = 0, bf16_values = 0;  // the sizes of Activations::mem and mem_bf16
  int64_t total() const { return kept + shared + head + scratch; }
};

// Scratch for backward, reused by every layer (and `proj` for forward).
struct GradScratch {
  Buffer<float> mem;
  Buffer<bf16> mem_bf16;  // bf16 mode only
  float* proj;            // (B,T,C): the attention projection's output, before the residual add
  float* dresidual;       // (B,T,C)
  float* dln;             // (B,T,C)
  float* datty;           // (B,T,C)
  float* dqkv;            // (B,T,3C)
  float* datt;            // (B,NH,T,T); with flash attention its blocks' scratch
  float* dfch;            // (B,T,4C)
  float* dfch_gelu;       // (B,T,4C)
  bf16* dout_bf;          // (B,T,4C): a linear layer's output gradient in bf16
};

// Times spent per kind of work, in seconds, when profiling is on.
struct Profile {
  bool enabled = false;
  double matmul = 0, attention = 0, layernorm = 0, gelu = 0, lm_head = 0, loss = 0, embedding = 0,
         residual = 0;
  void reset() { *this = Profile{enabled}; }
};

// Rows of the LM head's logits computed at a time in bf16 mode.
int64_t gpt2_head_chunk_rows(int64_t rows);

// The activation plan of a mode, without allocating it; with A, also allocates nothing but hands
// out the pointers of A's buffers (already sized from a first call).
ActivationBytes plan_activations(const Gpt2Config& c, int B, int T, const ModelOptions& opts,
                                 Activations* A);

class Gpt2 {
 public:
  Gpt2(const Gpt2Config& c, int B, int T, ModelOptions opts = {});
  const ModelOptions& options() const { return opts_; }
  const Gpt2Config& config() const { return cfg_; }
  const ParamLayout& layout() const { return layout_; }
  int B() const { return B_; }
  int T() const { return T_; }

  // Forward over inputs (B,T); with targets (B,T) computes per-token losses and returns their
  // sum. If dloss != 0 the logits buffer is turned into dlogits for a following backward(),
  // each token's loss weighted by dloss (1 / tokens of the whole step).
  // Called around each block's forward and backward with the block index: ZeRO-3 makes the
  // block's parameters present just before and drops them just after.
  struct BlockHooks {
    std::function<void(int block)> before, after;
  };
  //
  // bf16 mode: forward and backward read the matrices from a bf16 copy of params
  // (model/weight_copy.h), and everything else from params. The code that owns precision lends
  // its copy (use_weight_copy) and keeps it current; callers without one (tests, generation)
  // call set_weights(params) after each change, which keeps a copy in the model. fp32 mode: both
  // do nothing.
  void use_weight_copy(const Bf16WeightCopy* copy) { weights_ = copy; }
  void set_weights(const float* params);
  const bf16* weight_copy() const { return weights_ ? weights_->data() : nullptr; }
  double forward(const float* params, const int32_t* inputs, const int32_t* targets, float dloss,
                 const BlockHooks& hooks = {});
  // The same for this model's stage (ModelOptions::stage) into activation slot `slot`: from
  // token ids `inputs` when the stage has the embedding, else from `input` (B,T,C), the previous
  // stage's output. With the head, targets give the loss sum as forward() does; without it the
  // result is 0 and stage_output(slot) holds the stage's output (B,T,C).
  double forward_stage(const float* params, const int32_t* inputs, const float* input,
                       const int32_t* targets, float dloss, const BlockHooks& hooks = {},
                       int slot = 0);
  const float* stage_output(int slot = 0) const;
  // Called during backward each time a range [begin, end) of the flat gradient buffer is final
  // for this backward: ln_f's range first, then each block from the last to the first, then
  // [0, first block) holding wte and wpe. Data parallelism starts its reductions from it.
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;
  // Accumulates parameter gradients into grads (same layout as params); with accumulate =
  // false they are written instead, so the first micro-batch of a step needs no zeroed buffer
  // (and the weight-gradient products need not read it).
  void backward(const float* params, float* grads, const int32_t* inputs,
                const GradsReady& ready = {}, const BlockHooks& hooks = {}, bool accumulate = true);
  // The same for this model's stage and slot: with the head from the loss (the forward's
  // dlogits), else from `doutput` (B,T,C), the gradient of stage_output(). With the embedding it
  // ends in the embedding's gradients (`inputs` are the token ids); without it input_grad()
  // holds the gradient of the stage's input, (B,T,C), until the next backward.
  // A stage without the head reports no ready() range for ln_f nor for the other stages' layers:
  // data parallelism over stages needs its buckets cut per stage first (pipeline parallelism).
  void backward_stage(const float* params, float* grads, const int32_t* inputs,
                      const float* doutput, const GradsReady& ready = {},
                      const BlockHooks& hooks = {}, bool accumulate = true, int slot = 0);
  const float* input_grad() const { return scratch_.dresidual; }
  const StageSpec& stage() const { return opts_.stage; }

  // (B,T,Vp); valid after a forward without targets (a forward with targets consumes them)
  const float* logits() const { return opts_.bf16 ? full_logits_.data() : slots_[0].logits; }
  const float* losses() const { return slots_[0].losses; }
  // Activations kept for backward plus backward's scratch, fp32 and bf16.
  // (every slot's; the scratch is shared)
  int64_t activation_bytes() const {
    return act_bytes_.total() + (opts_.slots - 1) * (act_bytes_.total() - act_bytes_.scratch);
  }
  const ActivationBytes& activation_breakdown() const { return act_bytes_; }
  // The copy set_weights keeps in the model (0 when the copy is lent).
  int64_t weight_copy_bytes() const { return own_weights_ ? own_weights_->bytes() : 0; }
  Profile& profile() { return profile_; }

 private:
  void block_forward(int l, const float* residual);
  void head_backward(Activations& A, bool accumulate);
  const bf16* wbf(const float* p) const { return weights_->data() + (p - params_); }

  Gpt2Config cfg_;
  int B_, T_;
  ModelOptions opts_;
  ParamLayout layout_;
  ModelParams P_, G_;  // views of the buffers of the current forward/backward
  const float* params_ = nullptr;
  float* grads_ = nullptr;
  const Bf16WeightCopy* weights_ = nullptr;      // bf16 mode: the copy the matmuls read
  std::unique_ptr<Bf16WeightCopy> own_weights_;  // set_weights's, when none is lent
  std::vector<Activations> slots_;               // one micro-batch's activations each
  Activations* cur_ = nullptr;                   // the slot of the forward or backward running
  ActivationBytes act_bytes_;
  Buffer<float> full_logits_;  // bf16 mode: made by the first forward without targets
  GradScratch scratch_;
  Profile profile_;
};

// FLOPs of one forward+backward per token: 6*N (N = parameters in matmuls, the tied head counted
// once) plus the attention term 12*L*C*T (PaLM appendix B).
double gpt2_flops_per_token(const Gpt2Config& c, int T);
int64_t gpt2_num_params(const Gpt2Config& c);  // with the unpadded vocabulary

}  // namespace kiln
