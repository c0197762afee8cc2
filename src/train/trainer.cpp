#include "train/trainer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_manifest.h"
#include "ckpt/checkpointer.h"
#include "ckpt/safetensors.h"
#include "ckpt/sharded_state.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/file.h"
#include "core/process.h"
#include "data/manifest.h"
#include "kernels/kernels.h"
#include "kernels/matmul.h"
#include "launch/job_env.h"
#include "model/sampler.h"
#include "obs/metric_table.h"
#include "obs/trace.h"
#include "parallel/local_layout.h"
#include "train/comm_observer.h"
#include "train/hf_weights.h"
#include "train/stop_request.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

// Tests of recovery only: KILN_TEST_CRASH_AT="RANK:STEP" makes that rank abort once it has
// finished that step, in every run that reaches it (a rank that keeps failing).
void crash_if_asked_for_test(int rank, int64_t step) {
  static const char* v = std::getenv("KILN_TEST_CRASH_AT");
  if (!v) return;
  int r = -1;
  long s = -1;
  if (std::sscanf(v, "%d:%ld", &r, &s) == 2 && r == rank && s == step) {
    fmt::print(stderr, "kiln: KILN_TEST_CRASH_AT={}: rank {} aborts after step {}\n", v, rank,
               step);
    std::abort();
  }
}

}  // namespace

double learning_rate(const TrainConfig& c, int64_t s) {
  if (s < c.warmup_steps) return c.lr * static_cast<double>(s + 1) / c.warmup_steps;
  int64_t decay_steps = std::max<int64_t>(1, c.steps - c.warmup_steps);
  double r = std::min(1.0, static_cast<double>(s - c.warmup_steps) / decay_steps);
  return c.min_lr + 0.5 * (1.0 + std::cos(M_PI * r)) * (c.lr - c.min_lr);
}

