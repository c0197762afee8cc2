#include "model/model.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "model/gpt2.h"
#include "model/llama.h"

namespace kiln {

void ModelConfig::validate() const {
  auto positive = [](int v, const char* name) {
    if (v <= 0) fail("model.{} must be positive, got {}", name, v);
  };
  if (family != "gpt2" && family != "llama")
    fail("model.family must be \"gpt2\" or \"llama\", got '{}'", family);
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  positive(block_size, "block_size");
  positive(vocab_size, "vocab_size");
  if (n_embd % n_head != 0)
    fail("model.n_embd ({}) must be divisible by model.n_head ({})", n_embd, n_head);
  if (padded_vocab_size < vocab_size)
    fail("padded vocabulary {} is smaller than model.vocab_size {}", padded_vocab_size, vocab_size);
  if (!llama()) return;
  if (n_kv_head < 0) fail("model.n_kv_head must be positive, got {}", n_kv_head);
  if (n_head % kv_heads() != 0)
    fail("model.n_head ({}) must be a multiple of model.n_kv_head ({})", n_head, kv_heads());
  positive(ffn_hidden, "ffn_hidden");
  if (head_dim() % 2 != 0)
    fail("rotary embeddings need an even head size; model.n_embd / model.n_head = {}", head_dim());
  if (!(norm_eps > 0)) fail("model.norm_eps must be positive, got {}", norm_eps);
  if (!(rope_theta > 0)) fail("model.rope_theta must be positive, got {}", rope_theta);
  const RopeScaling& r = rope_scaling;
  if (rope_llama3 &&
      (!(r.factor > 0) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
       r.original_max_position_embeddings <= 0))
    fail(
        "model.rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and a "
        "positive original_max_position_embeddings (got {}, {}, {}, {})",
        r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings);
}

int pad_vocab(int vocab, int multiple) {
  if (multiple <= 1) return vocab;
  return (vocab + multiple - 1) / multiple * multiple;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return t;
  fail("no parameter named '{}'", name);
}

void ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.numel = 1;
  for (auto d : t.shape) t.numel *= d;
  t.offset = total;
  t.decay = decay;
  total += t.numel;
  tensors.push_back(std::move(t));
}

float* ActivationPlanner::take(int64_t n) {
  float* r = mem_ ? mem_ + nf_ : nullptr;
  nf_ += n;
  *kind_ += n * 4;
  return r;
}

bf16* ActivationPlanner::take_bf(int64_t n) {
  bf16* r = mem_bf16_ ? mem_bf16_ + nb_ : nullptr;
  nb_ += n;
  *kind_ += n * 2;
  return r;
}

float* ActivationPlanner::field(bool shared, int id, int64_t n) {
  if (!shared) return take(n);
  auto it = shared_.find(id);
  if (it != shared_.end()) return it->second;
  int64_t* was = kind_;
  kind_ = &bytes_.shared;
  float* r = shared_[id] = take(n);
  kind_ = was;
  return r;
}

bf16* ActivationPlanner::field_bf(bool shared, int id, int64_t n) {
  if (!shared) return take_bf(n);
  auto it = shared_bf16_.find(id);
  if (it != shared_bf16_.end()) return it->second;
  int64_t* was = kind_;
  kind_ = &bytes_.shared;
  bf16* r = shared_bf16_[id] = take_bf(n);
  kind_ = was;
  return r;
}

ActivationBytes ActivationPlanner::finish(int64_t mem_floats, int64_t mem_bf16_values) const {
  if (mem_) KILN_CHECK(nf_ == mem_floats);
  if (mem_bf16_) KILN_CHECK(nb_ == mem_bf16_values);
  ActivationBytes b = bytes_;
  b.fp32_floats = nf_;
  b.bf16_values = nb_;
  return b;
}

ProfileTimer::ProfileTimer(Profile& p, double Profile::*field)
    : p_(p), field_(field), t0_(p.enabled ? now_seconds() : 0) {}

ProfileTimer::~ProfileTimer() {
  if (p_.enabled) p_.*field_ += now_seconds() - t0_;
}

