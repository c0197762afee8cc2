// Llama-family models (Llama 2/3, Mistral, Qwen share the block): pre-norm blocks with RMSNorm,
// rotary position embeddings (Hugging Face's rotate_half convention, Llama 3's frequency scaling
// as an option), grouped-query attention, a SwiGLU MLP, no biases, an untied (or tied) LM head.
// Explicit forward and backward behind the Model interface (model/model.h), with the stages,
// activation slots, bf16, recompute and flash attention GPT-2 has.
//
// Weights are stored in Hugging Face's nn.Linear layout (out, in), y = x @ W^T, under HF's names
// (model.layers.N.self_attn.q_proj.weight, ...), so checkpoints are a straight copy. A block's
// q, k and v projections are adjacent in the flat buffer and read as one (QKV, C) matrix, the
// gate and up projections as one (2F, C) matrix: one product each.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "model/model.h"

namespace kiln {

ParamLayout llama_param_layout(const ModelConfig& c, int tp = 1);
// The dimension each tensor is split along under tensor parallelism (-1: whole on every rank).
int llama_split_dim(const std::string& name);
// Matrices ~ normal(0, 0.02), the output projections (o_proj, down_proj) scaled by
// 1/sqrt(2*n_layer), RMSNorm weights 1; padded vocabulary rows are zero. Each tensor draws from
// its own stream seeded by (seed, tensor index).
void llama_init(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed);
// The config as a model description (model/spec.h).
ModelSpec llama_spec(const ModelConfig& c, bool padded, const std::string& name);

class Llama final : public Model {
 public:
  Llama(const ModelConfig& c, int B, int T, ModelOptions opts = {});

  const float* stage_output(int slot = 0) const override;
  const float* input_grad() const override { return scratch_.dresidual; }
  const float* logits() const override;
  const float* losses() const override { return slots_[0].losses; }
  const float* decode(const float* params, int32_t token, int pos) override;

  // Typed views of a flat buffer.
  struct BlockParams {
    float* ln1;   // (C)
    float* qkv;   // (QKV, C): q_proj, k_proj, v_proj
    float* o;     // (C, C)
    float* ln2;   // (C)
    float* gate;  // (2F, C): gate_proj, up_proj
    float* down;  // (C, F)
  };
  struct Params {
    float* embed;  // (Vp, C)
    std::vector<BlockParams> h;
    float* norm;     // (C)
    float* lm_head;  // (Vp, C); the embedding when tied
  };

  // Activations of one micro-batch. Tensors a mode does not keep (recomputed, or dead once
  // converted to bf16) point into one set shared by all blocks.
  struct Activations {
    Buffer<float> mem;
    Buffer<bf16> mem_bf16;
    float* encoded;  // (BT,C): the stage's input
    struct Block {
      float* ln1;        // (BT,C) fp32 mode
      bf16* ln1_bf;      // (BT,C) bf16 mode
      float* rstd1;      // (BT)
      float* qkv;        // (BT,QKV), q and k rotated; bf16 mode: one buffer shared by all blocks
      bf16* qkv_bf;      // bf16 mode: qkv kept in bf16 (forward goes on from the rounded values)
      float* atty;       // (BT,C)
      bf16* atty_bf;     // (BT,C) bf16 mode
      float* att;        // (B,NH,T,T); with flash attention the lse, (B,NH,T)
      float* residual2;  // (BT,C)
      float* ln2;        // (BT,C) fp32 mode
      bf16* ln2_bf;
      float* rstd2;      // (BT)
      float* gu;         // (BT,2F): gate and up; bf16 mode: one buffer shared by all blocks
      bf16* gu_bf;       // bf16 mode: gu kept in bf16
      float* act;        // (BT,F): silu(gate) * up, fp32 mode
      bf16* act_bf;      // bf16 mode
      float* residual3;  // (BT,C): the block's output
    };
    std::vector<Block> h;
    float *lnf, *rstdf;  // (BT,C), (BT)
    bf16* lnf_bf;
    float* logits;     // fp32: (BT,Vp), dlogits after a training forward; bf16: one chunk's rows
    bf16* dlogits_bf;  // bf16: (BT,Vp)
    float* losses;     // (BT)
  };

 private:
  struct Scratch {
    Buffer<float> mem;
    Buffer<bf16> mem_bf16;
    float* proj;       // (BT,C)
    float* dresidual;  // (BT,C)
    float* dln;        // (BT,C)
    float* datty;      // (BT,C)
    float* dqkv;       // (BT,QKV)
    float* datt;       // attention backward's scratch
    float* dgu;        // (BT,2F)
    float* dact;       // (BT,F)
    bf16* dout_bf;     // (BT,max(2F,QKV,C)): a product's output gradient in bf16
  };
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
  // An RMSNorm's backward over this rank's rows (its weight's gradient summed over the
  // tensor-parallel group under sequence parallelism).
  void norm_backward(float* dw, const float* dout, const float* inp, const float* w,
                     const float* rstd, bf16* dinp_bf16, bool accumulate);

  int QKV_ = 0, F_ = 0, NKV_ = 0, hs_ = 0;
  Params P_, G_;
  std::vector<Activations> slots_;
  Activations* cur_ = nullptr;
  Scratch scratch_;
  Buffer<float> rope_cos_, rope_sin_;             // (block_size, hs/2)
  std::vector<Buffer<float>> k_cache_, v_cache_;  // kv_cache: per layer (block_size, NKV*hs)
  Buffer<float> decode_scores_;
};

// The activation plan of a mode, without allocating it; with A, also hands out the pointers of
// A's buffers (already sized from a first call).
ActivationBytes llama_plan_activations(const ModelConfig& c, int B, int T, const ModelOptions& opts,
                                       Llama::Activations* A);

}  // namespace kiln