Trainer::Trainer(TrainConfig cfg, TrainerOptions opts, std::unique_ptr<Communicator> comm)
    : cfg_(std::move(cfg)), opts_(opts), rng_(static_cast<uint64_t>(cfg_.seed)) {
  cfg_.validate();
  observe_communicators();  // the watchdog reads what the communicators report
  if (!comm) {
    comm = make_world_communicator(cfg_.comm_options());
  }
  GridShape shape;
  refused_as_bad_input([&] { shape = cfg_.grid_shape(comm->size()); });
  grid_ = std::make_unique<Grid>(std::move(comm), shape);
  world_ = &grid_->world();
  dp_group_ = &grid_->dp_group();
  // The run directory, the data and the checkpoint are the job's input: refusing one of them is
  // final (kExitBadInput), a launcher does not retry it; a failing collective is not a refusal.
  if (opts_.claim_run_dir) claim_run_directory();
  // train.threads = 0: all cores, shared out among the ranks this machine runs.
  int threads = cfg_.threads;
  if (threads == 0) {
    // Slurm's --cpus-per-task when given; otherwise this machine's cores over its ranks.
    JobEnv env = job_env();
    threads = env.cpus_per_task > 0
                  ? env.cpus_per_task
                  : std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)) / env.local_size);
  }
  set_num_threads(threads);
  if (world_->rank() != 0) opts_.quiet = true;  // rank 0 speaks for the job
  const int B = cfg_.batch_size, T = cfg_.seq_len;
  ModelOptions mo;
  mo.bf16 = cfg_.dtype == "bf16";
  mo.recompute = parse_recompute(cfg_.recompute);
  mo.flash_attention = cfg_.attention == "flash";
  if (shape.tp > 1) mo.tp = {&grid_->tp_group(), shape.tp, grid_->tp_rank(), cfg_.sp};
  tp_layout_ = tp_local_layout(cfg_.model, shape.tp, grid_->tp_rank());
  // The model chunks this rank holds (one but with the interleaved schedule): each a pipeline
  // stage with an activation slot for each micro-batch the schedule keeps in flight on it.
  const int P = shape.pp, me = grid_->pp_rank();
  const int nchunks = pipelined() ? cfg_.virtual_stages : 1;
  std::vector<int> slots(nchunks, 1);
  if (pipelined()) {
    schedule_ = pipeline_schedule(cfg_.schedule, P, cfg_.grad_accum, nchunks);
    slots = slots_per_chunk(schedule_, me);
    mo.split_backward = schedule_.split_backward;
  }
  const int64_t bucket_bytes = static_cast<int64_t>(cfg_.bucket_mb * 1e6);
  for (int c = 0; c < nchunks; c++) {
    if (pipelined())
      mo.stage = pipeline_stage(cfg_.model.n_layer, cfg_.stage_layers, P * nchunks, c * P + me);
    mo.slots = slots[c];
    if (c == 0)
      model_ = make_model(cfg_.model, B, T, mo);
    else
      later_models_.push_back(make_model(cfg_.model, B, T, mo));
    own_.push_back(stage_range(pipelined() ? c * P + me : 0));
    auto [lo, hi] = own_.back();
    std::vector<int64_t> offsets;
    for (const auto& t : model_->layout().tensors) offsets.push_back(t.offset);
    // Data parallelism reduces and shards this chunk's parameters (at pp = 1, all of them).
    auto dp =
        std::make_unique<DataParallel>(*dp_group_, hi - lo, offsets, cfg_.zero, bucket_bytes, lo);
    if (c == 0)
      dp_ = std::move(dp);
    else
      later_dps_.push_back(std::move(dp));
  }
  const int64_t n = model_->layout().total;
  params_ = PageBuffer(n);
  grads_ = PageBuffer(n);
  if (dp_group_->size() > 1 && dp_group_->shares_memory()) {
    // Gradient buckets live in the engine's shared memory: it then all-reduces (ZeRO 0) or
    // reduce-scatters (ZeRO 1, 2) them reading the peers' buckets in place (docs/collectives.md,
    // "Shared buffers"). ZeRO 2 hands pages back as it goes (MADV_REMOVE); if a rank could not
    // make shared memory, it keeps its own mapping for that.
    std::shared_ptr<SharedMemory> mem =
        dp_group_->alloc_shared(n * static_cast<int64_t>(sizeof(float)));
    if (cfg_.zero <= 1 || mem->removable())
      grads_ = PageBuffer(static_cast<float*>(mem->data()), n, mem, mem->removable());
  }
  int64_t state = 0;  // each chunk's shard of the AdamW state, one after the other
  for (int c = 0; c < chunks(); c++) {
    state_at_.push_back(state);
    state += chunk_dp(c).shard_end() - chunk_dp(c).shard_begin();
  }
  m_.resize(state);
  v_.resize(state);
  inputs_.resize(static_cast<size_t>(B) * T);
  targets_.resize(static_cast<size_t>(B) * T);
  flops_per_token_ = flops_per_token(cfg_.model, T);

  if (!opts_.batches) refused_as_bad_input([&] { open_data(); });

  KILN_CHECK(tp_layout_.total == model_->layout().total);
  fill_params([&](const ParamLayout& whole, float* p) {
    init_params(whole, cfg_.model, p, static_cast<uint64_t>(cfg_.seed));
  });
  refused_as_bad_input([&] {
    std::optional<CheckpointRef> ck;
    if (cfg_.resume != "none") {
      ck = latest_checkpoint(checkpoint_root());
      if (!ck && cfg_.resume == "must")
        fail(
            "--resume: no complete checkpoint in {} (nothing to resume; run without --resume to "
            "start fresh)",
            checkpoint_root());
    }
    if (ck) {
      resume_from(ck->dir);
    } else if (!cfg_.init_from.empty()) {
      init_from(cfg_.init_from);
    }
  });

  if (pipelined()) release_other_stages_params();
  if (zero3()) {  // keep only this rank's shard; ranges are gathered where they are used
    master_.resize(std::max<int64_t>(1, dp_->shard_end() - dp_->shard_begin()));
    std::copy(params_.data() + dp_->shard_begin(), params_.data() + dp_->shard_end(),
              master_.data());
    params_.release(0, params_.size());
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (int l = 0; l < cfg_.model.n_layer; l++) blocks.push_back(block_range(l));
    zero3_ = std::make_unique<Zero3Prefetch>(*dp_, params_, master_.data(), std::move(blocks));
  }
  // bf16: the matmuls' copy of the weights is the trainer's (it owns precision), lent to the model.
  if (cfg_.dtype == "bf16") {
    weights_bf16_ = std::make_unique<Bf16WeightCopy>(model_->layout().total);
    model_->use_weight_copy(weights_bf16_.get());
    if (zero3()) {  // made range by range as ZeRO-3 gathers the parameters, dropped with them
      zero3_->on_present = [this](int64_t b, int64_t e) {
        weights_bf16_->refresh_range(params_.data(), b, e);
      };
      zero3_->on_drop = [this](int64_t b, int64_t e) { weights_bf16_->release(b, e); };
    } else {
      refresh_weight_copy();  // the first copy
    }
  }
  // MFU is measured against the peak of the dtype the matmuls run in, on this many threads.
  std::vector<std::string> peak_notes;
  peak_ =
      resolve_peak(cfg_.peak_gflops, cfg_.dtype, num_threads(), opts_.measure_peak, &peak_notes);
  if (world_->rank() == 0)
    for (const auto& note : peak_notes) fmt::print(stderr, "kiln: note: {}\n", note);
  fs::create_directories(cfg_.out_dir);
  if (!opts_.batches && world_->rank() == 0)
    metrics_.emplace((fs::path(cfg_.out_dir) / "metrics.jsonl").string());
  if (world_->rank() == 0) {
    registry_ = std::make_shared<MetricsRegistry>();
    declare_metrics();
    if (opts_.metrics_port >= 0) {
      server_ = std::make_unique<MetricsServer>(registry_, opts_.metrics_host, opts_.metrics_port);
      if (!opts_.quiet)
        fmt::print("metrics at {}\n", metrics_url(opts_.metrics_host, server_->port()));
    }
  }
}

