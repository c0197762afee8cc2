// The Trainer's side of tensor parallelism (parallel/tensor_parallel.h does the layers'): a
// rank holds slices of the model's tensors (tp_local_layout, model/model.h), so everything that
// meets the whole model goes through here: initialisation and loading (the whole model made,
// then this rank's slices taken), checkpoints and samples (slices gathered over the
// tensor-parallel group into whole tensors), and the gradient norm (tensors every rank holds
// whole counted once).
#include <algorithm>

#include "core/error.h"
#include "core/split_index.h"
#include "kernels/kernels.h"
#include "train/trainer.h"

namespace kiln {

namespace {

constexpr int kTensorGatherTag = 30010;  // a whole tensor from its stage to rank 0

}  // namespace

void Trainer::fill_params(const std::function<void(const ParamLayout& whole, float* p)>& fill) {
  if (!tensor_parallel()) {
    fill(model_->layout(), params_.data());
    return;
  }
  // The same whole model as one rank would make (the same bits at any tp), then this rank's
  // slices of it.
  const ParamLayout whole = param_layout(cfg_.model);
  Buffer<float> all(whole.total);
  fill(whole, all.data());
  take_local_slices(cfg_.model, tp_layout_, all.data(), params_.data());
}

void Trainer::gather_whole_tensor(size_t i, const float* params, float* out) {
  const LocalTensor& t = tp_layout_.tensors.at(i);
  const int64_t n = t.numel();
  Communicator& group = grid_->tp_group();
  const int parts = group.size(), me = group.rank();
  // The pipeline rank whose stage owns the tensor (the first stage owns the tied embedding).
  int owner = 0;
  for (int g = 0; g < virtual_stages() && pipelined(); g++) {
    auto [lo, hi] = stage_range(g);
    if (t.offset >= lo && t.offset < hi) owner = g % grid_->shape().pp;
  }
  if (grid_->pp_rank() == owner) {
    if (t.split_dim < 0) {  // whole on every rank
      if (me == 0) std::copy(params + t.offset, params + t.offset + n, out);
    } else {
      if (tp_gather_.size() < static_cast<size_t>(n * parts)) tp_gather_.resize(n * parts);
      float* all = tp_gather_.data();
      std::copy(params + t.offset, params + t.offset + n, all + me * n);
      group.all_gather(all, std::vector<int64_t>(static_cast<size_t>(parts), n), DType::F32);
      if (me == 0)
        for (int p = 0; p < parts; p++) {
          const float* src = all + p * n;
#pragma omp parallel for schedule(static)
          for (int64_t j = 0; j < n; j++)
            out[split_part_index(t.split_shape, t.split_dim, parts, p, j)] = src[j];
        }
    }
  }
  if (owner == 0 || me != 0) return;
  // From the owning stage's first tensor-parallel rank to rank 0.
  const int64_t whole = n * (t.split_dim < 0 ? 1 : parts);
  const int from = grid_->rank_of(0, owner, 0);
  if (world_->rank() == from)
    world_->send(out, whole, DType::F32, 0, kTensorGatherTag);
  else if (world_->rank() == 0)
    world_->recv(out, whole, DType::F32, from, kTensorGatherTag);
}

void Trainer::gather_whole_model(const float* params, Buffer<float>& out) {
  const ParamLayout whole = param_layout(cfg_.model);
  int64_t largest = 0;
  for (const auto& t : whole.tensors) largest = std::max(largest, t.numel);
  if (grid_->tp_rank() == 0) {
    whole_tensor_.resize(largest);
    if (world_->rank() == 0) out.resize(whole.total);
  }
  for (size_t i = 0; i < whole.tensors.size(); i++) {
    gather_whole_tensor(i, params, whole_tensor_.data());
    if (world_->rank() == 0)
      std::copy(whole_tensor_.data(), whole_tensor_.data() + whole.tensors[i].numel,
                out.data() + whole.tensors[i].offset);
  }
}

double Trainer::grad_sum_squares(int c) {
  DataParallel& d = chunk_dp(c);
  const int64_t sb = d.shard_begin(), se = d.shard_end();
  const float* g = d.zero() == 0 ? grads_.data() + sb : d.shard_grads();
  if (!tensor_parallel() || grid_->tp_rank() == 0) return sum_squares(g, se - sb);
  // The tensors every tensor-parallel rank holds whole have the same gradient on each: rank 0
  // counts them.
  double s = 0;
  for (const auto& t : tp_layout_.tensors) {
    if (t.split_dim < 0) continue;
    const int64_t lo = std::max(t.offset, sb), hi = std::min(t.offset + t.numel(), se);
    if (lo < hi) s += sum_squares(g + (lo - sb), hi - lo);
  }
  return s;
}

}  // namespace kiln