Model::Model(const ModelConfig& c, int B, int T, const ModelOptions& opts, ParamLayout layout)
    : cfg_(c), B_(B), T_(T), opts_(opts), layout_(std::move(layout)) {
  c.validate();
  if (T > c.block_size) fail("sequence length {} exceeds model.block_size {}", T, c.block_size);
  StageSpec& st = opts_.stage;
  if (st.last < 0) st.last = c.n_layer;
  if (st.first < 0 || st.first > st.last || st.last > c.n_layer)
    fail("a stage of layers [{}, {}) does not fit a model of {} layers", st.first, st.last,
         c.n_layer);
  if (st.embedding && st.first != 0)
    fail("a stage with the embedding starts at layer 0, not {}", st.first);
  if (st.head && st.last != c.n_layer)
    fail("a stage with the head ends at the last layer ({}), not {}", c.n_layer, st.last);
  if (opts_.slots < 1) fail("a model needs at least one activation slot, got {}", opts_.slots);
  if (opts_.split_backward && opts_.recompute == Recompute::full)
    fail(
        "a split backward (zero-bubble pipelines) keeps each block's inputs for the weight "
        "gradients; train.recompute = \"full\" does not keep them: use \"attention\" or "
        "\"none\"");
  if (opts_.kv_cache && (B != 1 || T != 1 || !st.embedding || !st.head || opts_.slots != 1 ||
                         opts_.bf16 || opts_.tp.on()))
    fail(
        "a decoding model (kv_cache) is the whole fp32 model with B = T = 1, one slot and no "
        "tensor parallelism");
  const TensorParallel& tp = opts_.tp;
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size || (tp.on() && !tp.comm))
    fail("tensor-parallel rank {} of {} is not a rank of a group", tp.rank, tp.size);
  if (tp.on()) {
    if (c.n_head % tp.size != 0)
      fail("parallel.tp = {} does not divide model.n_head = {}: a rank holds whole heads", tp.size,
           c.n_head);
    if (c.llama() && c.kv_heads() % tp.size != 0)
      fail(
          "parallel.tp = {} does not divide model.n_kv_head = {}: a rank holds whole key/value "
          "heads",
          tp.size, c.kv_heads());
    if (c.llama() && c.ffn_hidden % tp.size != 0)
      fail("parallel.tp = {} does not divide model.ffn_hidden = {}", tp.size, c.ffn_hidden);
    if (c.padded_vocab_size % tp.size != 0)
      fail("parallel.tp = {} does not divide the padded vocabulary {} (model.vocab_multiple)",
           tp.size, c.padded_vocab_size);
    if (tp.sp && (static_cast<int64_t>(B) * T) % tp.size != 0)
      fail("parallel.sp: the micro-batch's {} tokens do not split across parallel.tp = {} ranks",
           static_cast<int64_t>(B) * T, tp.size);
    if (st.head) tp_loss_work_ = VocabLossWork(tp, static_cast<int64_t>(B) * T);
  }
}

double Model::forward_stage(const float* params, const int32_t* inputs, const float* input,
                            const int32_t* targets, float dloss, const BlockHooks& hooks,
                            int slot) {
  const StageSpec& st = opts_.stage;
  const int64_t x_numel = stage_io_numel();
  if (opts_.kv_cache) fail("a model built for decoding runs decode(), not a forward");
  begin_pass(params, nullptr, slot);
  if (st.embedding) {
    embed(inputs);
  } else {
    KILN_CHECK(input != nullptr);
    copy(pass_input(), input, x_numel);  // kept: the first block's backward reads its input
  }
  const float* residual = pass_input();
  for (int l = st.first; l < st.last; l++) {
    if (hooks.before) hooks.before(l);
    block_forward(l, residual);
    residual = block_output(l);
    if (hooks.after) hooks.after(l);
  }
  if (!st.head) return 0.0;
  return head_forward(residual, targets, dloss);
}

