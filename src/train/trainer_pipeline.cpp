// The Trainer's pipeline parallelism (parallel.pp > 1): each rank of a pipeline group holds one
// stage (model/model.h: a contiguous range of layers, the first with the embedding, the last with
// the head) and runs the schedule's forwards and backwards (parallel/pipeline_schedule.h) on the
// step's micro-batches, receiving its input from the stage before and its output's gradient
// from the stage after. Every stage reads the same micro-batches (its data-parallel rank's);
// the first uses the tokens, the last the targets.
//
// With the interleaved schedule a rank holds several model chunks: chunk c of rank r is virtual
// stage c·P + r of P·v, so a micro-batch visits every rank v times; each chunk is a stage as
// below, with its own activation slots, range and data parallelism.
//
// Each stage owns a contiguous range of the flat buffers, which it alone updates and saves: the
// first from offset 0 (the embedding) to its last block's end, the last from its first block to
// the end (final norm, untied LM head). The flat buffers keep the whole model's layout; the
// pages of other stages' ranges are handed back. The tied embedding (GPT-2, tied Llama) belongs
// to the first stage: the last stage's LM head adds its gradient there before the reduction, and
// the first stage sends the updated weights back after each step (as Megatron-LM keeps the two
// copies equal by summing their gradients).
#include <fmt/format.h>

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "obs/trace.h"
#include "train/trainer.h"

namespace kiln {

namespace {

// Message tags between stages: a micro-batch's activations and gradients carry the receiving
// virtual stage, the micro-batch and the direction (MPI keeps messages of one tag in order, so
// wrapping around is safe); the tied embedding's transfers and the checkpoint's have their own.
constexpr int kMicroTags = 16384;
constexpr int kTiedGradTag = 30000, kTiedWeightTag = 30001, kGatherTag = 30002, kValTag = 30003;

int transfer_tag(int stage, int stages, int micro, bool gradient) {
  return static_cast<int>(((static_cast<int64_t>(micro) * stages + stage) * 2 + gradient) %
                          kMicroTags);
}

}  // namespace

std::vector<int> slots_per_chunk(const PipeSchedule& s, int rank) {
  std::vector<int> held(s.chunks, 0), most(s.chunks, 1);
  for (const PipeAction& a : s.order.at(rank)) {
    if (a.op == PipeOp::Forward) most[a.chunk] = std::max(most[a.chunk], ++held[a.chunk]);
    if (a.op == PipeOp::Backward || a.op == PipeOp::BackwardWeight) held[a.chunk]--;
  }
  return most;
}

std::pair<int64_t, int64_t> Trainer::stage_range(int stage) const {
  const ParamLayout& L = model_->layout();
  if (!pipelined()) return {0, L.total};
  const StageSpec st =
      pipeline_stage(cfg_.model.n_layer, cfg_.stage_layers, virtual_stages(), stage);
  return {st.embedding ? 0 : L.blocks.at(st.first), st.head ? L.total : L.blocks.at(st.last)};
}

bool Trainer::owns(int64_t i) const {
  for (auto [lo, hi] : own_)
    if (i >= lo && i < hi) return true;
  return false;
}

bool Trainer::reads_tied_embedding() const {
  return pipelined() && grid_->pp_rank() == grid_->shape().pp - 1 &&
         model_spec(cfg_.model).tied_embeddings;
}

void Trainer::release_other_stages_params() {
  std::vector<std::pair<int64_t, int64_t>> keep = own_;
  if (reads_tied_embedding()) keep.emplace_back(0, tied_numel());
  std::sort(keep.begin(), keep.end());
  int64_t from = 0;  // hand back every gap between the ranges kept
  for (auto [lo, hi] : keep) {
    if (lo > from) params_.release(from, lo);
    from = std::max(from, hi);
  }
  params_.release(from, params_.size());
}

void Trainer::refresh_weight_copy() {
  if (!pipelined()) return weights_bf16_->refresh(params_.data());
  for (auto [lo, hi] : own_) weights_bf16_->refresh_range(params_.data(), lo, hi);
  if (reads_tied_embedding()) weights_bf16_->refresh_range(params_.data(), 0, tied_numel());
}

void Trainer::add_tied_grad_from_last_stage() {
  const int64_t n = tied_numel();
  if (tied_grad_.size() != static_cast<size_t>(n)) tied_grad_.resize(n);
  {
    TraceSpan span("recv tied embedding gradient", "comm");
    grid_->pp_group().recv(tied_grad_.data(), n, DType::F32, grid_->shape().pp - 1, kTiedGradTag);
  }
  float* g = grads_.data();
  const float* add = tied_grad_.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) g[i] += add[i];
}

