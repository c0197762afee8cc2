// The seam between the code that trains or runs a model and a model family: what the trainer,
// `kiln generate` and the tests call, whatever the family. A family (model/gpt2.h,
// model/llama.h) implements Model for one pipeline stage of its layers, and the free functions
// below dispatch on ModelConfig::family for what is needed before a model exists (the parameter
// layout, initialisation, FLOPs, the planner's description).
//
// Parameters, gradients and activations each live in one flat buffer; a family keeps typed views
// (one pointer per tensor) into them. The layout names tensors as Hugging Face does for the
// family, in its storage layout, so checkpoints are a straight copy.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/matmul.h"
#include "model/config.h"
#include "model/spec.h"
#include "model/weight_copy.h"
#include "parallel/local_layout.h"

namespace kiln {

class Model {
 public:
  virtual ~Model() = default;

  const ModelConfig& config() const { return cfg_; }
  const ModelOptions& options() const { return opts_; }
  const StageSpec& stage() const { return opts_.stage; }
  const ParamLayout& layout() const { return layout_; }
  int B() const { return B_; }
  int T() const { return T_; }

  // Called around each block's forward and backward with the block index: ZeRO-3 makes the
  // block's parameters present just before and drops them just after.
  struct BlockHooks {
    std::function<void(int block)> before, after;
  };
  // Called during backward each time a range [begin, end) of the flat gradient buffer is final
  // for this backward: the final norm's range first, then each block from the last to the first,
  // then the embedding's. Data parallelism starts its reductions from it.
  using GradsReady = std::function<void(int64_t begin, int64_t end)>;

  // bf16 mode: forward and backward read the matrices from a bf16 copy of params
  // (model/weight_copy.h). The code that owns precision lends its copy (use_weight_copy) and
  // keeps it current; callers without one (tests, generation) call set_weights(params) after each
  // change, which keeps a copy in the model. fp32 mode: both do nothing.
  void use_weight_copy(const Bf16WeightCopy* copy) { weights_ = copy; }
  void set_weights(const float* params);
  const bf16* weight_copy() const { return weights_ ? weights_->data() : nullptr; }
  // The copy set_weights keeps in the model (0 when the copy is lent).
  int64_t weight_copy_bytes() const { return own_weights_ ? own_weights_->bytes() : 0; }

  // Forward of the whole model over inputs (B,T); with targets (B,T) computes per-token losses
  // and returns their sum. If dloss != 0 the logits are turned into their gradient for a
  // following backward(), each token's loss weighted by dloss (1 / tokens of the whole step).
  double forward(const float* params, const int32_t* inputs, const int32_t* targets, float dloss,
                 const BlockHooks& hooks = {}) {
    return forward_stage(params, inputs, nullptr, targets, dloss, hooks, 0);
  }
  // The same for this model's stage (ModelOptions::stage) into activation slot `slot`: from
  // token ids `inputs` when the stage has the embedding, else from `input` (B,T,C), the previous
  // stage's output. With the head, targets give the loss sum as forward() does; without it the
  // result is 0 and stage_output(slot) holds the stage's output (B,T,C).
  double forward_stage(const float* params, const int32_t* inputs, const float* input,
                       const int32_t* targets, float dloss, const BlockHooks& hooks = {},
                       int slot = 0);
  virtual const float* stage_output(int slot = 0) const = 0;

  // Accumulates parameter gradients into grads (same layout as params); with accumulate =
  // false they are written instead, so the first micro-batch of a step needs no zeroed buffer.
  void backward(const float* params, float* grads, const int32_t* inputs,
                const GradsReady& ready = {}, const BlockHooks& hooks = {},
                bool accumulate = true) {
    backward_stage(params, grads, inputs, nullptr, ready, hooks, accumulate, 0);
  }
  // The same for this model's stage and slot: with the head from the loss (the forward's
  // dlogits), else from `doutput` (B,T,C), the gradient of stage_output(). With the embedding it
  // ends in the embedding's gradients (`inputs` are the token ids); without it input_grad()
  // holds the gradient of the stage's input, (B,T,C), until the next backward.
  // A stage without the head reports no ready() range for the final norm nor for the other
  // stages' layers: data parallelism over stages needs its buckets cut per stage first.
  void backward_stage(const float* params, float* grads, const int32_t* inputs,
                      const float* doutput, const GradsReady& ready = {},
                      const BlockHooks& hooks = {}, bool accumulate = true, int slot = 0);
  virtual const float* input_grad() const = 0;
  // Elements of a stage's input, output and their gradients: B·T·C, or this rank's rows of them
  // under sequence parallelism.
  int64_t stage_io_numel() const {
    return opts_.tp.local_rows(static_cast<int64_t>(B_) * T_) * cfg_.n_embd;
  }

