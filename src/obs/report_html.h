// `kiln report`: one self-contained HTML page about a run directory (train.out_dir). It reads
// metrics.jsonl (and, for older runs, the config in the newest checkpoint) and draws every plot
// as inline SVG, so the page needs no network, no script and no other file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

// One optimizer step's "train" record. A field the record lacks, or that was not finite when
// written (JSON null), is NaN.
struct TrainRecord {
  int64_t step = 0;
  double time, loss, lr, grad_norm, tokens, tokens_per_sec, step_ms, mfu;
  double forward_ms, backward_ms, optimizer_ms, comm_wait_ms, pipeline_wait_ms, data_ms;
  bool skipped = false;  // the trainer made no update (non-finite loss or norm)
  // Per rank, when the job had more than one: "rank_step_ms" (each rank's whole step) or
  // "rank_compute_ms" (its forward, backward and optimizer, waits excluded).
  std::vector<double> rank_ms;
};

struct ValRecord {
  int64_t step = 0;
  double val_loss;
};

struct SampleRecord {
  int64_t step = 0;
  std::string text;
};

struct RunStartRecord {
  double time;
  int64_t step = 0;  // the first step of this run: 0, or the step it resumed from
  int64_t world = 1;
  int64_t restarts = -1;  // how many times the launcher had restarted the job (-1: not said)
  std::string resumed_from, host, launcher, job_id;
  double peak_gflops;  // the peak MFU is measured against, per process (NaN: not said)
  std::string peak_source, peak_date;
};

// A step ran faster than the peak MFU was measured against, which was raised to its rate.
struct PeakRaisedRecord {
  int64_t step = 0;
  double peak_gflops, was_gflops;
};

// The trainer stopped as asked (a signal: Slurm's warning before a time limit or preemption).
struct StopRecord {
  int64_t step = 0, signal = 0;  // signal 0: the signal went to another rank
  double time;
};

struct MemoryRecord {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> bytes;  // kind → bytes, in the record's order
  double peak_rss;
};

struct CheckpointRecord {
  int64_t step = 0;
  double seconds, time;
  std::string dir;
  bool on_disk = false;  // still there (keep_last prunes old ones)
};

struct RestartRecord {
  double time;
  int64_t attempt = 0, rank = -1, after_step = -1;
  std::string how, message;
};

struct RunData {
  std::string dir;
  int64_t lines = 0;                  // lines read from metrics.jsonl
  std::vector<TrainRecord> train;     // by step; when a step was written twice, the later line
  std::vector<ValRecord> val;         // by step, the same rule
  std::vector<SampleRecord> samples;  // by step, the same rule
  std::vector<RunStartRecord> runs;   // in file order
  std::vector<MemoryRecord> memory;   // in file order
  std::vector<CheckpointRecord> checkpoints;  // by step; from the run directory for older runs
  std::vector<RestartRecord> restarts;        // in file order
  std::vector<StopRecord> stops;              // in file order
  std::vector<PeakRaisedRecord> peak_raises;  // in file order
  std::string rank_field;                     // "rank_step_ms", "rank_compute_ms" or ""
  nlohmann::json config;                      // resolved config (sections → keys), or null
  std::string config_source;                  // where it came from
  int64_t superseded = 0;                     // train lines replaced by a later line for their step
  std::vector<std::string> notes;             // said at the top of the page (truncated line, ...)
};

// Reads RUN_DIR. Throws kiln::Error naming the path when there is no metrics.jsonl, and naming
// the line when a line other than the last is not a JSON object or a field has the wrong type.
// A last line that does not parse (a crash while writing it) is skipped and noted.
RunData read_run(const std::string& run_dir);

// The page, as one string.
std::string render_report(const RunData& run);

// read_run + render_report.
std::string report_html(const std::string& run_dir);

// Text made safe for HTML element content and attribute values; control characters other than
// newline, tab and carriage return become their Unicode pictures (U+2400..U+241F, U+2421).
std::string html_escape(std::string_view text);

struct Point {
  double x, y;
};

// At most max_points (>= 4) of pts (sorted by x): the first and last point, and from each of
// (max_points - 2) / 2 equal runs of points its lowest and highest, in x order, so spikes show.
// Fewer points are returned unchanged.
std::vector<Point> decimate_min_max(const std::vector<Point>& pts, size_t max_points);

// An exponential moving average over about `window` points (alpha = 2 / (window + 1)), corrected
// for its start so the first value is the first point's.
std::vector<Point> ema_smooth(const std::vector<Point>& pts, double window);

// Ticks for an axis from lo to hi: about `target` round values (1, 2 or 5 times a power of ten).
std::vector<double> nice_ticks(double lo, double hi, int target);

}  // namespace kiln
