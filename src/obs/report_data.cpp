// `kiln report`'s reading side: a run directory's metrics.jsonl (and the checkpoints on disk)
// into RunData, every record checked as untrusted input (report_html.cpp renders it).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/file.h"
#include "obs/metric_table.h"
#include "obs/metrics_log.h"
#include "obs/report_html.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Reading metrics.jsonl

struct LineReader {
  const std::string& path;
  int64_t line;
  const nlohmann::json& j;

  [[noreturn]] void bad(const std::string& key, const char* expected) const {
    fail("{}:{}: \"{}\" should be {}, got {}", path, line, key, expected, j.at(key).dump());
  }
  // NaN when absent or null (nlohmann writes non-finite numbers as null).
  double num(const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return kNaN;
    if (!it->is_number()) bad(key, "a number");
    return it->get<double>();
  }
  int64_t integer(const std::string& key, int64_t missing) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return missing;
    if (!it->is_number_integer()) bad(key, "an integer");
    return it->get<int64_t>();
  }
  int64_t step() const {
    if (!j.contains("step"))
      fail("{}:{}: a \"{}\" record needs \"step\"", path, line, j.value("type", ""));
    return integer("step", 0);
  }
  std::string str(const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return "";
    if (!it->is_string()) bad(key, "a string");
    return it->get<std::string>();
  }
  bool boolean(const std::string& key) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return false;
    if (!it->is_boolean()) bad(key, "true or false");
    return it->get<bool>();
  }
};

// Sorts by step and keeps, for each step, the record that came last in the file.
template <typename T>
int64_t keep_last_per_step(std::vector<T>& v) {
  std::stable_sort(v.begin(), v.end(), [](const T& a, const T& b) { return a.step < b.step; });
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); i++)
    if (i + 1 == v.size() || v[i + 1].step != v[i].step) out.push_back(std::move(v[i]));
  int64_t dropped = static_cast<int64_t>(v.size() - out.size());
  v = std::move(out);
  return dropped;
}

