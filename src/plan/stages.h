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

}  // namespace kiln::plan