// The training shards (and the validation ones), checked before anything trains.
void Trainer::open_data() {
  const int B = cfg_.batch_size, T = cfg_.seq_len;
  auto files = expand_shard_pattern(cfg_.train_data, "data.train");
  check_manifest(files[0]);
  train_shards_ = ShardSet(files, "data.train");
  train_loader_ = std::make_unique<Loader>(train_shards_, B, T, cfg_.model.vocab_size, cfg_.shuffle,
                                           static_cast<uint64_t>(cfg_.seed), dp_group_->rank(),
                                           dp_group_->size(), /*prefetch=*/true);
  if (!cfg_.val_data.empty())
    val_shards_ = ShardSet(expand_shard_pattern(cfg_.val_data, "data.val"), "data.val");
  else if (cfg_.val_every > 0)
    fail("{}: train.val_every = {} but data.val is empty; set data.val or train.val_every = 0",
         cfg_.source, cfg_.val_every);
}

// Rank 0 takes the run directory for this run before anyone reads or writes in it; every rank
// learns the outcome, so a refusal ends all of them with rank 0's reason, not a hang.
void Trainer::claim_run_directory() {
  std::string error;
  if (world_->rank() == 0) {
    try {
      run_lock_ = std::make_unique<RunDirLock>(cfg_.out_dir);
      if (const auto& h = run_lock_->stale())
        fmt::print(stderr,
                   "kiln: note: {} was held by kiln pid {} on host {}, which ended without "
                   "releasing it (killed or crashed); this run takes it over\n",
                   run_lock_->path(), h->pid, h->host);
      for (const auto& note : recover_checkpoint_dir(checkpoint_root()))
        fmt::print(stderr, "kiln: note: {}\n", note);
      if (cfg_.resume == "none") {
        std::string earlier = earlier_run_in(cfg_.out_dir);
        if (!earlier.empty() && !cfg_.overwrite)
          fail(
              "{}: train.out_dir {} holds an earlier run ({}); a fresh run there would mix with "
              "it and prune its checkpoints. Continue it with --resume, start over with "
              "--overwrite (deletes its checkpoints and metrics), or set another train.out_dir",
              cfg_.source, cfg_.out_dir, earlier);
        if (!earlier.empty()) {
          remove_earlier_run(cfg_.out_dir);
          fmt::print(stderr, "kiln: note: train.overwrite: removed the earlier run in {} ({})\n",
                     cfg_.out_dir, earlier);
        }
      }
    } catch (const Error& e) {
      error = e.what();
      run_lock_.reset();
    }
  }
  // A refusal is final (kExitBadInput); a failure of the reduction itself (a timeout) is not.
  if (world_->size() > 1 && world_->all_reduce_scalar(error.empty() ? 0.0 : 1.0) > 0 &&
      error.empty())
    throw ExitCodeError(
        kExitBadInput,
        fmt::format("rank {}: rank 0 refused train.out_dir {} (its message says why)",
                    world_->rank(), cfg_.out_dir));
  if (!error.empty()) throw ExitCodeError(kExitBadInput, error);
}

bool Trainer::params_finite() {
  const float* p = zero3() ? master_.data() : params_.data();
  const int64_t n = zero3() ? dp_->shard_end() - dp_->shard_begin() : params_.size();
  double bad = std::isfinite(sum_squares(p, n)) ? 0.0 : 1.0;
  if (world_->size() > 1) bad = world_->all_reduce_scalar(bad);
  return bad == 0;
}

void Trainer::declare_metrics() {
  MetricsRegistry& m = *registry_;
  kiln::declare_metrics(m);
  m.set(metric(Metric::Info).prometheus, 1,
        {{"version", KILN_VERSION},
         {"dp", std::to_string(dp_group_->size())},
         {"zero", std::to_string(cfg_.zero)},
         {"dtype", cfg_.dtype},
         {"out_dir", cfg_.out_dir}});
  set_metric(Metric::StepsTarget, static_cast<double>(cfg_.steps));
  set_metric(Metric::WorldSize, world_->size());
  set_metric(Metric::PeakGflops, peak_.gflops);
  set_metric(Metric::Restarts, restart_count());
  m.set_function(metric(Metric::CheckpointAge).prometheus, [this] {
    double t = last_checkpoint_unix_;
    return t > 0 ? unix_seconds() - t : std::nan("");
  });
}

void Trainer::set_metric(Metric id, double value, const std::string& label) {
  if (!registry_) return;
  const MetricSpec& s = metric(id);
  if (!s.prometheus) return;
  if (label.empty())
    registry_->set(s.prometheus, value);
  else
    registry_->set(s.prometheus, value, {{s.label, label}});
}

void Trainer::publish_memory(const MemoryReport& mem) {
  const int64_t bytes[] = {mem.params,      mem.grads,        mem.optimizer,   mem.working,
                           mem.activations, mem.comm_buffers, peak_rss_bytes()};
  nlohmann::json rec = {{"type", "memory"}, {"step", step_}, {"time", unix_seconds()}};
  for (size_t i = 0; i < std::size(kMemoryKinds); i++) {
    rec[metric_json_key(Metric::MemoryBytes, kMemoryKinds[i])] = bytes[i];
    set_metric(Metric::MemoryBytes, static_cast<double>(bytes[i]), kMemoryKinds[i]);
  }
  if (metrics_) metrics_->write(rec);
}