  // With ModelOptions::split_backward, backward_stage is the input part of a backward (Qi et
  // al. 2023's B: everything the stage before waits for) and leaves out the weight gradients of
  // the matrix products (W), keeping what they need: the products' inputs stay in the slot's
  // activations, their output gradients are copied from scratch. This computes them for the
  // slot, written (accumulate = false) or added into the gradients that backward was given.
  // Call it before the slot's next forward.
  void backward_weight(int slot, bool accumulate);
  // Bytes the weight parts waiting in every slot keep (output gradients of the products).
  int64_t deferred_bytes() const;

  // (B,T,Vp); valid after a forward without targets (a forward with targets consumes them)
  virtual const float* logits() const = 0;
  virtual const float* losses() const = 0;

  // Incremental decoding with a KV cache (a model built with B = T = 1 and
  // ModelOptions::kv_cache): feeds the token at position `pos` (0, 1, 2, ... in order; 0 starts
  // a new sequence) through the same block code as training, with attention over the cached
  // keys and values of the earlier positions, and returns the logits (Vp) of the next token.
  virtual const float* decode(const float* params, int32_t token, int pos) = 0;

  // Activations kept for backward plus backward's scratch, fp32 and bf16 (every slot's; the
  // scratch is shared).
  int64_t activation_bytes() const {
    return act_bytes_.total() + (opts_.slots - 1) * (act_bytes_.total() - act_bytes_.scratch);
  }
  const ActivationBytes& activation_breakdown() const { return act_bytes_; }
  Profile& profile() { return profile_; }

 protected:
  // Checks the stage and the slots against the config (errors name the stage's layers).
  Model(const ModelConfig& c, int B, int T, const ModelOptions& opts, ParamLayout layout);

  // A family's parts of a stage's forward and backward: forward_stage and backward_stage run
  // them in order over the stage's layers (the hooks, ready() ranges and stage ends are theirs).
  // begin_pass makes the views of params (and grads, when given) and slot `slot` current;
  // the others work on the current slot.
  virtual void begin_pass(const float* params, float* grads, int slot) = 0;
  virtual float* pass_input() = 0;  // (B,T,C): the embedding's output or the stage's input, kept
  virtual void embed(const int32_t* inputs) = 0;  // into pass_input()
  virtual void block_forward(int l, const float* residual) = 0;
  virtual const float* block_output(int l) const = 0;  // (B,T,C)
  // The final norm, the LM head and with targets the loss sum, from the last block's output.
  virtual double head_forward(const float* residual, const int32_t* targets, float dloss) = 0;
  // From the loss to the gradient of the last block's output in backward_residual().
  virtual void head_backward(bool accumulate) = 0;
  // (B,T,C): the gradient flowing back through the blocks, and its bf16 copy (bf16 mode).
  virtual float* backward_residual() = 0;
  virtual bf16* backward_residual_bf16() = 0;
  // From the gradient of block l's output in backward_residual() to that of its input there.
  virtual void block_backward(int l, bool accumulate) = 0;
  virtual void embedding_backward(const int32_t* inputs, bool accumulate) = 0;
  const bf16* wbf(const float* p) const { return weights_->data() + (p - params_); }

