#include "plan/recompute.h"

#include "plan/stages.h"

namespace kiln::plan {

std::vector<BlockMatmul> op_policy_matmuls(const ModelSpec& m) {
  const double h = m.hidden, d = m.head_dim(), q = double(m.n_head) * d;
  const double kv = double(m.n_kv_head) * d, f = m.ffn_hidden;
  std::vector<BlockMatmul> mm = {
      {h, q, false, false}, {h, kv, false, true}, {h, kv, false, true}, {q, h, true, false}};
  if (m.ffn == FfnKind::swiglu) {
    mm.push_back({h, f, false});  // w1 (gate)
    mm.push_back({h, f, false});  // w3 (up)
  } else {
    mm.push_back({h, f, false});
  }
  mm.push_back({f, h, true});                                            // w2
  for (size_t i = 0; i < mm.size(); i++) mm[i].recomputed = i % 2 == 1;  // the 2nd, 4th, ...
  return mm;
}

double op_policy_bytes(const ModelSpec& m, const Layout& l, double n, double e) {
  const double t = l.tp;
  double per_token = m.hidden * e / (l.sp ? t : 1);  // the checkpointed block's input
  for (const BlockMatmul& mm : op_policy_matmuls(m))
    if (!mm.recomputed)
      per_token += mm.kv             ? kv_heads_per_rank(m, l.tp) * m.head_dim() * e
                   : mm.row_parallel ? mm.N * e
                                     : mm.N * e / t;
  per_token += double(m.n_head) * m.head_dim() * e / t + double(m.n_head) / t * 4;  // attention
  return n * per_token;
}

bool reruns_attention_core(const JobSpec& j) {
  return !j.flash_attention || j.software.selective_reruns_flash;
}

double recompute_flops_per_token(const ModelSpec& m, const JobSpec& j, const Layout& l) {
  const int seq = j.seq_len;
  if (l.recompute_op) {
    double fl = 0;
    for (const BlockMatmul& mm : op_policy_matmuls(m))
      if (mm.recomputed) fl += 2 * mm.K * mm.N;
    return m.n_layer * fl;
  }
  if (l.recompute == Recompute::full) return block_forward_flops_per_token(m, seq) / l.full_every;
  if (l.recompute == Recompute::attention && reruns_attention_core(j))
    return attention_core_forward_flops_per_token(m, seq);
  return 0;
}

}  // namespace kiln::plan