void Trainer::write_trace() {
  if (opts_.trace_path.empty()) return;
  const std::string part = fmt::format("{}.rank-{}.part", opts_.trace_path, world_->rank());
  write_file_atomic(part, Tracer::instance().events_json());
  world_->barrier();
  if (world_->rank() == 0) {
    std::vector<std::string> parts;
    for (int r = 0; r < world_->size(); r++)
      parts.push_back(fmt::format("{}.rank-{}.part", opts_.trace_path, r));
    write_merged_trace(parts, opts_.trace_path);
    for (const auto& p : parts) fs::remove(p);
    if (!opts_.quiet) fmt::print("trace written to {}\n", opts_.trace_path);
  }
}

// `kiln data prepare` leaves a manifest beside the shards: a dataset made with another tokenizer
// than the config names, or a larger vocabulary than the model's, is caught here, not as a
// token id error mid-run.
void Trainer::check_manifest(const std::string& first_shard) const {
  fs::path m = fs::path(first_shard).parent_path() / "manifest.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(m, ec))) return;
  DataManifest j = read_data_manifest(m.string());  // refuses a broken one, naming it
  if (j.tokenizer != cfg_.tokenizer)
    fail("{}: data.train was prepared with the {} tokenizer ({}), but data.tokenizer is \"{}\"",
         cfg_.source, j.tokenizer, m.string(), cfg_.tokenizer);
  if (j.vocab_size > cfg_.model.vocab_size)
    fail("{}: data.train holds {} tokens ({} tokenizer, {}), more than model.vocab_size = {}",
         cfg_.source, j.vocab_size, j.tokenizer, m.string(), cfg_.model.vocab_size);
}

std::string Trainer::sample_text(const float* params) {
  if (!tokenizer_) tokenizer_ = make_tokenizer(cfg_.tokenizer);
  std::vector<int32_t> prompt;
  if (!cfg_.sample_prompt.empty()) prompt = tokenizer_->encode(cfg_.sample_prompt, true);
  if (prompt.empty()) prompt.push_back(tokenizer_->eot());
  SampleOptions o;
  o.max_new_tokens =
      std::min<int>(cfg_.sample_tokens, cfg_.model.block_size - static_cast<int>(prompt.size()));
  o.top_k = 40;
  o.seed = static_cast<uint64_t>(cfg_.seed);
  std::vector<int32_t> out = generate_tokens(cfg_.model, params, prompt, o);
  return cfg_.sample_prompt + tokenizer_->decode(out.data(), out.size());
}

std::pair<int64_t, int64_t> Trainer::block_range(int l) const {
  const auto& blocks = model_->layout().blocks;
  return {blocks.at(l), blocks.at(l + 1)};
}

std::string Trainer::checkpoint_root() const {
  return (fs::path(cfg_.out_dir) / "checkpoints").string();
}

MemoryReport Trainer::memory() const {
  MemoryReport r;
  const int zero = dp_->zero();
  // The parameters (and gradients) this rank reads: all, or its pipeline stage's and the tied
  // embedding the last stage's head reads.
  int64_t used = reads_tied_embedding() ? tied_numel() : 0;
  for (auto [lo, hi] : own_) used += hi - lo;
  used *= static_cast<int64_t>(sizeof(float));
  r.params = zero == 3 ? master_.bytes() : used;
  // bf16: the matmuls' copy; under ZeRO-3 only the gathered ranges' (half their fp32 bytes).
  if (weights_bf16_ && zero != 3) r.params += used / 2;
  r.grads = zero >= 2 ? dp_->shard_grad_bytes() : used;
  r.optimizer = m_.bytes() + v_.bytes();
  if (zero >= 2) r.working = dp_->peak_resident_grad_bytes();
  if (zero == 3) r.working += zero3_->peak_resident_bytes() * (weights_bf16_ ? 3 : 2) / 2;
  r.comm_buffers =
      zero == 1 ? dp_->shard_grad_bytes() + dp_->side_buffer_bytes() : dp_->side_buffer_bytes();
  r.comm_buffers += dp_group_->buffer_bytes();  // e.g. this rank's share of a shared-memory window
  r.activations = 0;
  for (int c = 0; c < chunks(); c++)
    r.activations += chunk_model(c).activation_bytes() + chunk_model(c).deferred_bytes();
  return r;
}

void Trainer::next_batch() {
  if (train_loader_) {
    train_loader_->next(inputs_.data(), targets_.data());
    return;
  }
  opts_.batches(inputs_.data(), targets_.data());
}