void Model::backward_stage(const float* params, float* grads, const int32_t* inputs,
                           const float* doutput, const GradsReady& ready, const BlockHooks& hooks,
                           bool accumulate, int slot) {
  const StageSpec& st = opts_.stage;
  const int64_t x_numel = stage_io_numel();
  if (opts_.kv_cache) fail("a model built for decoding has no backward");
  begin_pass(params, grads, slot);
  backward_slot_ = slot;
  // Block l's parameters are the range [blocks[l], blocks[l+1]); the final norm follows the last.
  const std::vector<int64_t>& blocks = layout_.blocks;
  if (st.head) {
    head_backward(accumulate);
    if (ready) ready(blocks[cfg_.n_layer], layout_.total);
  } else {
    KILN_CHECK(doutput != nullptr);
    copy(backward_residual(), doutput, x_numel);
    // The last block's output projection reads the gradient in bf16, as the final norm's
    // backward would have rounded it.
    if (opts_.bf16 && st.last > st.first)
      to_bf16(backward_residual_bf16(), backward_residual(), x_numel);
  }
  for (int l = st.last - 1; l >= st.first; l--) {
    if (hooks.before) hooks.before(l);
    block_backward(l, accumulate);
    if (hooks.after) hooks.after(l);
    if (ready) ready(blocks[l], blocks[l + 1]);
  }
  if (!st.embedding) return;  // input_grad() holds the gradient of the stage's input
  embedding_backward(inputs, accumulate);
  if (ready) ready(0, blocks[0]);
}

bool Model::whole_input(const float* x, const bf16* x_bf, const float** out, const bf16** out_bf) {
  const TensorParallel& tp = opts_.tp;
  *out = x;
  *out_bf = x_bf;
  if (!tp.on() || !tp.sp) return false;
  ProfileTimer t(profile_, &Profile::tp_comm);
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  if (opts_.bf16) {
    f_forward(tp, tps_.gathered_bf, x_bf, BT, cfg_.n_embd);
    *out_bf = tps_.gathered_bf;
  } else {
    f_forward(tp, tps_.gathered, x, BT, cfg_.n_embd);
    *out = tps_.gathered;
  }
  return true;
}

void Model::whole_dresidual(const float** dy, const bf16** dy_bf) {
  const TensorParallel& tp = opts_.tp;
  *dy = backward_residual();
  *dy_bf = backward_residual_bf16();
  if (!tp.on() || !tp.sp) return;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  {
    ProfileTimer t(profile_, &Profile::tp_comm);
    g_backward(tp, tps_.gathered, backward_residual(), BT, cfg_.n_embd);
  }
  if (opts_.bf16) to_bf16(backward_residual_bf16(), tps_.gathered, BT * cfg_.n_embd);
  *dy = tps_.gathered;
}

float* Model::reduce_output(float* partial, const float* bias) {
  const TensorParallel& tp = opts_.tp;
  if (!tp.on()) return partial;
  ProfileTimer t(profile_, &Profile::tp_comm);
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  float* out = tp.sp ? tps_.rows : partial;
  g_forward(tp, partial, out, BT, cfg_.n_embd);
  if (tp.sp && bias) add_bias_rows(out, bias, tp.local_rows(BT), cfg_.n_embd);
  return out;
}

float* Model::reduce_input_grad(float* partial) {
  const TensorParallel& tp = opts_.tp;
  if (!tp.on()) return partial;
  ProfileTimer t(profile_, &Profile::tp_comm);
  float* rows = tp.sp ? tps_.rows : partial;
  f_backward(tp, partial, rows, static_cast<int64_t>(B_) * T_, cfg_.n_embd);
  return rows;
}

void Model::embed_tokens(float* out, float* partial, const int32_t* inputs, const float* table,
                         const float* wpe) {
  const TensorParallel& tp = opts_.tp;
  if (!tp.on()) {
    ProfileTimer t(profile_, &Profile::embedding);
    encoder_forward(out, inputs, table, wpe, B_, T_, cfg_.n_embd);
    return;
  }
  float* sum = tp.sp ? partial : out;  // without sequence parallelism all-reduced in place
  {
    ProfileTimer t(profile_, &Profile::embedding);
    vocab_embedding_forward(sum, inputs, table, vocab_slice(tp, cfg_.padded_vocab_size), wpe, B_,
                            T_, cfg_.n_embd, tp.rank);
  }
  ProfileTimer t(profile_, &Profile::tp_comm);
  g_forward(tp, sum, out, static_cast<int64_t>(B_) * T_, cfg_.n_embd);
}

