// Every number kiln reports about a run, declared once: its Prometheus series (name, type,
// help), its unit, and where it appears in metrics.jsonl (the record type and key; for a
// labelled series, a key per label value). The trainer writes metrics.jsonl and /metrics from
// this table, `kiln report` reads the keys from it, and a test checks that the Grafana dashboard
// asks only for series declared here. A new metric is one row here and the line that sets it.
#pragma once
#include <string>
#include <vector>

#include "obs/prometheus.h"

namespace kiln {

enum class Metric {
  Info,
  Step,
  StepsTarget,
  Loss,
  ValLoss,
  LearningRate,
  GradNorm,
  Tokens,
  TokensPerSecond,
  Mfu,
  PeakGflops,
  StepSeconds,
  PhaseSeconds,
  RankComputeSeconds,
  MicroBatchesInFlight,
  SkippedSteps,
  MetricsWriteErrors,
  MemoryBytes,
  CheckpointSeconds,
  CheckpointTimestamp,
  CheckpointAge,
  Restarts,
  WorldSize,
};

struct MetricSpec {
  Metric id;
  const char* prometheus;  // series name; nullptr: not exported
  MetricsRegistry::Type type;
  const char* unit;  // of the value the trainer sets ("seconds", "ratio", "bytes", ...)
  const char* help;
  const char* record = nullptr;  // the metrics.jsonl record type holding it; nullptr: none
  const char* json = nullptr;    // its key there; with a label, "{}" stands for the label value
  double json_scale = 1;         // the record holds value x scale (seconds as milliseconds)
  const char* label = nullptr;   // the label of a labelled series ("phase", "rank", "kind")
};

const std::vector<MetricSpec>& metric_specs();
const MetricSpec& metric(Metric id);
// The key of `id` in its metrics.jsonl record, for a label value when it has a label.
std::string metric_json_key(Metric id, const std::string& label_value = "");
// Declares every exported series in the registry.
void declare_metrics(MetricsRegistry& registry);

// The values a phase of a step is split into, in the order records and series list them.
// data, forward, backward, optimizer, comm_wait, pipeline_wait
extern const char* const kStepPhases[6];
extern const char* const kMemoryKinds[7];  // params, grads, ..., peak_rss

}  // namespace kiln
