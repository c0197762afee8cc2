// The Trainer owns everything a training run needs: the model, the flat parameter, gradient and
// AdamW buffers, the data loaders, the metrics log and the checkpoints. Nothing is global.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/sharded_state.h"
#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/page_buffer.h"
#include "core/rng.h"
#include "data/loader.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "model/model.h"
#include "obs/metric_table.h"
#include "obs/metrics_log.h"
#include "obs/progress.h"
#include "obs/prometheus.h"
#include "obs/watchdog.h"
#include "parallel/data_parallel.h"
#include "parallel/grid.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/zero3_prefetch.h"
#include "train/config.h"
#include "train/peak.h"
#include "train/run_directory.h"
#include "train/trainer_state.h"

namespace kiln {

// Learning rate of step s (0-based): linear warm-up to lr over warmup_steps (step s uses
// lr*(s+1)/warmup), then cosine decay from lr to min_lr over the remaining steps.
double learning_rate(const TrainConfig& c, int64_t s);

struct StepResult {
  double loss = 0;       // mean loss over the step's tokens, before the update
  double grad_norm = 0;  // global L2 norm before clipping
  double lr = 0;
  bool skipped = false;         // non-finite loss or gradient: no update was made
  bool stop_requested = false;  // some rank was asked to stop (all ranks agree)
  double seconds = 0;
  double comm_wait_seconds = 0;  // waiting for gradient reductions after backward
  // Pipeline parallelism: waiting for the neighbouring stages' activations and gradients (the
  // schedule's bubble and the transfers), and the most micro-batches whose activations this
  // rank held at once.
  double pipeline_wait_seconds = 0;
  int micro_batches_in_flight = 0;
  // Where the step's time went (this rank): reading batches, forward (with ZeRO-3's parameter
  // waits), backward (with bucket hand-offs), the optimizer (clipping, AdamW, gathers).
  double data_seconds = 0, forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  // Every rank's forward + backward + optimizer time, by rank (the trainer's buffer, valid until
  // the next step: a step allocates nothing for it).
  std::span<const double> rank_compute_seconds;
};

// The activation slots each model chunk of pipeline rank `rank` needs: the most micro-batches
// the schedule keeps in flight on it at once.
std::vector<int> slots_per_chunk(const PipeSchedule& s, int rank);

// Fills one micro-batch: inputs and targets, each (B,T).
using BatchSource = std::function<void(int32_t* inputs, int32_t* targets)>;

struct TrainerOptions {
  BatchSource batches;  // when set, replaces data.train (benchmarks, tests); no metrics file
  bool quiet = false;   // no progress lines
  // Find the peak GFLOP/s when the config states none: kiln bench peak's cache, else a probe.
  bool measure_peak = true;
  // Rank 0 serves Prometheus metrics at http://metrics_host:metrics_port/metrics (0: a free
  // port, printed; -1, internal only: off, what `kiln train` without --metrics-port sets).
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  std::string trace_path;  // when set, a Chrome trace of the run is written here at the end
  // Take train.out_dir for this run (its lock, recovery of interrupted checkpoint writes, the
  // refusal to mix with an earlier run). Off for benchmarks, which write nothing there.
  bool claim_run_dir = true;
};

// Memory held per kind, in bytes.
// Memory held per kind, in bytes, per rank. The model state (ZeRO's accounting) is what a rank
// keeps across steps: its parameters, gradients and AdamW moments, each whole or its shard.
// ZeRO-2/3 also hold full-size working buffers only partly resident (gathered parameters,
// gradient buckets in flight): `working` is their peak, measured.
struct MemoryReport {
  int64_t params = 0, grads = 0, optimizer = 0, working = 0, activations = 0, comm_buffers = 0;
  int64_t model_state() const { return params + grads + optimizer; }
  int64_t total() const { return model_state() + working + activations + comm_buffers; }
};

class Trainer {
 public:
  // comm: all processes of the job (the world of the rank grid); one rank by default. Every
  // process is a data-parallel rank today (dp = world size, pp = tp = 1).
  explicit Trainer(TrainConfig cfg, TrainerOptions opts = {},
                   std::unique_ptr<Communicator> comm = nullptr);