void Trainer::share_tied_embedding() {
  if (!model_spec(cfg_.model).tied_embeddings) return;
  Communicator& pp = grid_->pp_group();
  const int P = grid_->shape().pp;
  if (grid_->pp_rank() == 0) {
    TraceSpan span("send tied embedding", "comm");
    pp.send(params_.data(), tied_numel(), DType::F32, P - 1, kTiedWeightTag);
  } else if (reads_tied_embedding()) {
    {
      TraceSpan span("recv tied embedding", "comm");
      pp.recv(params_.data(), tied_numel(), DType::F32, 0, kTiedWeightTag);
    }
    if (weights_bf16_) weights_bf16_->refresh_range(params_.data(), 0, tied_numel());
  }
}

double Trainer::pipeline_forward_backward(StepResult& r, float dloss) {
  Communicator& pp = grid_->pp_group();
  const int P = grid_->shape().pp, me = grid_->pp_rank(), m = cfg_.grad_accum;
  const int S = virtual_stages(), V = chunks();
  const int64_t BT = static_cast<int64_t>(cfg_.batch_size) * cfg_.seq_len;
  // A stage's input or output (this rank's rows of it under sequence parallelism).
  const int64_t x_numel = model_->stage_io_numel();
  // (Validation may have sized act_in_ already: the step's buffers go by grad_in_.)
  if (grad_in_.size() != static_cast<size_t>(x_numel)) {
    act_in_.resize(x_numel);
    grad_in_.resize(x_numel);
    for (auto& b : grad_out_) b = pp.alloc_shared(x_numel * static_cast<int64_t>(sizeof(float)));
    micro_inputs_.resize(BT * m);
    micro_targets_.resize(BT * m);
  }
  // The step's micro-batches, read in order on every stage (the loader's position stays the
  // same on all of them).
  double t = now_seconds();
  for (int i = 0; i < m; i++) {
    next_batch();
    std::copy(inputs_.data(), inputs_.data() + BT, micro_inputs_.data() + i * BT);
    std::copy(targets_.data(), targets_.data() + BT, micro_targets_.data() + i * BT);
  }
  r.data_seconds += now_seconds() - t;

  // Per chunk, activation slots: a micro-batch takes a free one at its forward and gives it back
  // after its backward (its weight part, when split). A slot's output is being sent until its
  // send is done. The first backward (and weight part) of each chunk writes its gradients, later
  // ones add.
  struct ChunkState {
    std::vector<int> slot_of, free_slots;
    std::vector<std::shared_ptr<Work>> slot_send;
    int backwards = 0, weights = 0;
  };
  std::vector<ChunkState> cs(V);
  for (int c = 0; c < V; c++) {
    cs[c].slot_of.assign(m, -1);
    for (int s = chunk_model(c).options().slots; s-- > 0;) cs[c].free_slots.push_back(s);
    cs[c].slot_send.resize(chunk_model(c).options().slots);
  }
  std::vector<std::shared_ptr<Work>> grad_send(2);
  int in_flight = 0, sent_grads = 0;
  const bool split = schedule_.split_backward;
  // Without a split backward each chunk hands its ranges to data parallelism during its last
  // backward, as they become final; with one, every chunk's whole range goes after the last
  // weight part.
  const bool overlap = !split;
  double loss_sum = 0;
  // The wait for a neighbour's tensor, timed as the pipeline's.
  auto receive = [&](float* buf, int stage, int micro, bool gradient, const char* what) {
    const double t0 = now_seconds();
    TraceSpan span(what, "comm", micro);
    pp.recv(buf, x_numel, DType::F32, (gradient ? stage + 1 : stage + S - 1) % P,
            transfer_tag(stage, S, micro, gradient));
    r.pipeline_wait_seconds += now_seconds() - t0;
  };
  // The first stage adds the last stage's LM-head gradient of the tied embedding into its own
  // before data parallelism reduces it (the embedding's range is the last to become ready).
  const bool owns_tied = me == 0 && model_spec(cfg_.model).tied_embeddings;
  auto ready = [&](int c, int64_t b, int64_t e) {
    if (owns_tied && c == 0 && b == 0) add_tied_grad_from_last_stage();
    chunk_dp(c).ready(b, e);
  };
  for (const PipeAction& a : schedule_.order.at(me)) {
    const int i = a.micro, c = a.chunk, g = c * P + me;
    ChunkState& ch = cs[c];
    Model& model = chunk_model(c);
    const StageSpec& st = model.stage();
    const int32_t* inputs = micro_inputs_.data() + i * BT;
    if (a.op == PipeOp::Forward) {
      KILN_CHECK(!ch.free_slots.empty());
      const int s = ch.free_slots.back();
      ch.free_slots.pop_back();
      ch.slot_of[i] = s;
      r.micro_batches_in_flight = std::max(r.micro_batches_in_flight, ++in_flight);
      if (ch.slot_send[s]) {  // the output this slot last held has reached the next stage
        ch.slot_send[s]->wait();
        ch.slot_send[s].reset();
      }
      if (!st.embedding) receive(act_in_.data(), g, i, false, "recv activations");
      t = now_seconds();
      {
        TraceSpan span("forward", "compute", i);
        loss_sum +=
            model.forward_stage(params_.data(), inputs, st.embedding ? nullptr : act_in_.data(),
                                st.head ? micro_targets_.data() + i * BT : nullptr, dloss, {}, s);
      }
      r.forward_seconds += now_seconds() - t;
      if (!st.head)
        ch.slot_send[s] = pp.send_async(model.stage_output(s), x_numel, DType::F32, (g + 1) % P,
                                        transfer_tag(g + 1, S, i, false));
      continue;
    }
    KILN_CHECK(ch.slot_of[i] >= 0);
    const int s = ch.slot_of[i];
    if (a.op == PipeOp::BackwardWeight) {  // zero bubble: the weight gradients, deferred
      t = now_seconds();
      {
        TraceSpan span("weight gradients", "compute", i);
        model.backward_weight(s, ch.weights++ > 0);
      }
      r.backward_seconds += now_seconds() - t;
      ch.free_slots.push_back(s);
      in_flight--;
      continue;
    }
    if (!st.head) receive(grad_in_.data(), g, i, true, "recv gradients");
    const bool first = ch.backwards == 0, last = ++ch.backwards == m && overlap;
    if (last) chunk_dp(c).begin(grads_, true);
    t = now_seconds();
    {
      TraceSpan span(split ? "input gradients" : "backward", "compute", i);
      Model::GradsReady on_ready;
      if (last) on_ready = [&, c](int64_t b, int64_t e) { ready(c, b, e); };
      model.backward_stage(params_.data(), grads_.data(), inputs,
                           st.head ? nullptr : grad_in_.data(), on_ready, {}, !first, s);
    }
    r.backward_seconds += now_seconds() - t;
    if (!st.embedding) {  // input_grad() is overwritten by the next backward: send a copy
      const int k = sent_grads++ % 2;
      if (grad_send[k]) grad_send[k]->wait();
      float* out = static_cast<float*>(grad_out_[k]->data());
      std::copy(model.input_grad(), model.input_grad() + x_numel, out);
      grad_send[k] =
          pp.send_async(out, x_numel, DType::F32, (g + S - 1) % P, transfer_tag(g - 1, S, i, true));
    }
    if (split) continue;  // the slot is held until its weight part
    ch.free_slots.push_back(s);
    in_flight--;
  }
  // The last stage's LM-head gradient of the tied embedding goes to the first stage.
  std::shared_ptr<Work> tied_send;
  if (reads_tied_embedding())
    tied_send = pp.send_async(grads_.data(), tied_numel(), DType::F32, 0, kTiedGradTag);
  if (!overlap)
    for (int c = 0; c < V; c++) {
      chunk_dp(c).begin(grads_, true);
      ready(c, own_[c].first, own_[c].second);
    }
  {
    TraceSpan span("gradient reduction wait", "comm");
    for (int c = 0; c < V; c++) r.comm_wait_seconds += chunk_dp(c).finish();
  }
  t = now_seconds();
  for (auto& ch : cs)
    for (auto& w : ch.slot_send)
      if (w) w->wait();
  for (auto& w : grad_send)
    if (w) w->wait();
  if (tied_send) tied_send->wait();
  r.pipeline_wait_seconds += now_seconds() - t;
  return loss_sum;
}

