// The Trainer's checkpoints: what a save holds, sync and async saves and their records, resume
// from a checkpoint on any layout, and --init-from. (The step loop is in trainer.cpp.)
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_manifest.h"
#include "ckpt/checkpointer.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_state.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"
#include "kernels/kernels.h"
#include "obs/metric_table.h"
#include "obs/trace.h"
#include "parallel/local_layout.h"
#include "train/hf_weights.h"
#include "train/trainer.h"

namespace fs = std::filesystem;

namespace kiln {

CheckpointContents Trainer::checkpoint_contents() {
  // A checkpoint is a promise that training can go on from it: weights that are not finite
  // would resume into nothing but skipped steps, and keep_last would prune the good ones.
  if (!params_finite()) {
    auto last = latest_checkpoint(checkpoint_root());
    throw ExitCodeError(
        kExitNonFinite,
        fmt::format("step {}: the weights are not finite (NaN or inf); no checkpoint is written, "
                    "so the newest stays {}. Lower train.lr or raise train.warmup_steps, then "
                    "resume",
                    step_, last ? last->dir : std::string("(none)")));
  }
  TrainerState st;
  st.step = step_;
  st.adam_steps = step_ - skipped_steps_;
  st.skipped_steps = skipped_steps_;
  st.train_position = train_loader_ ? train_loader_->position() : 0;
  st.train_sequences =
      st.train_position * static_cast<uint64_t>(dp_group_->size()) * cfg_.batch_size;
  st.rng_state = rng_.state();
  st.config = cfg_.to_json();
  st.train_tokens = train_loader_ ? static_cast<uint64_t>(train_shards_.num_tokens()) : 0;
  nlohmann::json state = trainer_state_to_json(st);
  // What goes in (ckpt/checkpointer.h): the weights, whole, gathered tensor by tensor under
  // ZeRO-3; each rank's own shard of the AdamW state (ZeRO 1-3; with ZeRO 0 rank 0 holds it
  // whole); config.json and, last, trainer_state.json.
  CheckpointContents c;
  c.model = named_tensors(model_->layout(), cfg_.model, params_.data());
  c.model_metadata = {{"format", "pt"}};
  std::vector<std::pair<int64_t, int64_t>> ranges;  // each tensor's [begin, end) in params_
  for (const auto& t : c.model) {
    const int64_t begin = static_cast<const float*>(t.data) - params_.data();
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    ranges.emplace_back(begin, begin + numel);
  }
  if (pipelined()) {  // each tensor comes to rank 0 from its stage, and goes again once written
    c.before_tensor = [this, ranges](size_t i) {
      bring_to_rank0(ranges[i].first, ranges[i].second);
    };
    c.after_tensor = [this, ranges](size_t i) {
      auto [b, e] = ranges[i];
      if (world_->rank() == 0 && !owns(b)) params_.release(b, e);
    };
  }
  if (zero3()) {
    c.before_tensor = [this, ranges](size_t i) {
      auto [b, e] = ranges[i];
      dp_->fetch(params_, master_.data(), b, e);
      dp_->await(b);
    };
    c.after_tensor = [this, ranges](size_t i) {
      auto [b, e] = ranges[i];
      dp_->drop(params_, b, e);
    };
  }
  if (tensor_parallel()) {
    // Whole tensors, each gathered from the tensor-parallel ranks of data-parallel rank 0 into
    // one buffer (the largest tensor's size) that rank 0 writes from; under ZeRO-3 this rank's
    // slice is first gathered over data parallelism.
    const ParamLayout whole = param_layout(cfg_.model);
    int64_t largest = 0;
    for (const auto& t : whole.tensors) largest = std::max(largest, t.numel);
    if (grid_->tp_rank() == 0 && dp_group_->rank() == 0) whole_tensor_.resize(largest);
    c.model = named_tensors(whole, cfg_.model, whole_tensor_.data());
    for (auto& t : c.model) t.data = whole_tensor_.data();
    std::vector<std::pair<int64_t, int64_t>> local;  // each tensor's slice in params_
    for (const auto& t : tp_layout_.tensors) local.emplace_back(t.offset, t.offset + t.numel());
    const bool z3 = zero3();
    c.before_tensor = [this, local, z3](size_t i) {
      auto [b, e] = local[i];
      if (z3) {
        dp_->fetch(params_, master_.data(), b, e);
        dp_->await(b);
      }
      if (dp_group_->rank() == 0) gather_whole_tensor(i, params_.data(), whole_tensor_.data());
    };
    c.after_tensor = [this, local, z3](size_t i) {
      if (z3) dp_->drop(params_, local[i].first, local[i].second);
    };
  }
  // Each pipeline stage's part of the state from its data-parallel ranks' shards (ZeRO 1-3), or
  // whole from its first data-parallel rank.
  const bool sharded = dp_->zero() > 0;
  const int per_stage = sharded ? dp_group_->size() : 1;
  const int tp = grid_->shape().tp;
  if (sharded || dp_group_->rank() == 0)
    for (int k = 0; k < chunks(); k++) {
      // File numbers: virtual stage, then data-parallel rank, then tensor-parallel rank.
      const int stage = k * grid_->shape().pp + grid_->pp_rank();
      CheckpointContents::Shard sh;
      sh.rank = (stage * per_stage + (sharded ? dp_group_->rank() : 0)) * tp + grid_->tp_rank();
      sh.ranks = virtual_stages() * per_stage * tp;
      sh.begin = chunk_dp(k).shard_begin();
      sh.end = chunk_dp(k).shard_end();
      sh.buffers = {{"exp_avg.", m_.data() + state_at_[k]},
                    {"exp_avg_sq.", v_.data() + state_at_[k]}};
      c.shards.push_back(sh);
    }
  c.shard_tensors = flat_tensors(/*writing=*/true);
  c.shard_metadata = {{"optimizer", "adamw"}, {"step", std::to_string(step_)}};
  c.files = {{"config.json", hf_config(cfg_.model).dump(2) + "\n"},
             {"trainer_state.json", state.dump(2) + "\n"}};
  return c;
}

Checkpointer& Trainer::checkpointer() {
  if (!checkpointer_)
    checkpointer_ = std::make_unique<Checkpointer>(*world_, checkpoint_root(), cfg_.keep_last);
  return *checkpointer_;
}

std::string Trainer::save_checkpoint() {
  complete_checkpoint_logged(true);  // its record first
  return checkpointer().save(step_, checkpoint_contents());
}

void Trainer::save_checkpoint_async() {
  complete_checkpoint_logged(true);
  checkpointer().save_async(step_, checkpoint_contents());
}

std::string Trainer::complete_checkpoint(bool wait) {
  return checkpointer_ ? checkpointer_->complete(wait) : std::string();
}

// This rank's tensors as sharded checkpoints see them: from the local layout (parallel/
// local_layout.h), each tensor whole or this tensor-parallel rank's part of it.
std::vector<FlatTensor> Trainer::flat_tensors(bool writing) const {
  std::vector<FlatTensor> out;
  for (const auto& t : tp_layout_.tensors) {
    // Tensors every tensor-parallel rank holds whole are written by the first.
    if (writing && t.split_dim < 0 && grid_->tp_rank() > 0) continue;
    FlatTensor f{t.name, t.logical_shape, t.offset, t.numel()};
    if (t.split_dim >= 0) {
      f.split_shape = t.split_shape;
      f.split_dim = t.split_dim;
      f.parts = t.parts;
      f.part = t.part;
    }
    out.push_back(std::move(f));
  }
  KILN_CHECK(tp_layout_.total == model_->layout().total);
  return out;
}

void Trainer::init_from(const std::string& path) {
  // A Hugging Face directory says what model it holds: it must be the config's.
  const fs::path cfg_path = fs::path(path) / "config.json";
  if (fs::is_directory(path) && fs::exists(cfg_path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(cfg_path.string(), "model config"));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", cfg_path.string(), e.what());
    }
    const ModelConfig hf = config_from_hf(j, cfg_path.string(), cfg_.vocab_multiple);
    const ModelConfig& m = cfg_.model;
    auto differs = [&](const char* key, auto theirs, auto ours) {
      if (theirs != ours)
        fail(
            "--init-from {}: its config.json has {} = {}, the run's config {} (set the key to "
            "the checkpoint's value)",
            path, key, theirs, ours);
    };
    differs("model.family", hf.family, m.family);
    differs("model.n_layer", hf.n_layer, m.n_layer);
    differs("model.n_head", hf.n_head, m.n_head);
    differs("model.n_embd", hf.n_embd, m.n_embd);
    differs("model.vocab_size", hf.vocab_size, m.vocab_size);
    if (m.llama()) {
      differs("model.n_kv_head", hf.kv_heads(), m.kv_heads());
      differs("model.ffn_hidden", hf.ffn_hidden, m.ffn_hidden);
      differs("model.tie_embeddings", hf.tie_embeddings, m.tie_embeddings);
      differs("model.rope_theta", hf.rope_theta, m.rope_theta);
      differs("model.rope_scaling", hf.rope_llama3 ? "llama3" : "none",
              m.rope_llama3 ? "llama3" : "none");
    }
  }
  fill_params([&](const ParamLayout& whole, float* p) {
    load_tensors(TensorFiles(path), whole, cfg_.model, p);
  });
}