  // One optimizer step over grad_accum micro-batches.
  StepResult step();
  // Mean loss over val_batches micro-batches from the start of data.val.
  double validate();
  // Writes a checkpoint of the current state (after publishing a pending async one); returns its
  // directory.
  std::string save_checkpoint();
  // checkpoint.async: copies the current state into host memory and writes it in the
  // background (ckpt/checkpointer.h); complete_checkpoint publishes it.
  void save_checkpoint_async();
  // Publishes a pending async checkpoint: when every rank's writer is done (wait = false, a
  // collective only while one is pending), or after waiting for them. Returns its directory, or
  // "" when nothing was published.
  std::string complete_checkpoint(bool wait);
  // Trains until train.steps, logging, validating and checkpointing as configured. Returns false
  // when it stopped early on request (SIGUSR1/SIGTERM, see stop_request.h) after a checkpoint.
  bool run();

  int64_t steps_done() const { return step_; }
  const TrainConfig& config() const { return cfg_; }
  const Model& model() const { return *model_; }
  Model& model() { return *model_; }
  const float* params() const { return params_.data(); }
  float* mutable_params() { return params_.data(); }
  const float* grads() const { return grads_.data(); }
  int64_t num_params() const { return params_.size(); }
  MemoryReport memory() const;
  // The peak MFU is measured against, per process (train/peak.h), and where it came from.
  double peak_gflops() const { return peak_.gflops; }
  const Peak& peak() const { return peak_; }
  // MFU of a step at tokens_per_sec (the job's). A rate above the peak shows the peak was
  // underestimated: the peak is raised to it (a note once, a `peak_raised` record each time), so
  // MFU is at most 1.
  double mfu(double tokens_per_sec);
  int rank() const { return grid_->rank(); }
  const Grid& grid() const { return *grid_; }
  int world() const { return grid_->shape().size(); }
  std::string checkpoint_root() const;
  // Rank 0's Prometheus registry (set after every step); null on other ranks.
  std::shared_ptr<const MetricsRegistry> metrics_registry() const { return registry_; }
  int metrics_port() const { return server_ ? server_->port() : -1; }