  // Tensor parallelism's glue around a family's layers (parallel/tensor_parallel.h), on buffers
  // in the family's scratch that it sets in `tps_` under sequence parallelism: `gathered` (B·T, C)
  // and its bf16 form, `rows` (R, C) for a reduce-scatter's result, `norm_grads` (2C) for a
  // norm's parameter gradients. R = B·T/tp rows with sequence parallelism, else B·T.
  struct TpScratch {
    float* gathered = nullptr;
    bf16* gathered_bf = nullptr;
    float* rows = nullptr;
    float* norm_grads = nullptr;
  };
  TpScratch tps_;
  // f forward: a norm's output (R, C) made whole for the column-parallel product that reads it
  // (gathered under sequence parallelism, else as it is). Returns whether it was gathered.
  bool whole_input(const float* x, const bf16* x_bf, const float** out, const bf16** out_bf);
  // g backward: the gradient of the residual stream (this rank's rows in backward_residual())
  // made whole, with its bf16 copy (bf16 mode; without sequence parallelism the copy the last
  // norm backward made).
  void whole_dresidual(const float** dy, const bf16** dy_bf);
  // g forward: a row-parallel product's partial output (B·T, C) summed; returns this rank's
  // rows of the sum, `bias` (if any) added once.
  float* reduce_output(float* partial, const float* bias);
  // f backward: a column-parallel product's partial input gradient (B·T, C) summed; returns this
  // rank's rows of the sum.
  float* reduce_input_grad(float* partial);
  // The token embedding of the current pass into `out` (R, C): the rows of `table` (Vp, C; with
  // tensor parallelism this rank's vocabulary slice) plus the positions' rows of `wpe` (null
  // for rotary models); vocabulary-parallel, each rank adds its tokens' rows into `partial`
  // (B·T, C) and g sums them. Its backward adds the gradient of the whole output into dtable
  // and dwpe.
  void embed_tokens(float* out, float* partial, const int32_t* inputs, const float* table,
                    const float* wpe);
  void embed_tokens_backward(float* dtable, float* dwpe, const int32_t* inputs);
  // A norm's weight gradient (C values at `part`) and bias gradient (the next C, when db is not
  // null) from this rank's rows, summed over the group in one collective, then added into (or
  // written to) dw and db.
  void add_norm_grads(float* part, float* dw, float* db, bool accumulate);

  // The LM head and loss every family ends with, for the B·T rows of x (fp32, or bf16 in bf16
  // mode) and the (Vp, C) matrix w: logits = x @ w^T, then the loss sum over the targets. In a
  // bf16 training forward the rows go in chunks of head_chunk_rows: the chunk's fp32 logits
  // (`logits`), its softmax and loss, and its bf16 dlogits (`dlogits_bf`, all rows), so the full
  // fp32 logits are never held. Without targets every logit is kept (in bf16 mode in a buffer of
  // the model's own, made on first use); with dloss != 0 the logits become their gradient.
  struct Head {
    const float* x;
    const bf16* x_bf;
    float* logits;
    bf16* dlogits_bf;
    float* losses;
    bool x_scratch = false;  // x lives in backward's scratch (gathered under sequence parallelism)
  };
  double lm_head_forward(const Head& h, const float* w, const int32_t* targets, float dloss);
  // dw (Vp,C) += dlogits^T @ x (written with accumulate = false) and dx (B·T,C) = dlogits @ w.
  // A stage whose embedding is the head's matrix (tied) passes `tied_here`: the embedding's
  // backward adds to dw, so dw is made at once, not left for backward_weight.
  void lm_head_backward(const Head& h, const float* w, float* dw, float* dx, bool accumulate,
                        bool tied_here);
  // dw (+)= the product `s` of a and b (a linear layer's weight gradient; in bf16 mode of a_bf
  // and b_bf): now, or with split_backward kept for backward_weight(backward_slot_). `scratch`
  // says which operands live in backward's scratch (bits: 1 a, 2 b), copied then.
  void weight_grad(const MatmulShape& s, const float* a, const bf16* a_bf, const float* b,
                   const bf16* b_bf, float* dw, int scratch, bool now = false);
  int backward_slot_ = 0;  // the slot the running backward works on (families set it)
  // The logits a forward without targets left: slot 0's, or bf16 mode's own buffer.
  const float* head_logits(const float* slot_logits) const {
    return opts_.bf16 ? full_logits_.data() : slot_logits;
  }
  // decode()'s checks (a model built for it, positions in order, a token in the vocabulary);
  // sets decode_pos_.
  void begin_decode(int32_t token, int pos);
  int decode_pos_ = -1;

