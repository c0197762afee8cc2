// What `kiln plan` prints: tables for people and JSON for machines, every JSON figure with its
// unit in its key (`step_time_s`, `memory_per_gpu_gib`, `tflops_per_gpu_model`, ...).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "plan/cluster_summary.h"
#include "plan/planner.h"

namespace kiln::plan {

struct PlanInputs {
  const ModelSpec& model;
  const ClusterSpec& cluster;
  const JobSpec& job;
};

nlohmann::json inputs_json(const PlanInputs& in);
nlohmann::json estimate_json(const Estimate& e, const PlanInputs& in);

// One layout in detail: memory by kind, time by part, throughput, run totals, notes.
std::string estimate_text(const Estimate& e, const PlanInputs& in);
// The header both outputs start with: model, cluster, job.
std::string inputs_text(const PlanInputs& in);
// The ranked table of a search (best `top` layouts and up to 3 faster ones that do not fit).
std::string search_table(const SearchResult& r, int top);
// The fields as the search treated them: {"searched": {key: what was tried}, "fixed": {key:
// value}, "not_searched": {key: "value: why"}}.
nlohmann::json search_fields_json(const SearchResult& r);
nlohmann::json search_json(const SearchResult& r, const PlanInputs& in, int top);

// The cluster alone (no model): devices, memory, peaks, links, bisection, power, sources.
std::string cluster_summary_text(const ClusterSpec& c, const ClusterSummary& s);
nlohmann::json cluster_summary_json(const ClusterSpec& c, const ClusterSummary& s);

// Whole numbers with commas from 1000 up, 4 significant digits below (0.04717, 83.2).
std::string amount(double v);

// 1234567 → "1.23M", 2e12 → "2T" (for token counts).
std::string si(double v);

}  // namespace kiln::plan
