// Pipeline stages: which layers, parameters and in-flight micro-batches each device holds.
#pragma once
#include <cstdint>
#include <vector>

#include "plan/layout.h"
#include "plan/model_spec.h"

namespace kiln::plan {

struct Stage {
  int index = 0;
  int layers = 0;
  bool first = false, last = false;
  // Parameters this device holds (its tensor-parallel slice), before ZeRO sharding.
  double params = 0;
  // Layer activations kept at the peak, counted in layer × micro-batch units: 1F1B keeps
  // min(m, p − stage) micro-batches of every layer; the interleaved schedule keeps
  // min(m·v, 2(p − stage − 1) + (v − 1)·p + 1) chunks of L/(p·v) layers (Megatron-LM's
  // warm-up count plus the one in steady state, megatron/core/pipeline_parallel/schedules.py).
  double in_flight_layers = 0;
  int in_flight_microbatches = 0;  // micro-batches whose first-stage extras are live
};

// Key/value heads one tensor-parallel rank holds: g/tp when tp divides them; when there are fewer
// than tp (multi-query attention, or few groups) and they divide tp, each rank holds one,
// replicated as Megatron-LM's GQA and BigCode's MQA do; 0 when neither divides the other.
double kv_heads_per_rank(const ModelSpec& m, int tp);

// Layers per stage: the L layers cut into p·v chunks as evenly as possible (the extra layers of
// an uneven split going to the middle chunks first: the first stage also holds the embedding
// and the last the LM head), chunk c running on stage c mod p.
std::vector<int> split_layers(int n_layer, int pp, int vpp);

// All stages of `l` for a step of m micro-batches per pipeline.
std::vector<Stage> pipeline_stages(const ModelSpec& m, const Layout& l, int64_t micro_batches);

// What ZeRO-2/3 gathers one at a time on a stage, in forward order: the embedding (first stage),
// each layer, and the head with the final norm (last stage; the head's table is the embedding's
// when tied on one stage). `params` is a rank's tensor-parallel slice; `recomputed` the share of
// the unit a full recompute runs again (the layers' full_share, 0 for the embedding and head).
struct ZeroUnit {
  double params = 0, recomputed = 0;
};
std::vector<ZeroUnit> zero_units(const ModelSpec& m, const Layout& l, const Stage& s);

// DeepSpeed's stage 3 releases a module's weights after use unless its trace shows them used
// again within `reuse_numel` parameters' worth of modules (stage3_max_reuse_distance; deepspeed/
// runtime/zero/partitioned_param_coordinator.py, __params_to_release). After unit k's forward
// the trace runs the later units' forwards, then their backwards in reverse (each preceded, under
// full recomputation, by its recomputed forward, as unit k's own is) before reaching unit k
// again: the units near the forward's end are kept through their backward and not gathered again.
// True for each unit kept so; all false when reuse_numel is 0 (FSDP releases every unit).
std::vector<bool> kept_through_backward(const std::vector<ZeroUnit>& units, double reuse_numel);

// A tied head on the embedding's stage uses the embedding's table again at the forward's end.
// DeepSpeed released the table after the embedding's forward when the layers between outweigh
// its reuse window, so the head gathers it again: the table's parameters (a rank's slice) that
// gather moves, or 0 (untied, pipeline stages apart, no window: FSDP keeps its root unit).
double tied_head_regather(const ModelSpec& m, const Stage& s, const std::vector<ZeroUnit>& units,
                          double reuse_numel);

}  // namespace kiln::plan