  ModelConfig cfg_;
  int B_, T_;
  ModelOptions opts_;
  ParamLayout layout_;
  const float* params_ = nullptr;  // the buffer the family's views point into
  float* grads_ = nullptr;
  const Bf16WeightCopy* weights_ = nullptr;      // bf16 mode: the copy the matmuls read
  std::unique_ptr<Bf16WeightCopy> own_weights_;  // set_weights's, when none is lent
  ActivationBytes act_bytes_;
  Profile profile_;
  Buffer<float> full_logits_;   // bf16 mode: all logits of a forward without targets
  VocabLossWork tp_loss_work_;  // tensor parallelism: the vocabulary-parallel loss's workspace

 private:
  // split_backward: a slot's weight products waiting for backward_weight, their scratch operands
  // copied into `f32` or `b16` (offsets, as the vectors grow).
  struct DeferredProduct {
    MatmulShape s;
    const float* a;
    const bf16* a_bf;
    const float* b;
    const bf16* b_bf;
    float* dw;
    int scratch;
    int64_t offset[2];  // of a's and b's copies, when kept
  };
  struct DeferredSlot {
    std::vector<DeferredProduct> products;
    std::vector<float> f32;
    std::vector<bf16> b16;
  };
  std::vector<DeferredSlot> deferred_;
};

// Rows of the LM head's logits computed at a time in a bf16 training forward.
int64_t head_chunk_rows(int64_t rows);

// Stage `stage` of `stages` of a model of n_layer layers: an even share of the layers (the
// first n_layer % stages stages one more), the first stage with the embedding, the last with
// the head.
StageSpec pipeline_stage(int n_layer, int stages, int stage);
// The same with each stage's number of layers given (`layers`, summing to n_layer); empty: even.
StageSpec pipeline_stage(int n_layer, const std::vector<int>& layers, int stages, int stage);

// Tensor parallelism: which part of which logical tensor each tensor of rank `rank` of `size`
// holds, at its offset in that rank's flat buffer (parallel/local_layout.h; every tensor whole
// at size 1). Checkpoints and initialisation map between it and the whole model with these.
LocalLayout tp_local_layout(const ModelConfig& c, int size, int rank);
// Copies a rank's slices (`local`) out of a whole model's flat buffer (param_layout's order).
void take_local_slices(const ModelConfig& c, const LocalLayout& local, const float* whole,
                       float* out);

// A model of the config's family.
std::unique_ptr<Model> make_model(const ModelConfig& c, int B, int T, ModelOptions opts = {});

// The bytes of one micro-batch's activations a model of this config and mode would hold, without
// allocating them (Model::activation_breakdown once built).
ActivationBytes activation_plan(const ModelConfig& c, int B, int T, const ModelOptions& opts);

// The family's parameter layout and initialisation (each tensor from its own stream seeded by
// (seed, tensor index): the same bits on any number of threads).
ParamLayout param_layout(const ModelConfig& c);
void init_params(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed);
// p[0, n) ~ normal(0, std) from the stream `seed`, in chunks that start where a serial draw
// would be: the same bits on any number of threads.
void init_normal(float* p, int64_t n, double std, uint64_t seed);

// The config as a model description (model/spec.h). `padded`: the vocabulary as the matmuls see
// it (padded_vocab_size), else the real one.
ModelSpec model_spec(const ModelConfig& c, bool padded = true, const std::string& name = "");
// Parameters with the unpadded vocabulary.
int64_t num_params(const ModelConfig& c);
// FLOPs of one forward+backward per token: 6*N (N = parameters in matmuls, the LM head counted
// once) plus the attention term 12*L*C*T (PaLM appendix B).
double flops_per_token(const ModelConfig& c, int T);

}  // namespace kiln