// The step's micro-batches through the whole model, one after the other; data parallelism's
// reduction overlaps the last one's backward (every one's with ZeRO-2).
double Trainer::forward_backward(StepResult& r, float dloss) {
  // ZeRO-2/3: pages come back only for the buckets written. Otherwise the first micro-batch's
  // backward writes every gradient (no zeroing pass over the buffer) and later ones add.
  if (dp_->reduces_every_micro_batch()) grads_.release(0, grads_.size());
  double loss_sum = 0;
  r.micro_batches_in_flight = 1;  // one after the other
  // ZeRO-3: the blocks' parameters come and go around each block (parallel/zero3_prefetch.h).
  Model::BlockHooks fwd, bwd;
  if (zero3()) {
    fwd.before = [&](int l) { zero3_->before_forward(l); };
    bwd.before = [&](int l) { zero3_->before_backward(l); };
    fwd.after = bwd.after = [&](int l) { zero3_->after_block(l); };
  }
  for (int micro = 0; micro < cfg_.grad_accum; micro++) {
    double tp = now_seconds();
    next_batch();
    r.data_seconds += now_seconds() - tp;
    tp = now_seconds();
    if (zero3()) zero3_->begin_forward();
    {
      TraceSpan span("forward", "compute");
      loss_sum += model_->forward(params_.data(), inputs_.data(), targets_.data(), dloss, fwd);
    }
    r.forward_seconds += now_seconds() - tp;
    tp = now_seconds();
    if (zero3()) zero3_->begin_backward();
    const bool accumulate = micro > 0 || dp_->reduces_every_micro_batch();
    if (micro + 1 < cfg_.grad_accum && !dp_->reduces_every_micro_batch()) {
      TraceSpan span("backward", "compute");
      model_->backward(params_.data(), grads_.data(), inputs_.data(), {}, {},
                       accumulate);  // accumulate locally
      r.backward_seconds += now_seconds() - tp;
      continue;
    }
    dp_->begin(grads_, micro == 0);
    {
      TraceSpan span("backward", "compute");
      model_->backward(
          params_.data(), grads_.data(), inputs_.data(),
          [this](int64_t b, int64_t e) { dp_->ready(b, e); }, bwd, accumulate);
    }
    r.backward_seconds += now_seconds() - tp;
    {
      TraceSpan span("gradient reduction wait", "comm");
      r.comm_wait_seconds += dp_->finish();
    }
    if (zero3()) zero3_->drop_all();
  }
  return loss_sum;
}

StepResult Trainer::step() {
  double t0 = now_seconds();
  StepResult r;
  // Every token of the global batch (all ranks, all micro-batches) weighs the same.
  const int64_t tokens =
      static_cast<int64_t>(cfg_.grad_accum) * cfg_.batch_size * cfg_.seq_len * dp_group_->size();
  const float dloss = 1.0f / static_cast<float>(tokens);
  double loss_sum = pipelined() ? pipeline_forward_backward(r, dloss) : forward_backward(r, dloss);
  const double t_opt = now_seconds();
  TraceSpan opt_span("optimizer", "compute");
  // This rank's part of the summed gradient, per chunk: its whole range (zero 0) or its shard
  // (zero 1, 2).
  auto grad_part = [&](int c) {
    DataParallel& d = chunk_dp(c);
    return d.zero() == 0 ? grads_.data() + d.shard_begin() : d.shard_grads();
  };
  double sumsq = 0;
  for (int c = 0; c < chunks(); c++) sumsq += grad_sum_squares(c);
  r.stop_requested = stop_signal() != 0;
  if (pipelined() || tensor_parallel()) {
    // The loss is the last stage's (its first tensor-parallel rank's: every one has it), the
    // norm's square the sum of every stage's and slice's part (each data-parallel rank holds
    // the whole summed gradient of its part with ZeRO 0: one counts).
    double sums[3] = {grid_->tp_rank() == 0 ? loss_sum : 0.0, r.stop_requested ? 1.0 : 0.0,
                      dp_->zero() > 0 || dp_group_->rank() == 0 ? sumsq : 0.0};
    world_->all_reduce(sums, 3, DType::F64);
    loss_sum = sums[0];
    r.stop_requested = sums[1] > 0;
    sumsq = sums[2];
  } else if (dp_group_->size() > 1) {
    // A stop asked of any rank (a signal) reaches all of them with the loss.
    double sums[2] = {loss_sum, r.stop_requested ? 1.0 : 0.0};
    dp_group_->all_reduce(sums, 2, DType::F64);
    loss_sum = sums[0];
    r.stop_requested = sums[1] > 0;
    if (dp_->zero() > 0) sumsq = dp_group_->all_reduce_scalar(sumsq);
  }
  r.loss = loss_sum / static_cast<double>(tokens);
  r.grad_norm = std::sqrt(sumsq);
  r.lr = learning_rate(cfg_, step_);
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm)) {
    r.skipped = true;
    skipped_steps_++;
    nonfinite_in_a_row_++;
  } else {
    nonfinite_in_a_row_ = 0;
    // torch.nn.utils.clip_grad_norm_ semantics.
    float scale = 1.0f;
    if (cfg_.grad_clip > 0) {
      double coef = cfg_.grad_clip / (r.grad_norm + 1e-6);
      if (coef < 1.0) scale = static_cast<float>(coef);
    }
    // bf16 with the whole parameters updated here (zero 0): AdamW writes the weight copy too.
    bf16* copy =
        dp_->zero() == 0 && weights_bf16_ ? weights_bf16_->for_update(params_.data()) : nullptr;
    for (int c = 0; c < chunks(); c++) {
      const int64_t sb = chunk_dp(c).shard_begin(), se = chunk_dp(c).shard_end();
      const float* gshard = grad_part(c);
      float* m = m_.data() + state_at_[c];
      float* v = v_.data() + state_at_[c];
      for (const auto& t : model_->layout().tensors) {
        const int64_t lo = std::max(t.offset, sb), hi = std::min(t.offset + t.numel, se);
        if (lo >= hi) continue;  // not in this rank's shard
        AdamWParams a{static_cast<float>(r.lr),
                      static_cast<float>(cfg_.beta1),
                      static_cast<float>(cfg_.beta2),
                      static_cast<float>(cfg_.eps),
                      t.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f,
                      scale,
                      step_ + 1 - skipped_steps_};
        float* p = zero3() ? master_.data() + (lo - sb) : params_.data() + lo;
        adamw_update(p, gshard + (lo - sb), m + (lo - sb), v + (lo - sb), hi - lo, a,
                     copy ? copy + lo : nullptr);
      }
      chunk_dp(c).gather(params_.data());
    }
    // bf16: once per step (ZeRO-3 makes it as it gathers the parameters).
    if (weights_bf16_ && !copy && !zero3()) refresh_weight_copy();
    if (pipelined()) share_tied_embedding();
  }
  opt_span.end();
  step_++;
  r.optimizer_seconds = now_seconds() - t_opt;
  r.seconds = now_seconds() - t0;
  // Each rank's own work in the step, waits excluded: the rank that takes longest is the one the
  // others wait for.
  if (rank_compute_.size() != static_cast<size_t>(world_->size())) {  // first step only
    rank_compute_.assign(world_->size(), 0.0);
    ones_.assign(world_->size(), 1);
  }
  rank_compute_[world_->rank()] = r.forward_seconds + r.backward_seconds + r.optimizer_seconds;
  if (world_->size() > 1) world_->all_gather(rank_compute_.data(), ones_, DType::F64);
  r.rank_compute_seconds = rank_compute_;
  return r;
}