void Model::embed_tokens_backward(float* dtable, float* dwpe, const int32_t* inputs) {
  const TensorParallel& tp = opts_.tp;
  // The whole gradient of the embedding's output (g's backward under sequence parallelism).
  const float* dout;
  const bf16* unused;
  whole_dresidual(&dout, &unused);
  ProfileTimer t(profile_, &Profile::embedding);
  if (tp.on())
    vocab_embedding_backward(dtable, dwpe, dout, inputs, vocab_slice(tp, cfg_.padded_vocab_size),
                             B_, T_, cfg_.n_embd);
  else
    encoder_backward(dtable, dwpe, dout, inputs, B_, T_, cfg_.n_embd);
}

void Model::add_norm_grads(float* part, float* dw, float* db, bool accumulate) {
  const int C = cfg_.n_embd;
  {
    ProfileTimer t(profile_, &Profile::tp_comm);
    tp_all_reduce(opts_.tp, part, db ? 2 * C : C);
  }
  ProfileTimer t(profile_, &Profile::norm);
  for (auto [dst, src] : {std::pair{dw, part}, std::pair{db, part + C}}) {
    if (!dst) continue;
    if (accumulate)
      add_inplace(dst, src, C);
    else
      copy(dst, src, C);
  }
}

int64_t head_chunk_rows(int64_t rows) {
  return std::min<int64_t>(rows, 256);
}

double Model::lm_head_forward(const Head& h, const float* w, const int32_t* targets, float dloss) {
  const ModelConfig& c = cfg_;
  const TensorParallel& tp = opts_.tp;
  // With tensor parallelism this rank's slice of the vocabulary: its columns of the logits.
  const int C = c.n_embd, Vl = c.padded_vocab_size / tp.size;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  auto loss = [&](float* logits, float* losses, const int32_t* tg, int64_t n, bf16* dl_bf) {
    ProfileTimer t(profile_, &Profile::loss);
    if (tp.on())
      vocab_parallel_cross_entropy(tp, logits, losses, tg, n, c.vocab_size,
                                   vocab_slice(tp, c.padded_vocab_size), dloss, tp_loss_work_,
                                   dl_bf);
    else
      softmax_cross_entropy(logits, losses, tg, n, c.vocab_size, Vl, dloss, dl_bf);
  };
  if (opts_.bf16 && targets) {
    // Chunks of rows: logits(R,Vl) = x(R,C) @ w^T, then softmax, loss and the bf16 dlogits of
    // those rows; the full (BT,Vl) logits are never held in fp32.
    const int64_t R = head_chunk_rows(BT);
    double sum = 0;
    for (int64_t r0 = 0; r0 < BT; r0 += R) {
      const int64_t n = std::min(R, BT - r0);
      {
        ProfileTimer t(profile_, &Profile::lm_head);
        matmul_bf16(MatmulShape{n, Vl, C, false, true, false, false}, h.x_bf + r0 * C, wbf(w),
                    h.logits);
      }
      loss(h.logits, h.losses + r0, targets + r0, n,
           dloss != 0.0f ? h.dlogits_bf + r0 * Vl : nullptr);
    }
    for (int64_t i = 0; i < BT; i++) sum += h.losses[i];
    return sum;
  }
  float* logits = h.logits;
  if (opts_.bf16) {  // all logits for the caller (inference): a buffer of their own, made once
    if (full_logits_.size() == 0) full_logits_.resize(BT * Vl);
    logits = full_logits_.data();
  }
  {
    ProfileTimer t(profile_, &Profile::lm_head);
    const MatmulShape s{BT, Vl, C, false, true, false, false};  // logits(BT,Vl) = x @ w^T
    if (opts_.bf16)
      matmul_bf16(s, h.x_bf, wbf(w), logits);
    else
      matmul(s, h.x, w, logits);
  }
  if (!targets) return 0.0;
  loss(logits, h.losses, targets, BT, nullptr);
  double sum = 0;
  for (int64_t i = 0; i < BT; i++) sum += h.losses[i];
  return sum;
}