void read_checkpoints_on_disk(RunData& run) {
  fs::path root = fs::path(run.dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  std::vector<std::pair<int64_t, fs::path>> found;
  for (auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !fs::exists(e.path() / "trainer_state.json")) continue;
    try {
      found.emplace_back(std::stoll(name.substr(5)), e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(found.begin(), found.end());
  // Records for checkpoints the trainer wrote; directories without one come from older runs.
  // A record's dir may be relative to where training ran, or the run directory may have moved:
  // a checkpoint of that step under RUN_DIR/checkpoints counts too.
  for (auto& c : run.checkpoints)
    c.on_disk =
        std::any_of(found.begin(), found.end(), [&](auto& f) { return f.first == c.step; }) ||
        (!c.dir.empty() && fs::exists(fs::path(c.dir) / "trainer_state.json", ec));
  for (auto& [step, p] : found) {
    bool recorded = std::any_of(run.checkpoints.begin(), run.checkpoints.end(),
                                [&](const CheckpointRecord& c) { return c.step == step; });
    if (!recorded) run.checkpoints.push_back({step, kNaN, kNaN, p.string(), true});
  }
  std::stable_sort(run.checkpoints.begin(), run.checkpoints.end(),
                   [](const auto& a, const auto& b) { return a.step < b.step; });
  if (run.config.is_null() && !found.empty()) {
    fs::path state = found.back().second / "trainer_state.json";
    auto j = nlohmann::json::parse(read_file(state.string(), "trainer state"), nullptr, false);
    if (j.is_object() && j.contains("config") && j["config"].is_object()) {
      run.config = j["config"];
      run.config_source = state.string();
    }
  }
}

}  // namespace

RunData read_run(const std::string& run_dir) {
  RunData run;
  run.dir = run_dir;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    fail("{} is not a directory: kiln report needs a run directory (train.out_dir)", run_dir);
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  if (!fs::exists(path, ec))
    fail("{} has no metrics.jsonl: is it a run directory (train.out_dir) of kiln train?", run_dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}: {}", path, std::strerror(errno));

  // Read line by line (a long run's file can be larger than memory should hold). A line that is
  // not a JSON object is an error unless it turns out to be the last one: a crash mid-write.
  std::map<std::string, int64_t> unknown_types;
  std::string s;
  int64_t line_no = 0, bad_line = 0;
  std::string bad_why;
  while (std::getline(in, s)) {
    line_no++;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    run.lines++;
    nlohmann::json j = nlohmann::json::parse(s, nullptr, false);
    if (bad_line > 0) {
      // kiln ends a torn line before appending (MetricsLog), so a run that died mid-write and
      // was resumed leaves the torn record alone on its line, followed by the new run's start.
      if (j.is_object() && j.value("type", "") == "run_start") {
        run.notes.push_back(fmt::format(
            "Line {} of metrics.jsonl is a record cut short (the run stopped while writing it); "
            "it was left out, and the run resumed after it.",
            bad_line));
        bad_line = 0;
      } else {
        fail("{}:{}: {}; every line of metrics.jsonl must be one JSON object", path, bad_line,
             bad_why);
      }
    }
    if (j.is_discarded()) {
      // A run that died mid-write and was resumed appends its next record to the torn one:
      // "{"loss":2.3,"st{"comm_wait_ms":...}". The record that starts later on the line is read.
      for (size_t p = s.find('{', 1); p != std::string::npos; p = s.find('{', p + 1)) {
        auto rest = nlohmann::json::parse(std::string_view(s).substr(p), nullptr, false);
        if (rest.is_object() && rest.contains("type")) {
          run.notes.push_back(fmt::format(
              "Line {} of metrics.jsonl starts with a record cut short (the run stopped while "
              "writing it) followed by the next run's first record; the cut one was left out.",
              line_no));
          j = std::move(rest);
          break;
        }
      }
    }
    if (j.is_discarded() || !j.is_object()) {
      bad_line = line_no;
      bad_why = "not a JSON object";
      if (j.is_discarded()) {
        try {
          auto again = nlohmann::json::parse(s);
          (void)again;
        } catch (const nlohmann::json::exception& e) {
          bad_why = fmt::format("not JSON ({})", e.what());
        }
      }
      continue;
    }
    LineReader r{path, line_no, j};
    if (!j.contains("type")) fail("{}:{}: the record has no \"type\"", path, line_no);
    const std::string type = r.str("type");
    if (type == "train") {
      TrainRecord t;
      t.step = r.step();
      t.time = r.num("time");
      t.loss = r.num(metric_json_key(Metric::Loss));
      t.lr = r.num(metric_json_key(Metric::LearningRate));
      t.grad_norm = r.num(metric_json_key(Metric::GradNorm));
      t.tokens = r.num(metric_json_key(Metric::Tokens));
      t.tokens_per_sec = r.num(metric_json_key(Metric::TokensPerSecond));
      t.step_ms = r.num(metric_json_key(Metric::StepSeconds));
      t.mfu = r.num(metric_json_key(Metric::Mfu));
      t.forward_ms = r.num(metric_json_key(Metric::PhaseSeconds, "forward"));
      t.backward_ms = r.num(metric_json_key(Metric::PhaseSeconds, "backward"));
      t.optimizer_ms = r.num(metric_json_key(Metric::PhaseSeconds, "optimizer"));
      t.comm_wait_ms = r.num(metric_json_key(Metric::PhaseSeconds, "comm_wait"));
      t.pipeline_wait_ms = r.num(metric_json_key(Metric::PhaseSeconds, "pipeline_wait"));
      t.data_ms = r.num(metric_json_key(Metric::PhaseSeconds, "data"));
      t.skipped = r.boolean("skipped");
      for (const char* key : {"rank_step_ms", "rank_compute_ms"}) {
        auto it = j.find(key);
        if (it == j.end() || it->is_null()) continue;
        if (!it->is_array()) r.bad(key, "a list of numbers (ms per rank)");
        for (auto& v : *it) {
          if (!v.is_null() && !v.is_number()) r.bad(key, "a list of numbers (ms per rank)");
          t.rank_ms.push_back(v.is_null() ? kNaN : v.get<double>());
        }
        run.rank_field = key;
        break;
      }
      run.train.push_back(std::move(t));
    } else if (type == "val") {
      run.val.push_back({r.step(), r.num(metric_json_key(Metric::ValLoss))});
    } else if (type == "sample") {
      run.samples.push_back({r.step(), r.str("text")});
    } else if (type == "run_start") {
      RunStartRecord s;
      s.time = r.num("time");
      s.step = r.integer("step", 0);
      s.world = r.integer("world", 1);
      s.resumed_from = r.str("resumed_from");
      s.host = r.str("host");
      s.launcher = r.str("launcher");
      s.restarts = r.integer("restarts", -1);
      s.peak_gflops = r.num("peak_gflops");
      s.peak_source = r.str("peak_source");
      s.peak_date = r.str("peak_date");
      if (auto it = j.find("slurm_job_id"); it != j.end() && !it->is_null())
        s.job_id = it->is_string() ? it->get<std::string>() : it->dump();
      if (auto it = j.find("config"); it != j.end() && it->is_object()) {
        run.config = *it;
        run.config_source = fmt::format("the run_start record on line {}", line_no);
      }
      run.runs.push_back(std::move(s));
    } else if (type == "memory") {
      MemoryRecord m;
      m.step = r.integer("step", 0);
      for (const char* kind : kMemoryKinds) {  // peak_rss apart: not held memory, a high mark
        const std::string k = metric_json_key(Metric::MemoryBytes, kind);
        if (k == "peak_rss") continue;
        double b = r.num(k);
        if (std::isfinite(b)) m.bytes.emplace_back(k, b);
      }
      m.peak_rss = r.num(metric_json_key(Metric::MemoryBytes, "peak_rss"));
      run.memory.push_back(std::move(m));
    } else if (type == "checkpoint") {
      run.checkpoints.push_back({r.step(), r.num(metric_json_key(Metric::CheckpointSeconds)),
                                 r.num(metric_json_key(Metric::CheckpointTimestamp)), r.str("dir"),
                                 false});
    } else if (type == "restart") {
      RestartRecord x;
      x.time = r.num("time");
      x.attempt = r.integer("attempt", 0);
      x.rank = r.integer("rank", -1);
      x.after_step = r.integer("after_step", -1);
      x.how = r.str("how");
      x.message = r.str("message");
      run.restarts.push_back(std::move(x));
    } else if (type == "stopped") {
      run.stops.push_back({r.step(), r.integer("signal", 0), r.num("time")});
    } else if (type == "peak_raised") {
      run.peak_raises.push_back({r.step(), r.num("peak_gflops"), r.num("was_gflops")});
    } else {
      unknown_types[type]++;  // a newer kiln's record: not an error
    }
  }
  if (in.bad()) fail("error reading {}: {}", path, std::strerror(errno));
  if (bad_line > 0) {
    run.lines--;
    run.notes.push_back(fmt::format(
        "The last line of metrics.jsonl (line {}) is not a complete JSON object, probably "
        "because the run stopped while writing it; it was left out.",
        bad_line));
  }
  run.superseded = keep_last_per_step(run.train);
  keep_last_per_step(run.val);
  keep_last_per_step(run.samples);
  keep_last_per_step(run.checkpoints);
  read_checkpoints_on_disk(run);
  for (auto& [type, n] : unknown_types)
    run.notes.push_back(
        fmt::format("{} record(s) of type \"{}\" are not shown (unknown to this kiln).", n, type));
  if (run.superseded > 0)
    run.notes.push_back(fmt::format(
        "{} step(s) were trained again after a restart or resume; the plots show the later "
        "values.",
        run.superseded));
  return run;
}

}  // namespace kiln