double Trainer::pipeline_forward_only(const int32_t* inputs, const int32_t* targets) {
  Communicator& pp = grid_->pp_group();
  const int P = grid_->shape().pp, me = grid_->pp_rank(), S = virtual_stages();
  const int64_t x_numel = model_->stage_io_numel();
  if (act_in_.size() != static_cast<size_t>(x_numel)) act_in_.resize(x_numel);
  double loss = 0;
  for (int g = me; g < S; g += P) {  // this rank's chunks in order
    Model& model = chunk_model(g / P);
    const StageSpec& st = model.stage();
    if (!st.embedding) pp.recv(act_in_.data(), x_numel, DType::F32, (g + S - 1) % P, kValTag);
    loss += model.forward_stage(params_.data(), inputs, st.embedding ? nullptr : act_in_.data(),
                                st.head ? targets : nullptr, 0.0f, {}, 0);
    if (!st.head) pp.send(model.stage_output(0), x_numel, DType::F32, (g + 1) % P, kValTag);
  }
  return loss;
}

void Trainer::bring_to_rank0(int64_t begin, int64_t end) {
  const int P = grid_->shape().pp;
  for (int g = 0; g < virtual_stages(); g++) {
    if (g % P == 0) continue;  // rank 0's own
    auto [lo, hi] = stage_range(g);
    lo = std::max(lo, begin);
    hi = std::min(hi, end);
    if (lo >= hi) continue;
    // The stage's first data-parallel rank (every one holds the same weights) sends.
    const int from = grid_->rank_of(0, g % P, grid_->tp_rank());
    if (world_->rank() == from)
      world_->send(params_.data() + lo, hi - lo, DType::F32, 0, kGatherTag);
    else if (world_->rank() == 0)
      world_->recv(params_.data() + lo, hi - lo, DType::F32, from, kGatherTag);
  }
}

}  // namespace kiln