void Model::lm_head_backward(const Head& h, const float* w, float* dw, float* dx, bool accumulate,
                             bool tied_here) {
  const int C = cfg_.n_embd, Vl = cfg_.padded_vocab_size / opts_.tp.size;
  const int64_t BT = static_cast<int64_t>(B_) * T_;
  ProfileTimer t(profile_, &Profile::lm_head);
  const MatmulShape sw{Vl, C, BT, true, false, accumulate, false};
  const MatmulShape sx{BT, C, Vl, false, false, false, false};
  // dlogits (written by the forward's loss) and x are the slot's: kept until its next forward.
  weight_grad(sw, h.logits, h.dlogits_bf, h.x, h.x_bf, dw, h.x_scratch ? 2 : 0, tied_here);
  if (opts_.bf16)
    matmul_bf16(sx, h.dlogits_bf, wbf(w), dx);
  else
    matmul(sx, h.logits, w, dx);
}

void Model::weight_grad(const MatmulShape& s, const float* a, const bf16* a_bf, const float* b,
                        const bf16* b_bf, float* dw, int scratch, bool now) {
  const bool bf = opts_.bf16;
  if (!opts_.split_backward || now) {
    if (bf)
      matmul_bf16(s, a_bf, b_bf, dw);
    else
      matmul(s, a, b, dw);
    return;
  }
  if (deferred_.size() != static_cast<size_t>(opts_.slots)) deferred_.resize(opts_.slots);
  DeferredSlot& d = deferred_.at(backward_slot_);
  DeferredProduct p{s, a, a_bf, b, b_bf, dw, scratch, {0, 0}};
  // The operands in scratch are copied: (M,K) for a (K,M) transposed, (K,N) for b.
  for (int k = 0; k < 2; k++) {
    if (!(scratch & (1 << k))) continue;
    const int64_t n = k == 0 ? s.M * s.K : s.K * s.N;
    if (bf) {
      p.offset[k] = static_cast<int64_t>(d.b16.size());
      const bf16* src = k == 0 ? a_bf : b_bf;
      d.b16.insert(d.b16.end(), src, src + n);
    } else {
      p.offset[k] = static_cast<int64_t>(d.f32.size());
      const float* src = k == 0 ? a : b;
      d.f32.insert(d.f32.end(), src, src + n);
    }
  }
  d.products.push_back(p);
}

void Model::backward_weight(int slot, bool accumulate) {
  KILN_CHECK(opts_.split_backward);
  if (deferred_.size() != static_cast<size_t>(opts_.slots)) deferred_.resize(opts_.slots);
  DeferredSlot& d = deferred_.at(slot);
  ProfileTimer t(profile_, &Profile::matmul);
  for (DeferredProduct p : d.products) {
    p.s.accumulate = accumulate;
    if (opts_.bf16) {
      const bf16* kept = d.b16.data();
      matmul_bf16(p.s, p.scratch & 1 ? kept + p.offset[0] : p.a_bf,
                  p.scratch & 2 ? kept + p.offset[1] : p.b_bf, p.dw);
    } else {
      const float* kept = d.f32.data();
      matmul(p.s, p.scratch & 1 ? kept + p.offset[0] : p.a,
             p.scratch & 2 ? kept + p.offset[1] : p.b, p.dw);
    }
  }
  d.products.clear();
  d.f32.clear();
  d.b16.clear();
}

int64_t Model::deferred_bytes() const {
  int64_t n = 0;
  for (const auto& d : deferred_)
    n += static_cast<int64_t>(d.f32.capacity() * sizeof(float) + d.b16.capacity() * sizeof(bf16));
  return n;
}

void Model::begin_decode(int32_t token, int pos) {
  const ModelConfig& c = cfg_;
  if (!opts_.kv_cache) fail("decode() needs a model built with ModelOptions::kv_cache");
  if (pos >= c.block_size)
    fail("the sequence reached model.block_size ({}); no more positions", c.block_size);
  if (pos != decode_pos_ + 1 && pos != 0)
    fail("decode() feeds positions in order: expected {} or 0, got {}", decode_pos_ + 1, pos);
  if (token < 0 || token >= c.vocab_size)
    fail("token id {} is outside the vocabulary (0..{})", token, c.vocab_size - 1);
  decode_pos_ = pos;
}