void Trainer::load_whole_optimizer_state(const std::string& path, int64_t sb, int64_t se, float* m,
                                         float* v) {
  if (tensor_parallel())
    fail(
        "{}: a checkpoint of an earlier kiln (one optimizer.safetensors) resumes only without "
        "tensor parallelism; resume it at parallel.tp = 1 and save once",
        path);
  const auto& layout = model_->layout();
  const TensorFiles opt_file(path);
  for (auto [prefix, dst] : {std::pair{"exp_avg.", m}, std::pair{"exp_avg_sq.", v}}) {
    if (sb == 0 && se == static_cast<int64_t>(params_.size())) {
      load_tensors(opt_file, layout, cfg_.model, dst, prefix);
      continue;
    }
    Buffer<float> full(params_.size());
    load_tensors(opt_file, layout, cfg_.model, full.data(), prefix);
    std::copy(full.data() + sb, full.data() + se, dst);
  }
}

void Trainer::resume_from(const std::string& dir) {
  auto p = fs::path(dir);
  // Every part the save listed, whole (earlier kilns' checkpoints have no manifest).
  verify_checkpoint_manifest(dir);
  std::string state_path = (p / "trainer_state.json").string();
  TrainerState st = parse_trainer_state(read_file(state_path, "trainer state"), state_path);
  TrainConfig saved = train_config_from_json(st.config, state_path + " (config)");
  ResumeDiff diff = compare_resume_config(saved, cfg_);
  if (!diff.refused.empty()) {
    std::string keys;
    for (const auto& r : diff.refused) keys += "\n  " + r;
    fail(
        "cannot resume from {}: the config changes what the checkpoint means:{}\nRestore those "
        "keys, or start a new run from its weights (--init-from {})",
        dir, keys, (p / "model.safetensors").string());
  }
  // The data: the same dataset (its token count) and a position that maps onto this layout.
  const uint64_t saved_tokens = st.train_tokens;
  if (train_loader_ && saved_tokens > 0 &&
      saved_tokens != static_cast<uint64_t>(train_shards_.num_tokens()))
    fail(
        "cannot resume from {}: it was trained on data.train with {} tokens, the config's "
        "data.train ({}) has {}; the data position would point into other data. Use the same "
        "dataset, or start a new run from its weights (--init-from {})",
        dir, saved_tokens, cfg_.train_data, train_shards_.num_tokens(),
        (p / "model.safetensors").string());
  uint64_t position = st.train_position;
  const uint64_t per_micro = static_cast<uint64_t>(dp_group_->size()) * cfg_.batch_size;
  if (st.train_sequences > 0) {
    if (st.train_sequences % per_micro != 0)
      fail(
          "cannot resume from {}: it consumed {} sequences of data.train, not a whole number of "
          "this layout's micro-batches ({} ranks x train.batch_size {}); choose a layout whose "
          "ranks x batch_size divides it",
          dir, st.train_sequences, dp_group_->size(), cfg_.batch_size);
    position = st.train_sequences / per_micro;
    if (st.step > 0) {
      const uint64_t was = st.train_sequences / static_cast<uint64_t>(st.step);
      const uint64_t now = per_micro * static_cast<uint64_t>(cfg_.grad_accum);
      if (was != now)
        diff.changed.push_back(fmt::format("global batch: {} -> {} sequences per step", was, now));
    }
  }
  for (const auto& c : diff.changed)
    fmt::print(stderr, "kiln: note: resuming {} with a changed {}\n", dir, c);
  config_changes_ = diff.changed;

  const TensorFiles weights((p / "model.safetensors").string());
  fill_params(
      [&](const ParamLayout& whole, float* w) { load_tensors(weights, whole, cfg_.model, w); });
  // Each rank reads its shard of the AdamW state, whatever the layout that wrote it: from the
  // per-rank files (optimizer-RRRRR-of-NNNNN.safetensors), or from one optimizer.safetensors of
  // whole tensors (checkpoints of earlier kiln versions).
  const auto shards = state_shard_files(dir, "optimizer");
  for (int k = 0; k < chunks(); k++) {  // each chunk's shard
    const int64_t sb = chunk_dp(k).shard_begin(), se = chunk_dp(k).shard_end();
    float* m = m_.data() + state_at_[k];
    float* v = v_.data() + state_at_[k];
    if (!shards.empty())
      read_state_shards(shards, flat_tensors(), sb, se, {{"exp_avg.", m}, {"exp_avg_sq.", v}});
    else
      load_whole_optimizer_state((p / "optimizer.safetensors").string(), sb, se, m, v);
  }
  if (!std::isfinite(sum_squares(params_.data(), params_.size())) ||
      !std::isfinite(sum_squares(m_.data(), static_cast<int64_t>(m_.size()))) ||
      !std::isfinite(sum_squares(v_.data(), static_cast<int64_t>(v_.size()))))
    fail(
        "cannot resume from {}: its weights or AdamW state are not finite (NaN or inf); every "
        "step would be skipped. Remove that checkpoint directory to resume from an older one",
        dir);
  step_ = st.step;
  skipped_steps_ = st.skipped_steps;
  rng_.set_state(st.rng_state);
  if (train_loader_) train_loader_->set_position(position);
  if (!opts_.quiet) fmt::print("resumed from {} (step {})\n", dir, step_);
  resumed_from_ = dir;
}

