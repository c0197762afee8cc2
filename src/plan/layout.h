// A parallel layout: how the model and the batch are split over the devices.
//
//   tp   tensor parallel: each layer's matmuls split over tp devices of one node (Megatron-LM)
//   sp   sequence parallelism on top of tp: norms, dropout and residuals split too
//        (Korthikanti et al. 2022); the activations they keep shrink by tp
//   asynctp  asynchronous tensor parallelism (torchtitan's micro-pipelined TP): each sequence-
//        parallel all-gather and reduce-scatter split into tp steps that overlap the matmul
//        they feed or drain (Wang et al. 2023); needs sp
//   pp   pipeline stages, each holding a contiguous run of layers
//   vpp  virtual stages per device (the interleaved 1F1B schedule; 1 = plain 1F1B)
//   cp   context parallelism: each sequence's tokens split over cp devices, attention's keys and
//        values passed round them in a ring (Megatron-Core/Transformer Engine; Llama 3's "CP");
//        gradients are reduced over dp × cp
//   dp   data-parallel replicas; tp·cp·pp·dp = devices
//   mb   micro-batch size in sequences; m = global batch / (dp·mb) micro-batches per step
//   zero ZeRO stage over the dp group (Rajbhandari et al. 2020): 1 shards optimizer state,
//        2 also gradients, 3 also weights
//   recompute none | attention (the attention core; "selective" is accepted too) | full (each
//             layer from its input): the trainer's train.recompute names (model/spec.h); and
//             torchtitan's selective checkpointing: op (per op: every second matmul and the
//             element-wise ops) and full/N (every N-th block in full), plan/recompute.h
#pragma once
#include <string>

#include "model/spec.h"

namespace kiln::plan {

using kiln::Recompute;
using kiln::recompute_name;

struct Layout {
  int tp = 1;
  int cp = 1;
  int pp = 1;
  int dp = 1;
  int mb = 1;
  int vpp = 1;
  int zero = 0;
  Recompute recompute = Recompute::none;
  bool recompute_op = false;  // recompute=op (recompute is none)
  int full_every = 1;         // recompute=full/N: one block in N (recompute is full)
  bool sp = false;
  bool async_tp = false;
  // Hybrid sharding (FSDP's HYBRID_SHARD, torchtitan's dp_shard, MaxText's slices): ZeRO shards
  // over groups of `shard` of the dp·cp ranks and each group is a replica of the others, whose
  // gradients are all-reduced across the replicas. 0: over all of them.
  int shard = 0;

  // The ranks holding the same weights, over which gradients are reduced.
  int dp_cp() const { return dp * cp; }
  // The ranks ZeRO shards over, and how many copies of each shard there are.
  int zero_group() const { return shard > 0 ? shard : dp_cp(); }
  int replicas() const { return dp_cp() / zero_group(); }
  // "none", "attention", "full", "op" or "full/2".
  std::string recompute_text() const;
  // Blocks recomputed in full, as a share of all (full/N: 1/N).
  double full_share() const { return recompute == Recompute::full ? 1.0 / full_every : 0.0; }

  // "tp=8,pp=16,dp=8,mb=1,zero=1,recompute=attention" (+ ",vpp=2" and ",sp=1" when set).
  std::string to_string() const;
};

// Which keys a --layout gave. The planner searches the keys left out, the given ones fixed.
struct LayoutKeys {
  bool tp = false, pp = false, dp = false, mb = false, vpp = false, zero = false, recompute = false,
       sp = false, cp = false, async_tp = false, shard = false;
  // Every key the search varies is given (dp follows from tp and pp; sp defaults to tp > 1).
  bool all() const { return tp && pp && mb && vpp && zero && recompute; }
  std::string given(const Layout& l) const;  // "tp=8,mb=4": the given keys with their values
};

// Parses "key=value,..." with keys tp, cp, pp, dp, mb, vpp, zero, recompute, sp, asynctp and
// shard. Keys left out keep their defaults (tp, cp, pp, mb, vpp = 1, zero = 0, recompute none,
// sp on when tp > 1, shard over all of dp·cp); dp left out is 0, meaning "whatever the devices
// leave" (filled in by the planner); `given`, when not null, says which keys the text gave.
// Throws kiln::Error naming the bad key or value.
Layout parse_layout(const std::string& text, LayoutKeys* given = nullptr);
// The same layout apart from the ZeRO stage and shard group (search tables list one of each).
inline bool same_but_zero(const Layout& a, const Layout& b) {
  return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp && a.dp == b.dp && a.mb == b.mb &&
         a.vpp == b.vpp && a.async_tp == b.async_tp && a.recompute_text() == b.recompute_text() &&
         a.sp == b.sp;
}

}  // namespace kiln::plan