void Model::set_weights(const float* params) {
  if (!opts_.bf16) return;
  if (!own_weights_) own_weights_ = std::make_unique<Bf16WeightCopy>(layout_.total);
  own_weights_->refresh(params);
  weights_ = own_weights_.get();
}

void init_normal(float* p, int64_t n, double std, uint64_t seed) {
  // Chunks that start where the serial draw would be (each normal takes two draws).
  constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
    Rng rng(seed);
    rng.skip(2 * static_cast<uint64_t>(j0));
    const int64_t j1 = std::min(n, j0 + kChunk);
    for (int64_t j = j0; j < j1; j++) p[j] = static_cast<float>(rng.normal() * std);
  }
}

StageSpec pipeline_stage(int n_layer, int stages, int stage) {
  KILN_CHECK(stages >= 1 && stage >= 0 && stage < stages && stages <= n_layer);
  const int base = n_layer / stages, extra = n_layer % stages;
  StageSpec s;
  s.first = stage * base + std::min(stage, extra);
  s.last = s.first + base + (stage < extra ? 1 : 0);
  s.embedding = stage == 0;
  s.head = stage == stages - 1;
  return s;
}

StageSpec pipeline_stage(int n_layer, const std::vector<int>& layers, int stages, int stage) {
  if (layers.empty()) return pipeline_stage(n_layer, stages, stage);
  KILN_CHECK(static_cast<int>(layers.size()) == stages && stage >= 0 && stage < stages);
  StageSpec s;
  for (int k = 0; k < stage; k++) s.first += layers[k];
  s.last = s.first + layers[stage];
  KILN_CHECK(s.last <= n_layer);
  s.embedding = stage == 0;
  s.head = stage == stages - 1;
  return s;
}

LocalLayout tp_local_layout(const ModelConfig& c, int size, int rank) {
  if (!c.llama()) return local_layout(gpt2_logical_tensors(c), size, rank, gpt2_split_dim);
  std::vector<LogicalTensor> logical;
  for (const auto& t : llama_param_layout(c).tensors) logical.push_back({t.name, t.shape});
  return local_layout(logical, size, rank, llama_split_dim);
}

void take_local_slices(const ModelConfig& c, const LocalLayout& local, const float* whole,
                       float* out) {
  const ParamLayout all = param_layout(c);
  KILN_CHECK(all.tensors.size() == local.tensors.size());
  for (size_t i = 0; i < local.tensors.size(); i++) {
    const LocalTensor& t = local.tensors[i];
    const float* src = whole + all.tensors[i].offset;
    float* dst = out + t.offset;
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) dst[j] = src[t.logical_index(j)];
  }
}

std::unique_ptr<Model> make_model(const ModelConfig& c, int B, int T, ModelOptions opts) {
  c.validate();
  if (c.llama()) return std::make_unique<Llama>(c, B, T, opts);
  return std::make_unique<Gpt2>(c, B, T, opts);
}

ActivationBytes activation_plan(const ModelConfig& c, int B, int T, const ModelOptions& opts) {
  if (c.llama()) return llama_plan_activations(c, B, T, opts, nullptr);
  return plan_activations(c, B, T, opts, nullptr);
}

ParamLayout param_layout(const ModelConfig& c) {
  return c.llama() ? llama_param_layout(c) : gpt2_param_layout(c);
}

void init_params(const ParamLayout& layout, const ModelConfig& c, float* params, uint64_t seed) {
  if (c.llama())
    llama_init(layout, c, params, seed);
  else
    gpt2_init(layout, c, params, seed);
}

ModelSpec model_spec(const ModelConfig& c, bool padded, const std::string& name) {
  const std::string n = name.empty() ? c.family : name;
  return c.llama() ? llama_spec(c, padded, n) : gpt2_spec(c, padded, n);
}

int64_t num_params(const ModelConfig& c) {
  return c.llama() ? count_params(llama_spec(c, false, "llama")).total : gpt2_num_params(c);
}

double flops_per_token(const ModelConfig& c, int T) {
  if (c.llama()) return model_flops_per_token(llama_spec(c, false, "llama"), T);
  return gpt2_flops_per_token(c, T);
}

}  // namespace kiln
