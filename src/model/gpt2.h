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
#include "model/model.h"
#include "parallel/local_layout.h"

namespace kiln {

// The config as a model description (model/spec.h): GELU MLP of 4·n_embd, LayerNorm, learned
// positions, biases, tied embeddings, n_kv_head = n_head. `padded`: the vocabulary as the matmuls
// see it (padded_vocab_size), else the real one.
ModelSpec gpt2_spec(const ModelConfig& c, bool padded = true, const std::string& name = "gpt2");

// A GPT-2 config from its sizes, the vocabulary padded to a multiple of `vocab_multiple`.
ModelConfig gpt2_config(int n_layer, int n_head, int n_embd, int block_size, int vocab_size,
                        int vocab_multiple = 1);

// With tp > 1, the shapes of one tensor-parallel rank's slices (tp_local_layout, model.h, says
// which part of which logical tensor each is).
ParamLayout gpt2_param_layout(const ModelConfig& c, int tp = 1);
// The split dimension of each tensor under tensor parallelism (-1: whole on every rank), in the
// shape it is split in: the fused QKV weight and bias as (C, 3, C) and (3, C), cut along the
// last dimension, so that a rank holds the q, k and v columns of its heads.
std::vector<LogicalTensor> gpt2_logical_tensors(const ModelConfig& c);
int gpt2_split_dim(const std::string& name);

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

ModelParams view_params(const ParamLayout& layout, const ModelConfig& c, float* base);

// GPT-2 initialisation: normal(0, 0.02) for matrices, residual projections (attn.c_proj,
// mlp.c_proj) scaled by 1/sqrt(2*n_layer), zero biases, unit LayerNorm weights; padded vocabulary
// rows are zero. Each tensor draws from its own stream seeded by (seed, tensor index).
void gpt2_init(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed);

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
    // bf16 mode: qkv and fch kept in bf16 (their fp32 forms are one buffer shared by every
    // block, widened again before backward reads them); forward goes on from the rounded values.
    bf16 *qkv_bf, *fch_bf;
  };
  std::vector<Block> h;
  float *lnf, *lnf_mean, *lnf_rstd;  // (B,T,C), (B,T), (B,T)
  bf16* lnf_bf;                      // (B,T,C), bf16 mode
  // fp32: (B,T,Vp), holding dlogits after a training forward. bf16: the logits of one chunk of
  // head_chunk_rows rows (model/model.h), and dlogits_bf (B,T,Vp) the gradient of all rows.
  float* logits;
  bf16* dlogits_bf;
  float* losses;  // (B,T)
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

// The activation plan of a mode, without allocating it; with A, also allocates nothing but hands
// out the pointers of A's buffers (already sized from a first call).
ActivationBytes plan_activations(const ModelConfig& c, int B, int T, const ModelOptions& opts,
                                 Activations* A);

class Gpt2 final : public Model {
 public:
  Gpt2(const ModelConfig& c, int B, int T, ModelOptions opts = {});

  const float* stage_output(int slot = 0) const override;
  const float* input_grad() const override { return scratch_.dresidual; }
  const float* logits() const override { return head_logits(slots_[0].logits); }
  const float* losses() const override { return slots_[0].losses; }
  const float* decode(const float* params, int32_t token, int pos) override;

 private:
  void set_params(const float* params);
  // The stage's parts (model/model.h).
  void begin_pass(const float* params, float* grads, int slot) override;
  float* pass_input() override { return cur_->encoded; }
  void embed(const int32_t* inputs) override;
  void block_forward(int l, const float* residual) override;
  const float* block_output(int l) const override { return cur_->h[l].residual3; }
  double head_forward(const float* residual, const int32_t* targets, float dloss) override;
  void head_backward(bool accumulate) override;
  float* backward_residual() override { return scratch_.dresidual; }
  bf16* backward_residual_bf16() override { return scratch_.dout_bf; }
  void block_backward(int l, bool accumulate) override;
  void embedding_backward(const int32_t* inputs, bool accumulate) override;
  // A LayerNorm's backward over this rank's rows; under sequence parallelism its weight and bias
  // gradients are summed over the group first (each rank saw only its rows).
  void norm_backward(float* dw, float* db, const float* dout, const float* inp, const float* w,
                     const float* mean, const float* rstd, bf16* dinp_bf16, bool accumulate);

  ModelParams P_, G_;               // views of the buffers of the current forward/backward
  std::vector<Activations> slots_;  // one micro-batch's activations each
  Activations* cur_ = nullptr;      // the slot of the forward or backward running
  GradScratch scratch_;
  // kv_cache: per layer (block_size, C) keys and values, and the position being decoded.
  std::vector<Buffer<float>> k_cache_, v_cache_;
  Buffer<float> decode_scores_;
};

// FLOPs of one forward+backward per token: 6*N (N = parameters in matmuls, the tied head counted
// once) plus the attention term 12*L*C*T (PaLM appendix B).
double gpt2_flops_per_token(const ModelConfig& c, int T);
int64_t gpt2_num_params(const ModelConfig& c);  // with the unpadded vocabulary

}  // namespace kiln
