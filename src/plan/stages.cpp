#include "plan/stages.h"

#include <algorithm>

namespace kiln::plan {

double kv_heads_per_rank(const ModelSpec& m, int tp) {
  if (m.n_kv_head % tp == 0) return double(m.n_kv_head) / tp;
  return tp % m.n_kv_head == 0 ? 1.0 : 0.0;
}

std::vector<int> split_layers(int n_layer, int pp, int vpp) {
  // Chunk c (of p·v) runs on stage c mod p; the extra layers of an uneven split go to the
  // middle chunks first, as the first and last stages carry the embedding and the LM head.
  const int chunks = pp * vpp;
  std::vector<int> per_chunk(chunks, n_layer / chunks);
  int extra = n_layer % chunks;
  for (int c = 1; c + 1 < chunks && extra > 0; c++, extra--) per_chunk[c]++;
  if (extra > 0) per_chunk[chunks - 1]++, extra--;
  if (extra > 0) per_chunk[0]++;
  std::vector<int> layers(pp, 0);
  for (int c = 0; c < chunks; c++) layers[c % pp] += per_chunk[c];
  return layers;
}

std::vector<Stage> pipeline_stages(const ModelSpec& m, const Layout& l, int64_t micro_batches) {
  const ParamCounts pc = count_params(m);
  const std::vector<int> layers = split_layers(m.n_layer, l.pp, l.vpp);
  const double tied_copy = m.tied_embeddings && l.pp > 1 ? double(m.vocab) * m.hidden : 0.0;
  // Replicated key/value heads: each rank holds whole K and V projections of its head, not a
  // 1/tp share of them (weights and, with biases, their biases).
  const double kv_weights = 2.0 * m.n_kv_head * m.head_dim() * (m.hidden + (m.bias ? 1 : 0));
  const double kv_extra = kv_weights * (kv_heads_per_rank(m, l.tp) * l.tp / m.n_kv_head - 1);
  std::vector<Stage> out(l.pp);
  for (int s = 0; s < l.pp; s++) {
    Stage& st = out[s];
    st.index = s;
    st.layers = layers[s];
    st.first = s == 0;
    st.last = s == l.pp - 1;
    double p = double(st.layers) * (pc.per_layer + kv_extra);
    if (st.first) p += pc.embedding;
    // The last stage holds the final norm and the LM head; a tied head past the first stage is a
    // copy of the embedding whose gradient is summed with the first stage's (Megatron-LM).
    if (st.last) p += pc.final_norm + (m.tied_embeddings ? tied_copy : double(pc.head));
    st.params = p / l.tp;
    if (l.vpp <= 1) {
      st.in_flight_microbatches = int(std::min<int64_t>(micro_batches, l.pp - s));
      st.in_flight_layers = double(st.in_flight_microbatches) * st.layers;
    } else {
      const int64_t chunks =
          std::min<int64_t>(micro_batches * l.vpp, 2 * (l.pp - s - 1) + (l.vpp - 1) * l.pp + 1);
      st.in_flight_layers = double(chunks) * st.layers / l.vpp;
      st.in_flight_microbatches = int((chunks + l.vpp - 1) / l.vpp);
    }
  }
  return out;
}

std::vector<ZeroUnit> zero_units(const ModelSpec& m, const Layout& l, const Stage& s) {
  const ParamCounts pc = count_params(m);
  const double t = l.tp;
  std::vector<ZeroUnit> units;
  if (s.first) units.push_back({double(pc.embedding) / t, 0});
  for (int k = 0; k < s.layers; k++) units.push_back({double(pc.per_layer) / t, l.full_share()});
  if (s.last) {
    const double head = m.tied_embeddings && l.pp == 1 ? 0.0 : double(pc.head);
    units.push_back({(head + double(pc.final_norm)) / t, 0});
  }
  return units;
}

double tied_head_regather(const ModelSpec& m, const Stage& s, const std::vector<ZeroUnit>& units,
                          double reuse_numel) {
  if (!m.tied_embeddings || !s.first || !s.last || reuse_numel <= 0 || units.size() < 2) return 0;
  double between = 0;  // the layers' forwards between the embedding's and the head's
  for (size_t k = 1; k + 1 < units.size(); k++) between += units[k].params;
  return between < reuse_numel ? 0.0 : units.front().params;
}

std::vector<bool> kept_through_backward(const std::vector<ZeroUnit>& units, double reuse_numel) {
  std::vector<bool> kept(units.size(), false);
  if (reuse_numel <= 0) return kept;
  // Walking back from the last unit: the modules the trace runs between unit k's forward and its
  // next use are the later units' forwards, recomputed forwards and backwards, and under full
  // recomputation the unit's own recomputed forward up to the module (counted whole: its next use
  // is its recomputed forward, which the rest of the unit's recompute precedes for its first
  // module). Without recomputation the unit's own remaining forward and backward modules are left
  // out, so a unit near the window's edge may be kept where DeepSpeed releases its first modules.
  double between = 0;
  for (size_t k = units.size(); k-- > 0;) {
    kept[k] = between + units[k].recomputed * units[k].params < reuse_numel;
    between += units[k].params * (2 + units[k].recomputed);
  }
  return kept;
}

}  // namespace kiln::plan