double Trainer::validate() {
  if (val_shards_.num_tokens() == 0) fail("validation needs data.val");
  // The val_batches micro-batches from the start of data.val, shared out among the ranks.
  const int R = dp_group_->size(), rank = dp_group_->rank();
  Loader val(val_shards_, cfg_.batch_size, cfg_.seq_len, cfg_.model.vocab_size, false, 0, rank, R);
  double sum = 0;
  if (zero3()) zero3_->fetch_all();
  for (int i = rank; i < cfg_.val_batches; i += R) {
    val.next(inputs_.data(), targets_.data());
    sum += pipelined() ? pipeline_forward_only(inputs_.data(), targets_.data())
                       : model_->forward(params_.data(), inputs_.data(), targets_.data(), 0.0f);
  }
  if (zero3()) zero3_->drop_all();
  if (pipelined())  // the last stages' sums (each tensor-parallel group's first rank's)
    sum = world_->all_reduce_scalar(grid_->tp_rank() == 0 ? sum : 0.0);
  else if (R > 1)
    sum = dp_group_->all_reduce_scalar(sum);
  return sum / (static_cast<double>(cfg_.val_batches) * cfg_.batch_size * cfg_.seq_len);
}

double Trainer::mfu(double tokens_per_sec) {
  if (peak_.gflops <= 0) return 0.0;
  // The peak is one process's; the job has world_->size() of them.
  const double achieved = flops_per_token_ * tokens_per_sec * 1e-9 / world_->size();
  if (achieved > peak_.gflops) {
    // No step outruns the best matmul: the peak was measured low (a busy machine at start-up).
    if (peak_.raised_at_step < 0 && world_->rank() == 0)
      fmt::print(stderr,
                 "kiln: note: step {} ran at {:.1f} GFLOP/s per process, above the peak MFU is "
                 "measured against ({:.1f} GFLOP/s, {}): that peak was underestimated, so MFU is "
                 "now measured against the fastest step. For a true peak, run `kiln bench peak` "
                 "on an idle machine or set hardware.peak_gflops\n",
                 step_, achieved, peak_.gflops, peak_.describe());
    if (metrics_)
      metrics_->write({{"type", "peak_raised"},
                       {"step", step_},
                       {"peak_gflops", achieved},
                       {"was_gflops", peak_.gflops},
                       {"was_source", peak_.source},
                       {"time", unix_seconds()}});
    peak_.gflops = achieved;
    if (peak_.raised_at_step < 0) peak_.raised_at_step = step_;
    set_metric(Metric::PeakGflops, achieved);
  }
  return achieved / peak_.gflops;
}