void Trainer::save_checkpoint_logged() {
  if (watchdog_) watchdog_->set_phase("checkpoint");
  std::string dir;
  complete_checkpoint_logged(true);
  double t0 = now_seconds();
  {
    TraceSpan span("checkpoint", "io");
    dir = save_checkpoint();
  }
  log_checkpoint(dir, now_seconds() - t0, step_, false);
  if (watchdog_) watchdog_->set_phase("train");
}

void Trainer::save_checkpoint_async_logged() {
  if (watchdog_) watchdog_->set_phase("checkpoint");
  complete_checkpoint_logged(true);
  double t0 = now_seconds();
  {
    TraceSpan span("checkpoint copy", "io");
    save_checkpoint_async();
  }
  async_blocked_seconds_ = now_seconds() - t0;
  if (!opts_.quiet)
    fmt::print(
        "checkpoint step {}: copied ({:.1f} MiB on this rank, {:.2f} s), writing in the "
        "background\n",
        step_, checkpointer().snapshot_bytes() / 1048576.0, async_blocked_seconds_);
  if (watchdog_) watchdog_->set_phase("train");
}

void Trainer::complete_checkpoint_logged(bool wait) {
  if (!checkpointer_ || !checkpointer_->pending()) return;
  const int64_t step = checkpointer_->pending_step();
  double t0 = now_seconds();
  std::string dir;
  {
    TraceSpan span("checkpoint publish", "io");
    dir = complete_checkpoint(wait);
  }
  if (dir.empty()) return;
  async_blocked_seconds_ += now_seconds() - t0;
  log_checkpoint(dir, async_blocked_seconds_, step, true);
  async_blocked_seconds_ = 0;
}

// `seconds`: what the save cost training (an async save: its copy and its publication).
void Trainer::log_checkpoint(const std::string& dir, double seconds, int64_t step, bool async) {
  last_checkpoint_unix_ = unix_seconds();
  if (metrics_) {
    nlohmann::json rec = {{"type", "checkpoint"},
                          {"step", step},
                          {metric_json_key(Metric::CheckpointSeconds), seconds},
                          {"dir", dir},
                          {metric_json_key(Metric::CheckpointTimestamp), last_checkpoint_unix_},
                          {"async", async}};
    if (async) rec["published_at_step"] = step_;
    metrics_->write(rec);
  }
  set_metric(Metric::CheckpointSeconds, seconds);
  set_metric(Metric::CheckpointTimestamp, last_checkpoint_unix_);
  if (opts_.quiet) return;
  if (async)
    fmt::print("checkpoint {} ({:.2f} s of training, {:.2f} s writing in the background)\n", dir,
               seconds, checkpointer_->last_write_seconds());
  else
    fmt::print("checkpoint {} ({:.2f} s)\n", dir, seconds);
}

}  // namespace kiln
