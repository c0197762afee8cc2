#include "obs/metric_table.h"

#include "core/error.h"

namespace kiln {

const char* const kStepPhases[6] = {"data",      "forward",   "backward",
                                    "optimizer", "comm_wait", "pipeline_wait"};
const char* const kMemoryKinds[7] = {"params",      "grads",        "optimizer", "working",
                                     "activations", "comm_buffers", "peak_rss"};

const std::vector<MetricSpec>& metric_specs() {
  using T = MetricsRegistry::Type;
  static const std::vector<MetricSpec> specs = {
      {Metric::Info, "kiln_info", T::Gauge, "1",
       "Constant 1, labelled with the run's version and layout."},
      {Metric::Step, "kiln_step", T::Gauge, "steps", "Optimizer steps completed."},
      {Metric::StepsTarget, "kiln_steps_target", T::Gauge, "steps",
       "Steps the run is configured to train (train.steps)."},
      {Metric::Loss, "kiln_loss", T::Gauge, "nats", "Mean training loss of the last step.", "train",
       "loss"},
      {Metric::ValLoss, "kiln_val_loss", T::Gauge, "nats",
       "Mean validation loss at the last validation.", "val", "val_loss"},
      {Metric::LearningRate, "kiln_learning_rate", T::Gauge, "1", "Learning rate of the last step.",
       "train", "lr"},
      {Metric::GradNorm, "kiln_grad_norm", T::Gauge, "1",
       "Global gradient L2 norm of the last step, before clipping.", "train", "grad_norm"},
      {Metric::Tokens, "kiln_tokens_total", T::Counter, "tokens",
       "Tokens trained on, whole job, since step 0.", "train", "tokens"},
      {Metric::TokensPerSecond, "kiln_tokens_per_second", T::Gauge, "tokens/s",
       "Tokens per second of the last step, whole job.", "train", "tokens_per_sec"},
      {Metric::Mfu, "kiln_mfu_ratio", T::Gauge, "ratio",
       "Model FLOPs utilisation of the last step against the measured or configured peak.", "train",
       "mfu"},
      {Metric::PeakGflops, "kiln_peak_gflops", T::Gauge, "GFLOP/s",
       "Peak GFLOP/s of one process that MFU is measured against (configured, cached by kiln "
       "bench peak, or probed at start-up; raised to any rate a step achieved).",
       "run_start", "peak_gflops"},
      {Metric::StepSeconds, "kiln_step_seconds", T::Gauge, "seconds", "Wall time of the last step.",
       "train", "step_ms", 1e3},
      {Metric::PhaseSeconds, "kiln_step_phase_seconds", T::Gauge, "seconds",
       "Rank 0's time in each phase of the last step (data, forward, backward, optimizer, "
       "comm_wait, pipeline_wait: waiting for the neighbouring pipeline stages).",
       "train", "{}_ms", 1e3, "phase"},
      {Metric::RankComputeSeconds, "kiln_rank_compute_seconds", T::Gauge, "seconds",
       "Each rank's forward+backward+optimizer time in the last step, waits excluded; the "
       "largest is the straggler.",
       "train", "rank_compute_ms", 1e3, "rank"},
      {Metric::MicroBatchesInFlight, "kiln_pipeline_micro_batches_in_flight", T::Gauge,
       "micro-batches",
       "Most micro-batches whose activations rank 0 held at once in the last step (1 without "
       "pipeline parallelism; the first stage's count with it, in micro-batch chunks with the "
       "interleaved schedule).",
       "train", "micro_batches_in_flight"},
      {Metric::SkippedSteps, "kiln_skipped_steps_total", T::Counter, "steps",
       "Steps skipped for a non-finite loss or norm."},
      {Metric::MetricsWriteErrors, "kiln_metrics_write_errors_total", T::Counter, "records",
       "Records of metrics.jsonl that could not be written (e.g. a full disk)."},
      {Metric::MemoryBytes, "kiln_memory_bytes", T::Gauge, "bytes",
       "Rank 0's memory by kind, bytes.", "memory", "{}", 1, "kind"},
      {Metric::CheckpointSeconds, "kiln_checkpoint_duration_seconds", T::Gauge, "seconds",
       "Time to write the last checkpoint.", "checkpoint", "seconds"},
      {Metric::CheckpointTimestamp, "kiln_checkpoint_last_timestamp_seconds", T::Gauge,
       "unix seconds", "Unix time the last checkpoint was published.", "checkpoint", "time"},
      {Metric::CheckpointAge, "kiln_checkpoint_age_seconds", T::Gauge, "seconds",
       "Seconds since the last checkpoint."},
      {Metric::Restarts, "kiln_restarts_total", T::Counter, "restarts",
       "Times the job was restarted (kiln launch) or requeued (Slurm) before this attempt.",
       "run_start", "restarts"},
      {Metric::WorldSize, "kiln_world_size", T::Gauge, "processes", "Processes in the job.",
       "run_start", "world"},
  };
  return specs;
}

// The table lists the metrics in the enum's order (a test checks it), so a lookup is an index.
const MetricSpec& metric(Metric id) {
  const auto& specs = metric_specs();
  const size_t i = static_cast<size_t>(id);
  KILN_CHECK(i < specs.size() && specs[i].id == id);
  return specs[i];
}

std::string metric_json_key(Metric id, const std::string& label_value) {
  const MetricSpec& s = metric(id);
  KILN_CHECK(s.json != nullptr);
  std::string key = s.json;
  if (auto at = key.find("{}"); at != std::string::npos) key.replace(at, 2, label_value);
  return key;
}

void declare_metrics(MetricsRegistry& registry) {
  for (const auto& s : metric_specs())
    if (s.prometheus) registry.declare(s.prometheus, s.type, s.help);
}

}  // namespace kiln