void Trainer::log_step(const StepResult& r) {
  const int64_t tokens =
      static_cast<int64_t>(cfg_.grad_accum) * cfg_.batch_size * cfg_.seq_len * dp_group_->size();
  double tps = tokens / r.seconds;
  double mfu = this->mfu(tps);
  // One record and the /metrics series from the same values (obs/metric_table.h).
  nlohmann::json rec = {
      {"type", "train"}, {"step", step_}, {"skipped", r.skipped}, {"time", unix_seconds()}};
  auto put = [&](Metric id, double value, const std::string& label = "") {
    rec[metric_json_key(id, label)] = value * metric(id).json_scale;
    set_metric(id, value, label);
  };
  put(Metric::Loss, r.loss);
  put(Metric::LearningRate, r.lr);
  put(Metric::GradNorm, r.grad_norm);
  rec[metric_json_key(Metric::Tokens)] = step_ * tokens;  // a count: an integer in the record
  set_metric(Metric::Tokens, static_cast<double>(step_ * tokens));
  put(Metric::TokensPerSecond, tps);
  put(Metric::StepSeconds, r.seconds);
  put(Metric::Mfu, mfu);
  const double phases[] = {r.data_seconds,      r.forward_seconds,   r.backward_seconds,
                           r.optimizer_seconds, r.comm_wait_seconds, r.pipeline_wait_seconds};
  static_assert(std::size(phases) == std::size(kStepPhases));
  for (size_t i = 0; i < std::size(kStepPhases); i++)
    put(Metric::PhaseSeconds, phases[i], kStepPhases[i]);
  put(Metric::MicroBatchesInFlight, r.micro_batches_in_flight);
  const MetricSpec& ranks = metric(Metric::RankComputeSeconds);
  nlohmann::json per_rank = nlohmann::json::array();
  for (size_t i = 0; i < r.rank_compute_seconds.size(); i++) {
    per_rank.push_back(r.rank_compute_seconds[i] * ranks.json_scale);
    set_metric(Metric::RankComputeSeconds, r.rank_compute_seconds[i], std::to_string(i));
  }
  rec[ranks.json] = per_rank;
  if (metrics_) metrics_->write(rec);
  set_metric(Metric::Step, static_cast<double>(step_));
  set_metric(Metric::SkippedSteps, static_cast<double>(skipped_steps_));
  if (metrics_)
    set_metric(Metric::MetricsWriteErrors, static_cast<double>(metrics_->write_errors()));
  if (opts_.quiet || (step_ % cfg_.log_every != 0 && step_ != cfg_.steps)) return;
  double per_step = (now_seconds() - run_start_) / std::max<int64_t>(1, step_ - run_first_step_);
  double eta = per_step * static_cast<double>(cfg_.steps - step_);
  fmt::print(
      "step {:>{}}/{} | loss {:.4f} | lr {:.2e} | norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | "
      "ETA {}{}\n",
      step_, std::to_string(cfg_.steps).size(), cfg_.steps, r.loss, r.lr, r.grad_norm, tps,
      mfu * 100, format_duration(eta), r.skipped ? " | SKIPPED (non-finite)" : "");
  std::fflush(stdout);
}

// Skipped steps change nothing, so a run that only skips would go on (and exit 0) without
// training: after train.nonfinite_limit in a row, or when every step of the run was skipped, it
// stops. Every rank sees the same all-reduced loss and norm, so all stop at the same step.
void Trainer::check_divergence(bool last_step) {
  const int64_t run_steps = step_ - run_first_step_;
  const bool limit = cfg_.nonfinite_limit > 0 && nonfinite_in_a_row_ >= cfg_.nonfinite_limit;
  const bool all = last_step && run_steps > 0 && nonfinite_in_a_row_ >= run_steps;
  if (!limit && !all) return;
  if (metrics_)
    metrics_->write({{"type", "diverged"},
                     {"step", step_},
                     {"nonfinite_steps", nonfinite_in_a_row_},
                     {"time", unix_seconds()}});
  watchdog_.reset();
  std::string last = latest_checkpoint(checkpoint_root())
                         ? latest_checkpoint(checkpoint_root())->dir
                         : std::string("none");
  throw ExitCodeError(
      kExitNonFinite,
      fmt::format("{}: training diverged: the last {} steps (to step {}) had a non-finite loss or "
                  "gradient norm and were skipped ({}). No checkpoint is written; the newest is "
                  "{}. Lower train.lr, raise train.warmup_steps or check the data, then resume",
                  cfg_.source, nonfinite_in_a_row_, step_,
                  limit ? fmt::format("train.nonfinite_limit = {}", cfg_.nonfinite_limit)
                        : std::string("every step of this run"),
                  last));
}

