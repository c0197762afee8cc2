// What a layout's recompute policy keeps for backward and runs again: the trainer's modes (none,
// attention, full) and torchtitan's selective activation checkpointing
// (torchtitan/models/llama/parallelize_llama.py, `_apply_ac_to_transformer_block`):
//
//   op      selective_ac_option = "op": a checkpointed block saves the outputs of the ops in
//           `_save_list` (matmuls, the flash/efficient attention kernel, reduce-scatters) except
//           every second matmul (the policy counts `mm` calls and recomputes the even ones); all
//           element-wise ops and the unsaved matmuls run again in backward.
//   full/N  selective_ac_option = "N": every N-th block checkpointed in full, the others keep
//           everything (torchtitan's "2": every second block).
//
// The matmuls in the order torchtitan's Llama runs them: wq, wk, wv, wo, w1, w3, w2 (a GELU MLP:
// w1, w2), so "op" recomputes wk, wo and w3 (GELU: wk, wo and w2) and keeps wq, wv, w1 and w2
// (GELU: wq, wv, w1), the attention output and its log-sum-exp.
#pragma once
#include <vector>

#include "plan/job.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace kiln::plan {

// One of a block's matmuls, y(n, N) = x(n, K)·W(K, N), shapes before tensor parallelism;
// row_parallel: its output is a partial sum of the full width on every tp rank (wo, w2).
struct BlockMatmul {
  double K = 0, N = 0;
  bool row_parallel = false;
  bool kv = false;          // wk or wv: the rank's key/value heads (replicated when tp > heads)
  bool recomputed = false;  // under the "op" policy
};
std::vector<BlockMatmul> op_policy_matmuls(const ModelSpec& m);

// Bytes one layer keeps for backward under the "op" policy, for n tokens of e-byte activations
// on a tp rank (the block's input, the kept matmul outputs, the attention output and its fp32
// log-sum-exp); `sp`: the block's input is split over the tp ranks.
double op_policy_bytes(const ModelSpec& m, const Layout& l, double n, double e);

// Whether selective recomputation (recompute=attention) runs the attention core's forward again:
// always for unfused attention; with a flash kernel where the software checkpoints it
// (SoftwareProfile::selective_reruns_flash).
bool reruns_attention_core(const JobSpec& j);

// FLOPs per token run again in backward under the layout's policy (full: the blocks' forward;
// attention: the attention core where reruns_attention_core; op: its recomputed matmuls; full/N:
// 1/N of full), for hardware FLOP counts.
double recompute_flops_per_token(const ModelSpec& m, const JobSpec& j, const Layout& l);

}  // namespace kiln::plan