 private:
  void open_data();
  void claim_run_directory();
  void check_divergence(bool last_step);  // throws ExitCodeError(kExitNonFinite)
  void resume_from(const std::string& dir);
  bool params_finite();  // every rank's parameters (or ZeRO-3 shard) are finite, job-wide
  void check_manifest(const std::string& first_shard) const;
  bool zero3() const { return dp_->zero() == 3; }
  std::pair<int64_t, int64_t> block_range(int l) const;  // [begin, end) of block l's parameters
  // The micro-batches of a step, forward and backward (the gradients reduced over data
  // parallelism); returns the loss sum of this rank's micro-batches (0 on a stage without the
  // head). One stage holding the whole model, or the pipeline's schedule (trainer_pipeline.cpp).
  double forward_backward(StepResult& r, float dloss);
  double pipeline_forward_backward(StepResult& r, float dloss);
  // Pipeline parallelism (trainer_pipeline.cpp). A rank holds `chunks()` model chunks: chunk c
  // of pipeline rank r is virtual stage c·pp + r of pp · virtual_stages (one chunk but with the
  // interleaved schedule).
  bool pipelined() const { return grid_->shape().pp > 1; }
  int chunks() const { return static_cast<int>(own_.size()); }
  int virtual_stages() const { return grid_->shape().pp * cfg_.virtual_stages; }
  Model& chunk_model(int c) { return c == 0 ? *model_ : *later_models_.at(c - 1); }
  const Model& chunk_model(int c) const { return c == 0 ? *model_ : *later_models_.at(c - 1); }
  DataParallel& chunk_dp(int c) { return c == 0 ? *dp_ : *later_dps_.at(c - 1); }
  // The range of the flat buffers virtual stage `stage` owns (updates, saves); the whole model
  // at pp = 1.
  std::pair<int64_t, int64_t> stage_range(int stage) const;
  // Whether the flat index lies in a range this rank owns.
  bool owns(int64_t i) const;
  // Whether this rank reads the tied embedding that the first stage owns (the last stage's LM
  // head), and its number of elements (at offset 0).
  bool reads_tied_embedding() const;
  int64_t tied_numel() const { return model_->layout().tensors.front().numel; }
  // Hands back the pages of the parameters this stage neither owns nor reads.
  void release_other_stages_params();
  // The tied embedding: the last stage's gradient added into the first stage's before it is
  // reduced, and the first stage's updated weights to the last after the step.
  void add_tied_grad_from_last_stage();
  void share_tied_embedding();
  // One micro-batch forward through the pipeline (validation): the loss sum on the last stage.
  double pipeline_forward_only(const int32_t* inputs, const int32_t* targets);
  // Moves tensor [begin, end) from the stage that owns it to rank 0 (checkpoints, samples).
  void bring_to_rank0(int64_t begin, int64_t end);
  // bf16: the matmuls' copy of the parameters this rank reads, made again after an update.
  void refresh_weight_copy();
  // This rank's tensors as sharded checkpoints see them (with their tensor-parallel parts);
  // `writing`: without the tensors another tensor-parallel rank writes (those all hold whole).
  std::vector<FlatTensor> flat_tensors(bool writing = false) const;
  // Tensor parallelism (trainer_tensor_parallel.cpp). fill_params: `fill` writes a whole model
  // (a layout of whole tensors); this rank keeps its slices of it.
  bool tensor_parallel() const { return grid_->shape().tp > 1; }
  void fill_params(const std::function<void(const ParamLayout& whole, float* p)>& fill);
  // Tensor i whole into `out` on rank 0, from the tensor-parallel group of data-parallel rank 0
  // in the pipeline stage that owns it (`out` is used on that group's first rank too). Every
  // rank of data-parallel rank 0 calls it.
  void gather_whole_tensor(size_t i, const float* params, float* out);
  // The whole model on rank 0, in param_layout's order (samples); every rank of data-parallel
  // rank 0 calls it.
  void gather_whole_model(const float* params, Buffer<float>& out);
  // The square of the gradient norm of chunk c's part on this rank, each parameter counted on
  // one rank of its tensor-parallel group.
  double grad_sum_squares(int c);
  // train.init_from: a safetensors file or a Hugging Face directory (single file or sharded).
  void init_from(const std::string& path);
  // Elements [shard_begin, shard_end) of the AdamW moments, into m and v.
  void load_whole_optimizer_state(const std::string& path, int64_t shard_begin, int64_t shard_end,
                                  float* m, float* v);
  std::string sample_text(const float* params);
  void next_batch();
  void log_step(const StepResult& r);
  void declare_metrics();
  // The metric's Prometheus series (rank 0; nothing elsewhere), for a label value if it has one.
  void set_metric(Metric id, double value, const std::string& label = "");
  void publish_memory(const MemoryReport& m);
  void write_trace();
  void save_checkpoint_logged();  // save_checkpoint() with its record, metrics and message
  // The same for an async save: started here, logged when complete_checkpoint_logged publishes.
  void save_checkpoint_async_logged();
  void complete_checkpoint_logged(bool wait);
  void log_checkpoint(const std::string& dir, double seconds, int64_t step, bool async);
  CheckpointContents checkpoint_contents();  // what a save at this step writes
  Checkpointer& checkpointer();