bool Trainer::run() {
  install_stop_handlers();
  if (!opts_.quiet) {
    fmt::print(
        "kiln {} | {} {}L {}H {}C | {:.2f}M params | B={} T={} accum={} | dp={}{} zero={} "
        "({}) | {} threads/rank | peak {:.{}f} GFLOP/s ({})\n",
        KILN_VERSION, cfg_.model.llama() ? "Llama" : "GPT-2", cfg_.model.n_layer, cfg_.model.n_head,
        cfg_.model.n_embd, kiln::num_params(cfg_.model) / 1e6, cfg_.batch_size, cfg_.seq_len,
        cfg_.grad_accum, dp_group_->size(),
        pipelined() ? fmt::format(" pp={} ({})", grid_->shape().pp, cfg_.schedule) : "", cfg_.zero,
        dp_group_->backend(), num_threads(), peak_.gflops,
        peak_.gflops >= 10 || peak_.gflops == 0 ? 0 : 3, peak_.describe());
    std::fflush(stdout);
  }
  // Each rank leaves its pid where operators (and the recovery tests) find it.
  fs::create_directories(fs::path(cfg_.out_dir) / "pids");
  write_file_atomic(
      (fs::path(cfg_.out_dir) / "pids" / fmt::format("rank-{}.pid", world_->rank())).string(),
      std::to_string(getpid()) + "\n");
  if (!opts_.trace_path.empty()) {
    world_->barrier();  // ranks agree on the trace's time zero
    Tracer::instance().name_thread("train");
    Tracer::instance().start(world_->rank(), now_seconds());
  }
  if (metrics_)
    metrics_->write(
        {{"type", "run_start"},
         {"time", unix_seconds()},
         {"step", step_},
         {"world", world_->size()},
         {"host", host_name()},
         {"restarts", restart_count()},
         {"launcher", job_env().launcher},
         {"slurm_job_id", job_env().job_id},
         {"resumed_from",
          resumed_from_.empty() ? nlohmann::json(nullptr) : nlohmann::json(resumed_from_)},
         {"config_changes", config_changes_},
         {"peak_gflops", peak_.gflops},
         {"peak_source", peak_.source},
         {"peak_date", peak_.date.empty() ? nlohmann::json(nullptr) : nlohmann::json(peak_.date)},
         {"config", cfg_.to_json()}});
  if (cfg_.watchdog_seconds > 0) {
    WatchdogOptions w;
    w.timeout_seconds = cfg_.watchdog_seconds;
    w.interval_seconds = std::min(1.0, cfg_.watchdog_seconds / 4);
    w.dir = cfg_.out_dir;
    w.rank = world_->rank();
    w.world = world_->size();
    watchdog_ = std::make_unique<Watchdog>(w);
    watchdog_->set_phase("train");
  }
  run_start_ = now_seconds();
  run_first_step_ = step_;
  if (metrics_) {
    progress_ = std::make_unique<ProgressFile>(cfg_.out_dir, unix_seconds());
    progress_->write(step_);
  }
  bool memory_shown = false;
  while (step_ < cfg_.steps) {
    StepResult r = step();
    crash_if_asked_for_test(world_->rank(), step_);
    if (progress_) progress_->write(step_);
    if (watchdog_) watchdog_->step_done(step_);
    complete_checkpoint_logged(false);  // an async save whose every part is durable
    if (!memory_shown) {                // after a step: ZeRO-2's gradient memory is measured
      MemoryReport m = memory();
      publish_memory(m);
      if (!opts_.quiet)
        fmt::print(
            "memory per rank: model state {:.1f} MiB (params {:.1f}, grads {:.1f}, optimizer "
            "{:.1f}), working buffers {:.1f} MiB, activations {:.1f} MiB, communication buffers "
            "{:.1f} MiB\n",
            m.model_state() / 1048576.0, m.params / 1048576.0, m.grads / 1048576.0,
            m.optimizer / 1048576.0, m.working / 1048576.0, m.activations / 1048576.0,
            m.comm_buffers / 1048576.0);
      memory_shown = true;
    }
    log_step(r);
    check_divergence(step_ == cfg_.steps);
    if (r.stop_requested) {
      save_checkpoint_logged();
      if (metrics_)
        metrics_->write({{"type", "stopped"},
                         {"step", step_},
                         {"signal", stop_signal()},
                         {"time", unix_seconds()}});
      if (!opts_.quiet)
        fmt::print(
            "stopping at step {} as asked ({}); the checkpoint holds it: run again with --set "
            "train.resume=auto to continue\n",
            step_,
            stop_signal() ? fmt::format("signal {}", strsignal(stop_signal()))
                          : std::string("a signal to another rank"));
      write_trace();
      watchdog_.reset();
      return false;
    }
    bool last = step_ == cfg_.steps;
    if (cfg_.val_every > 0 && (step_ % cfg_.val_every == 0 || last)) {
      if (watchdog_) watchdog_->set_phase("validate");
      double vl = validate();
      if (metrics_)
        metrics_->write({{"type", "val"},
                         {"step", step_},
                         {metric_json_key(Metric::ValLoss), vl},
                         {"time", unix_seconds()}});
      set_metric(Metric::ValLoss, vl);
      if (!opts_.quiet) fmt::print("step {} | val loss {:.4f}\n", step_, vl);
      if (zero3() && cfg_.sample_tokens > 0) zero3_->fetch_all();
      if (pipelined() && !tensor_parallel() && cfg_.sample_tokens > 0)
        bring_to_rank0(0, params_.size());
      Buffer<float> whole;  // tensor parallelism: the whole model on rank 0, for the sample
      if (tensor_parallel() && cfg_.sample_tokens > 0 && dp_group_->rank() == 0)
        gather_whole_model(params_.data(), whole);
      if (cfg_.sample_tokens > 0 && world_->rank() == 0) {
        std::string text = sample_text(tensor_parallel() ? whole.data() : params_.data());
        if (metrics_) metrics_->write({{"type", "sample"}, {"step", step_}, {"text", text}});
        if (!opts_.quiet) {
          std::string line = text;  // one line on the console; metrics.jsonl keeps the newlines
          std::replace(line.begin(), line.end(), '\n', ' ');
          fmt::print("step {} | sample: {}\n", step_, line);
        }
      }
      if (zero3() && cfg_.sample_tokens > 0) zero3_->drop_all();
      if (pipelined() && cfg_.sample_tokens > 0 && world_->rank() == 0)
        release_other_stages_params();
      if (watchdog_) watchdog_->set_phase("train");
    }
    // The last checkpoint is written at once (the run ends with it); async ones before it.
    if (last)
      save_checkpoint_logged();
    else if (cfg_.ckpt_every > 0 && step_ % cfg_.ckpt_every == 0)
      cfg_.ckpt_async ? save_checkpoint_async_logged() : save_checkpoint_logged();
  }
  complete_checkpoint_logged(true);  // train.steps reached before the loop (nothing pending)
  write_trace();
  watchdog_.reset();
  return true;
}

}  // namespace kiln
