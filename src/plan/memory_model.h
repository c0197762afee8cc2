// Memory per device: model state by precision and ZeRO stage, activations by recompute policy,
// tensor and sequence parallelism and the micro-batches a pipeline schedule keeps in flight.
//
// Model state per parameter (Rajbhandari et al. 2020, "ZeRO", section 3.1), divided by dp for
// the parts the ZeRO stage shards:
//   16-bit mixed precision: weights 2, gradients 2, optimizer 12 (fp32 master, Adam m and v)
//   fp32:                   weights 4, gradients 4, optimizer 8 (Adam m and v)
// Gradients are 4 bytes where the software keeps them in fp32 (Megatron-LM's bf16 runs,
// torchtitan); fp8 adds the weights' fp8 copy (1 byte) to bf16 mixed precision.
//
// Activations of one layer and micro-batch, in bytes, generalising Korthikanti et al. 2022
// ("Reducing Activation Recomputation in Large Transformer Models", section 4) to grouped-query
// attention, SwiGLU, flash attention and any element size e (2 for 16-bit, 4 for fp32):
//   replicated across tp unless sequence-parallel (then /tp):
//     n·(4·h·e + 2·h·[dropout])      two norm inputs and outputs, two dropout masks
//   split across tp:
//     n·((a + g)·d·e + g·d·e + a·d·e) Q and K, V, the attention output
//     n·2·f·e (GELU) or n·3·f·e (SwiGLU) MLP activations
//     n·a·s·(e + [dropout]·(1 + e))   softmax output, dropout mask and output (unfused only;
//                                     none with flash attention or selective recompute)
//   full recompute keeps only each layer's input: n·h·e (/tp with sp).
// For GPT-3 shapes (e = 2, f = 4h, a = g, dropout) this is Korthikanti's
// s·b·h·(10 + 24/t + 5·a·s/(h·t)) without sp and s·b·h·(34 + 5·a·s/h)/t with it.
#pragma once
#include "plan/hardware.h"
#include "plan/job.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace kiln::plan {

// Tokens of one micro-batch on one rank: context parallelism splits each sequence over cp ranks.
inline double rank_tokens(const JobSpec& j, const Layout& l) {
  return double(l.mb) * j.seq_len / l.cp;
}

// Bytes of activations one layer keeps for backward, for one micro-batch.
double layer_activation_bytes(const ModelSpec& m, const JobSpec& j, const Layout& l, Recompute r);
// The same under the layout's whole policy, averaged over the layers: torchtitan's "op" policy
// (plan/recompute.h), or full/N's one block in N.
double kept_activation_bytes(const ModelSpec& m, const JobSpec& j, const Layout& l);

struct MemoryBreakdown {  // bytes on one device of the stage that needs the most
  int stage = 0;
  double weights = 0, grads = 0, optimizer = 0;
  double activations = 0;  // kept for backward at the peak (in-flight micro-batches, logits)
  double transient = 0;    // backward working set, recomputed layer, ZeRO-3 gathered weights
  double allowance = 0;    // mem_allowance × everything above
  double reserved = 0;     // the device's runtime reservation
  double total = 0;
  double capacity = 0;
  double model_state() const { return weights + grads + optimizer; }
  bool fits() const { return total <= capacity; }
};

MemoryBreakdown memory_per_gpu(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                               const Layout& l, int64_t micro_batches);

// Bytes per parameter of weights, gradients and optimizer state held for a job (its precision
// and the software's gradient dtype), and of the weights a ZeRO-3 all-gather moves.
struct StateBytes {
  double weights, grads, optimizer, gathered;
};
StateBytes state_bytes(const JobSpec& j);

}  // namespace kiln::plan