  TrainConfig cfg_;
  TrainerOptions opts_;
  std::unique_ptr<RunDirLock> run_lock_;  // rank 0, for the Trainer's life
  std::unique_ptr<Grid> grid_;
  // Job-wide things (who speaks, pid files, trace parts, watchdog, MFU, the checkpoint's writer)
  // go through world_; data parallelism (gradients, ZeRO, the loader's slice, loss and
  // validation averages, the step's tokens) through dp_group_.
  Communicator* world_;
  Communicator* dp_group_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<Model> model_;
  PageBuffer params_;     // full size; with ZeRO-3 only the ranges in use are resident
  Buffer<float> master_;  // ZeRO-3: this rank's shard of the parameters, the one AdamW updates
  PageBuffer grads_;      // full size; with ZeRO-2 only the buckets in flight are resident
  Buffer<float> m_, v_;   // AdamW moments of this rank's shard [dp_->shard_begin(), shard_end())
  Buffer<int32_t> inputs_, targets_;
  ShardSet train_shards_, val_shards_;
  std::unique_ptr<Loader> train_loader_;
  Rng rng_;  // saved and restored with checkpoints, for stochastic layers to come
  int64_t step_ = 0;
  int64_t skipped_steps_ = 0;
  int64_t nonfinite_in_a_row_ = 0;  // consecutive skipped steps (train.nonfinite_limit)
  // Per-rank compute times of the last step, and the all-gather's counts (one per rank).
  std::vector<double> rank_compute_;
  std::vector<int64_t> ones_;
  Peak peak_;
  double flops_per_token_ = 0;
  LocalLayout tp_layout_;       // this rank's slice of each logical tensor (whole at tp = 1)
  Buffer<float> tp_gather_;     // every tensor-parallel rank's slice of one tensor (gathers)
  Buffer<float> whole_tensor_;  // checkpoints under tensor parallelism: one tensor made whole
  std::unique_ptr<Bf16WeightCopy> weights_bf16_;  // bf16: the copy the model's matmuls read
  std::unique_ptr<Zero3Prefetch> zero3_;          // ZeRO-3: when the blocks' parameters come and go
  // Pipeline parallelism: the schedule, this stage's parameters [own_begin_, own_end_), the step's
  // micro-batches (every stage reads them all), and the buffers of the transfers between stages.
  PipeSchedule schedule_;
  std::vector<std::pair<int64_t, int64_t>> own_;  // per chunk: the range it owns
  std::vector<int64_t> state_at_;  // per chunk: where its AdamW state starts in m_, v_
  std::vector<std::unique_ptr<Model>> later_models_;      // chunks 1.. (chunk 0 is model_)
  std::vector<std::unique_ptr<DataParallel>> later_dps_;  // their data parallelism
  Buffer<int32_t> micro_inputs_, micro_targets_;
  Buffer<float> act_in_, grad_in_, tied_grad_;
  // The two input-gradient send buffers, in the pipeline group's shared memory: the previous
  // stage copies them straight out (memcpy, comm/shm_p2p.h) rather than through the kernel.
  std::unique_ptr<SharedMemory> grad_out_[2];
  double run_start_ = 0;
  int64_t run_first_step_ = 0;
  std::optional<MetricsLog> metrics_;
  std::unique_ptr<ProgressFile> progress_;  // rank 0: the last finished step, for kiln launch
  std::unique_ptr<Tokenizer> tokenizer_;    // made on first use (samples)
  std::shared_ptr<MetricsRegistry> registry_;
  std::unique_ptr<MetricsServer> server_;
  double last_checkpoint_unix_ = 0;
  std::unique_ptr<Watchdog> watchdog_;       // while run() runs
  std::string resumed_from_;                 // the checkpoint this run started from, if any
  std::vector<std::string> config_changes_;  // keys the resume changed (run_start record)
  // The job's checkpoint writer, holding an async save in flight; last, so that it is destroyed
  // (its writer joined) first.
  std::unique_ptr<Checkpointer> checkpointer_;
  double async_blocked_seconds_ = 0;  // the pending async save's time on the training thread
};

}  // namespace kiln
