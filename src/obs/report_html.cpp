// `kiln report`'s rendering side: RunData (read by report_data.cpp) as one HTML page with SVG
// charts.
#include "obs/report_html.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "core/error.h"
#include "core/file.h"
#include "obs/metric_table.h"
#include "obs/metrics_log.h"
#include "obs/report_charts.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMaxPointsPerSeries = 2000;

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (c == '&') {
      out += "&amp;";
    } else if (c == '<') {
      out += "&lt;";
    } else if (c == '>') {
      out += "&gt;";
    } else if (c == '"') {
      out += "&quot;";
    } else if (c == '\'') {
      out += "&#39;";
    } else if ((u < 0x20 && c != '\n' && c != '\t' && c != '\r') || u == 0x7f) {
      // Control characters (a byte-level model's samples have them; HTML does not allow them)
      // are shown as their Unicode pictures: U+2400 + c, and U+2421 for DEL.
      unsigned cp = u == 0x7f ? 0x2421 : 0x2400 + u;
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

using namespace report;

// ---------------------------------------------------------------------------------------------
// The page

using Field = double TrainRecord::*;

Series series_of(const RunData& run, Field f, const std::string& name, int style,
                 double scale = 1) {
  Series s{name, {}, style, false};
  for (auto& t : run.train) {
    double v = t.*f;
    if (std::isfinite(v)) s.pts.push_back({static_cast<double>(t.step), v * scale});
  }
  s.pts = decimate_min_max(s.pts, kMaxPointsPerSeries);
  return s;
}

std::vector<double> field_values(const RunData& run, Field f) {
  std::vector<double> v;
  v.reserve(run.train.size());
  for (auto& t : run.train) v.push_back(t.*f);
  return v;
}

bool has_field(const RunData& run, Field f) {
  return std::any_of(run.train.begin(), run.train.end(),
                     [&](const TrainRecord& t) { return std::isfinite(t.*f); });
}

std::vector<VLine> events(const RunData& run) {
  std::vector<VLine> v;
  for (auto& r : run.runs)
    if (r.step > 0) v.push_back({static_cast<double>(r.step), "resume"});
  for (auto& r : run.restarts)
    if (r.after_step >= 0)
      v.push_back({static_cast<double>(r.after_step),
                   r.rank >= 0 ? fmt::format("restart (rank {})", r.rank) : "restart"});
  for (auto& r : run.stops) v.push_back({static_cast<double>(r.step), "stopped"});
  std::stable_sort(v.begin(), v.end(), [](const VLine& a, const VLine& b) { return a.x < b.x; });
  return v;
}

std::string card(const std::string& label, const std::string& value, const std::string& sub = "") {
  return fmt::format(
      "<div class=\"card\"><div class=\"card-label\">{}</div><div "
      "class=\"card-value\">{}</div><div class=\"card-sub\">{}</div></div>\n",
      html_escape(label), html_escape(value), html_escape(sub));
}

std::string table(const std::vector<std::string>& head,
                  const std::vector<std::vector<std::string>>& rows, const char* cls = "") {
  std::string out = fmt::format("<table class=\"{}\"><thead><tr>", cls);
  for (auto& h : head) out += "<th>" + html_escape(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (auto& r : rows) {
    out += "<tr>";
    for (auto& c : r) out += "<td>" + html_escape(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string config_value(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// "GPT-2 12L 12H 768C · batch 8×1024, accumulation 4 · ZeRO 1 · 5000 steps", from what the
// config has.
std::string config_summary(const nlohmann::json& cfg) {
  auto get = [&](const char* section, const char* key) -> std::string {
    if (!cfg.is_object() || !cfg.contains(section) || !cfg[section].is_object() ||
        !cfg[section].contains(key))
      return "";
    return config_value(cfg[section][key]);
  };
  std::vector<std::string> parts;
  std::string l = get("model", "n_layer"), h = get("model", "n_head"), c = get("model", "n_embd");
  if (!l.empty() && !h.empty() && !c.empty())
    parts.push_back(fmt::format("{} {}L {}H {}C",
                                get("model", "family") == "llama" ? "Llama" : "GPT-2", l, h, c));
  std::string b = get("train", "batch_size"), t = get("train", "seq_len"),
              a = get("train", "grad_accum");
  if (!b.empty() && !t.empty())
    parts.push_back(
        fmt::format("batch {}×{}{}", b, t, a.empty() || a == "1" ? "" : ", accumulation " + a));
  if (std::string z = get("train", "zero"); !z.empty() && z != "0") parts.push_back("ZeRO " + z);
  if (std::string n = get("train", "steps"); !n.empty()) parts.push_back(n + " steps");
  if (std::string d = get("data", "train"); !d.empty()) parts.push_back("data " + d);
  std::string out;
  for (auto& p : parts) out += (out.empty() ? "" : " · ") + p;
  return out;
}

constexpr const char* kCss = R"(
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  margin: 0; background: #f6f7f9; color: #1d2126; font-size: 14px; }
header { background: #1d2126; color: #fff; padding: 14px 24px; }
header h1 { margin: 0; font-size: 20px; font-weight: 600; }
header .sub { color: #c5cad1; font-size: 13px; margin-top: 4px; word-break: break-all; }
main { padding: 16px 24px 40px; max-width: 1200px; }
h2 { font-size: 16px; margin: 24px 0 8px; border-bottom: 1px solid #d6dae0; padding-bottom: 4px; }
.notes { background: #fff4e5; border: 1px solid #f0b45c; border-radius: 6px; padding: 8px 14px; }
.notes li { margin: 3px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { background: #fff; border: 1px solid #d6dae0; border-radius: 6px; padding: 8px 12px;
  min-width: 120px; }
.card-label { font-size: 12px; color: #5c6570; }
.card-value { font-size: 20px; font-weight: 600; margin-top: 2px; }
.card-sub { font-size: 11px; color: #5c6570; min-height: 13px; }
.grid2 { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
.config-grid { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
figure.chart { background: #fff; border: 1px solid #d6dae0; border-radius: 6px; margin: 0;
  padding: 8px 6px 6px; flex: 0 1 calc(50% - 7px); min-width: 480px; box-sizing: border-box; }
figure.chart svg { width: 100%; height: auto; display: block; }
figcaption { font-weight: 600; margin: 0 0 2px 8px; }
svg text { font-family: inherit; }
.plot { fill: #fff; }
.grid { stroke: #e6e8eb; stroke-width: 1; }
.axis { stroke: #5c6570; stroke-width: 1; }
.tick { font-size: 11px; fill: #3b424a; }
.label { font-size: 12px; fill: #3b424a; }
.legend text { font-size: 11px; fill: #1d2126; }
.event { stroke: #5c6570; stroke-width: 1; stroke-dasharray: 3 3; }
.event-label { font-size: 10px; fill: #3b424a; paint-order: stroke; stroke: #fff; stroke-width: 3px; }
.skipped { fill: #c92a2a; stroke: #000; stroke-width: 0.6; }
.note, .empty { color: #5c6570; font-size: 12px; margin: 4px 8px; }
table { border-collapse: collapse; background: #fff; border: 1px solid #d6dae0; font-size: 13px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e6e8eb; vertical-align: top; }
th { background: #eef0f3; font-weight: 600; }
td.num, table.numeric td { font-variant-numeric: tabular-nums; }
.samples td:last-child { white-space: pre-wrap; font-family: "DejaVu Sans Mono", monospace;
  font-size: 12px; max-width: 900px; word-break: break-word; }
.config td:first-child { font-family: "DejaVu Sans Mono", monospace; }
footer { color: #5c6570; font-size: 12px; margin-top: 30px; }
)";

// What MFU is measured against, from the newest run_start record that says (kiln before the
// peak's source was recorded: nothing), and any raise by a step that outran it.
std::string mfu_peak_note(const RunData& run) {
  std::string note;
  int64_t from_step = 0;
  for (auto it = run.runs.rbegin(); it != run.runs.rend(); ++it) {
    if (!std::isfinite(it->peak_gflops) || it->peak_gflops <= 0) continue;
    std::string source = it->peak_source == "kiln bench peak" && !it->peak_date.empty()
                             ? "cached by kiln bench peak on " + it->peak_date
                             : it->peak_source;
    note =
        fmt::format("Against a peak of {:.1f} GFLOP/s per process ({}).", it->peak_gflops, source);
    from_step = it->step;
    break;
  }
  const PeakRaisedRecord* first = nullptr;
  const PeakRaisedRecord* last = nullptr;
  for (const auto& r : run.peak_raises) {
    if (r.step < from_step) continue;
    if (!first) first = &r;
    last = &r;
  }
  if (first)
    note += fmt::format(
        "{}Step {} ran faster than the peak ({:.1f} GFLOP/s per process), so the peak was "
        "underestimated (a busy machine when it was measured?) and was raised to the fastest "
        "step's rate, {:.1f} GFLOP/s from step {} on. `kiln bench peak` on an idle machine, or "
        "hardware.peak_gflops, gives a true peak.",
        note.empty() ? "" : " ", first->step, first->was_gflops, last->peak_gflops, last->step);
  return note;
}

}  // namespace

std::string render_report(const RunData& run) {
  std::string out;
  out.reserve(256 * 1024);
  // The run's name is its directory's: "runs/tiny/", "." and "runs/tiny" all give "tiny".
  const fs::path full = fs::absolute(run.dir).lexically_normal();
  std::string name = full.filename().string();
  if (name.empty()) name = full.parent_path().filename().string();
  if (name.empty()) name = full.string();
  out += fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta "
      "http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'\">\n<meta name=\"viewport\" content=\"width=device-width, "
      "initial-scale=1\">\n<title>kiln run: {}</title>\n<style>{}</style>\n</head>\n<body>\n",
      html_escape(name), kCss);
  out += hatch_defs();
  out += fmt::format(
      "<header><h1>kiln run: {}</h1><div class=\"sub\">{}</div><div class=\"sub\">{} · {} lines "
      "of metrics.jsonl · report by kiln {}</div></header>\n<main>\n",
      html_escape(name), html_escape(config_summary(run.config)), html_escape(full.string()),
      run.lines, KILN_VERSION);

  // What the reader should know before trusting the plots.
  std::vector<std::string> notes = run.notes;
  std::vector<double> skipped;
  for (auto& t : run.train)
    if (t.skipped || !std::isfinite(t.loss)) skipped.push_back(static_cast<double>(t.step));
  if (!skipped.empty())
    notes.push_back(fmt::format(
        "{} step(s) had a non-finite loss or gradient norm and made no update (marked ▲ on the "
        "loss plot); the first was step {}.",
        skipped.size(), skipped.front()));
  if (run.train.empty()) notes.push_back("metrics.jsonl has no training steps yet.");
  if (!notes.empty()) {
    out += "<div class=\"notes\"><ul>\n";
    for (auto& n : notes) out += "<li>" + html_escape(n) + "</li>\n";
    out += "</ul></div>\n";
  }

  // Summary cards.
  out += "<h2>Summary</h2>\n<div class=\"cards\">\n";
  if (!run.train.empty()) {
    const TrainRecord& last = run.train.back();
    int64_t total_steps = run.config.is_object() && run.config.contains("train") &&
                                  run.config["train"].contains("steps") &&
                                  run.config["train"]["steps"].is_number_integer()
                              ? run.config["train"]["steps"].get<int64_t>()
                              : -1;
    out += card("step", std::to_string(last.step),
                total_steps > 0 ? fmt::format("of {}", total_steps) : "");
    double last_loss = kNaN;
    for (auto it = run.train.rbegin(); it != run.train.rend(); ++it)
      if (std::isfinite(it->loss)) {
        last_loss = it->loss;
        break;
      }
    out += card("train loss", fmt_num(last_loss, "{:.4f}"), "last step");
  }
  if (!run.val.empty()) {
    auto best = std::min_element(run.val.begin(), run.val.end(), [](auto& a, auto& b) {
      return std::isfinite(a.val_loss) && (!std::isfinite(b.val_loss) || a.val_loss < b.val_loss);
    });
    out += card("val loss", fmt_num(run.val.back().val_loss, "{:.4f}"),
                fmt::format("best {} at step {}", fmt_num(best->val_loss, "{:.4f}"), best->step));
  }
  if (!run.train.empty()) {
    out += card("tokens", fmt_si(run.train.back().tokens), "trained");
    out +=
        card("tokens/s", fmt_si(median(field_values(run, &TrainRecord::tokens_per_sec))), "median");
    out += card("MFU", fmt_num(median(field_values(run, &TrainRecord::mfu)) * 100, "{:.1f}%"),
                "median");
    out += card("step time", fmt_num(median(field_values(run, &TrainRecord::step_ms)), "{:.1f} ms"),
                "median");
  }
  {
    double t0 = kNaN, t1 = kNaN;
    for (auto& r : run.runs)
      if (std::isfinite(r.time)) t0 = std::isfinite(t0) ? std::min(t0, r.time) : r.time;
    for (auto& t : run.train)
      if (std::isfinite(t.time)) {
        t0 = std::isfinite(t0) ? std::min(t0, t.time) : t.time;
        t1 = std::isfinite(t1) ? std::max(t1, t.time) : t.time;
      }
    if (std::isfinite(t0) && std::isfinite(t1) && t1 >= t0)
      out += card("wall time", fmt_duration(t1 - t0), "first to last record");
  }
  if (!run.runs.empty()) {
    out += card("runs", std::to_string(run.runs.size()),
                fmt::format("{} restart(s) by kiln launch", run.restarts.size()));
    out += card("ranks", std::to_string(run.runs.back().world), run.runs.back().host);
  } else if (!run.restarts.empty()) {
    out += card("restarts", std::to_string(run.restarts.size()), "by kiln launch");
  }
  out += card("skipped steps", std::to_string(skipped.size()), "non-finite");
  out += "</div>\n";

  // Curves.
  const auto ev = events(run);
  out += "<h2>Training</h2>\n<div class=\"grid2\">\n";
  {
    LineChart c;
    c.id = "loss";
    c.title = "Loss";
    c.y_label = "loss";
    Series raw = series_of(run, &TrainRecord::loss, "train loss", 0);
    // A noisy loss shows its trend through a smoothed line drawn over the faint raw one.
    std::vector<Point> all;
    for (auto& t : run.train)
      if (std::isfinite(t.loss)) all.push_back({static_cast<double>(t.step), t.loss});
    const double window = std::floor(static_cast<double>(all.size()) / 50);
    if (window >= 2) {
      raw.opacity = 0.35;
      raw.width = 1;
      c.series.push_back(std::move(raw));
      Series sm{fmt::format("train loss, EMA {:.0f} steps", window),
                decimate_min_max(ema_smooth(all, window), kMaxPointsPerSeries), 0, false};
      sm.width = 2.2;
      c.series.push_back(std::move(sm));
    } else {
      c.series.push_back(std::move(raw));
    }
    Series v{"val loss", {}, 1, true};
    for (auto& r : run.val)
      if (std::isfinite(r.val_loss)) v.pts.push_back({static_cast<double>(r.step), r.val_loss});
    v.dots = v.pts.size() <= 200;
    v.pts = decimate_min_max(v.pts, kMaxPointsPerSeries);
    if (!v.pts.empty()) c.series.push_back(std::move(v));
    c.vlines = ev;
    c.skipped = skipped;
    if (run.train.size() > kMaxPointsPerSeries)
      c.note = fmt::format("{} steps drawn as the lowest and highest of each of {} runs of steps.",
                           run.train.size(), (kMaxPointsPerSeries - 2) / 2);
    out += render_line_chart(c);
  }
  {
    LineChart c;
    c.id = "lr";
    c.title = "Learning rate";
    c.y_label = "learning rate";
    c.from_zero = true;
    c.series.push_back(series_of(run, &TrainRecord::lr, "lr", 0));
    c.vlines = ev;
    out += render_line_chart(c);
  }
  {
    LineChart c;
    c.id = "grad-norm";
    c.title = "Gradient norm (before clipping)";
    c.y_label = "global L2 norm";
    c.from_zero = true;
    c.series.push_back(series_of(run, &TrainRecord::grad_norm, "grad norm", 0));
    c.vlines = ev;
    c.skipped = skipped;
    out += render_line_chart(c);
  }
  out += "</div>\n<h2>Speed</h2>\n<div class=\"grid2\">\n";
  {
    LineChart c;
    c.id = "throughput";
    c.title = "Throughput";
    c.y_label = "tokens/s";
    c.from_zero = true;
    c.series.push_back(series_of(run, &TrainRecord::tokens_per_sec, "tokens/s", 0));
    c.vlines = ev;
    out += render_line_chart(c);
  }
  {
    LineChart c;
    c.id = "mfu";
    c.title = "Model FLOPs utilisation";
    c.y_label = "MFU (%)";
    c.from_zero = true;
    c.series.push_back(series_of(run, &TrainRecord::mfu, "MFU", 0, 100.0));
    c.vlines = ev;
    c.note = mfu_peak_note(run);
    out += render_line_chart(c);
  }
  // Step time and its parts.
  struct Part {
    const char* name;
    Field f;
  };
  const Part parts[] = {{"forward", &TrainRecord::forward_ms},
                        {"backward", &TrainRecord::backward_ms},
                        {"optimizer", &TrainRecord::optimizer_ms},
                        {"comm wait", &TrainRecord::comm_wait_ms},
                        {"pipeline wait", &TrainRecord::pipeline_wait_ms},
                        {"data", &TrainRecord::data_ms}};
  {
    LineChart c;
    c.id = "step-time";
    c.title = "Step time";
    c.y_label = "ms";
    c.from_zero = true;
    c.series.push_back(series_of(run, &TrainRecord::step_ms, "step", 0));
    int style = 1;
    for (auto& p : parts)
      if (has_field(run, p.f)) c.series.push_back(series_of(run, p.f, p.name, style++));
    c.vlines = ev;
    out += render_line_chart(c);
  }
  {
    // Medians of each part; "other" is what the parts leave of each step.
    // Older runs record only the communication wait: too little to break a step down.
    std::vector<Bar> bars;
    double total = median(field_values(run, &TrainRecord::step_ms));
    const bool any_part = has_field(run, &TrainRecord::forward_ms) ||
                          has_field(run, &TrainRecord::backward_ms) ||
                          has_field(run, &TrainRecord::optimizer_ms);
    std::vector<double> other;
    for (auto& t : run.train) {
      double sum = 0;
      bool all = std::isfinite(t.step_ms);
      for (auto& p : parts)
        if (std::isfinite(t.*p.f)) sum += t.*p.f;
      other.push_back(all ? t.step_ms - sum : kNaN);
    }
    int style = 1;
    for (auto& p : parts) {
      if (!any_part || !has_field(run, p.f)) continue;
      double m = median(field_values(run, p.f));
      bars.push_back({p.name, fmt::format("{:.2f} ms ({:.0f}%)", m, 100 * m / total), m, style++});
    }
    if (any_part) {
      double m = median(other);
      bars.push_back(
          {"other", fmt::format("{:.2f} ms ({:.0f}%)", m, 100 * m / total), std::max(0.0, m), 6});
      bars.push_back({"whole step", fmt::format("{:.2f} ms", total), total, 0});
    }
    out += render_bar_chart(
        "breakdown", "Where a step's time goes (median per part)", bars,
        any_part ? "Medians over all steps; \"other\" is the step time the parts do not cover "
                   "(gradient norm, clipping, logging)."
                 : "");
  }
  out += "</div>\n";

  // Memory and ranks.
  out += "<h2>Memory and ranks</h2>\n<div class=\"grid2\">\n";
  {
    std::vector<Bar> bars;
    std::string note;
    if (!run.memory.empty()) {
      const MemoryRecord& m = run.memory.back();
      int style = 0;
      double sum = 0;
      for (auto& [kind, b] : m.bytes) {
        bars.push_back({kind, fmt_bytes(b), b, style++});
        sum += b;
      }
      bars.push_back({"total", fmt_bytes(sum), sum, 6});
      // The resident size also counts code, libraries and allocator slack; beside a small
      // model it would flatten every other bar, so it is then only said in words.
      const bool rss_bar = std::isfinite(m.peak_rss) && m.peak_rss <= 4 * sum;
      if (rss_bar) bars.push_back({"peak RSS", fmt_bytes(m.peak_rss), m.peak_rss, 7});
      note = fmt::format("Per rank, after step {}{}.", m.step,
                         run.memory.size() > 1 ? " of the latest run" : "");
      if (std::isfinite(m.peak_rss))
        note += fmt::format(
            " The process's peak resident size was {} (with code, libraries and "
            "allocator slack).",
            fmt_bytes(m.peak_rss));
      if (run.memory.size() > 1) {
        note += " Earlier runs:";
        for (size_t i = 0; i + 1 < run.memory.size(); i++) {
          double total = 0;
          for (auto& kb : run.memory[i].bytes) total += kb.second;
          note += fmt::format(" after step {}, {} in all{}", run.memory[i].step, fmt_bytes(total),
                              i + 2 < run.memory.size() ? ";" : ".");
        }
      }
    }
    out += render_bar_chart("memory", "Memory per rank by kind", bars, note);
  }
  {
    // Stragglers: the fastest, median and slowest rank of each step, and each rank's median.
    size_t world = 0;
    for (auto& t : run.train) world = std::max(world, t.rank_ms.size());
    const bool compute = run.rank_field == "rank_compute_ms";
    const std::string what = compute ? "compute time" : "step time";
    if (world > 1) {
      LineChart c;
      c.id = "rank-step-time";
      c.title = compute ? "Compute time across ranks (waits excluded)" : "Step time across ranks";
      c.y_label = "ms";
      c.from_zero = true;
      Series lo{"fastest rank", {}, 2, false}, mid{"median rank", {}, 0, false},
          hi{"slowest rank", {}, 1, false};
      std::vector<std::vector<double>> per_rank(world);
      std::vector<int64_t> slowest_count(world, 0);
      for (auto& t : run.train) {
        std::vector<double> v;
        size_t arg = 0;
        for (size_t r = 0; r < t.rank_ms.size(); r++) {
          per_rank[r].push_back(t.rank_ms[r]);
          if (std::isfinite(t.rank_ms[r])) {
            v.push_back(t.rank_ms[r]);
            if (!std::isfinite(t.rank_ms[arg]) || t.rank_ms[r] > t.rank_ms[arg]) arg = r;
          }
        }
        if (v.empty()) continue;
        slowest_count[arg]++;
        double x = static_cast<double>(t.step);
        lo.pts.push_back({x, *std::min_element(v.begin(), v.end())});
        hi.pts.push_back({x, *std::max_element(v.begin(), v.end())});
        mid.pts.push_back({x, median(v)});
      }
      for (Series* s : {&lo, &mid, &hi}) {
        s->pts = decimate_min_max(s->pts, kMaxPointsPerSeries);
        c.series.push_back(std::move(*s));
      }
      c.vlines = ev;
      out += render_line_chart(c);
      std::vector<Bar> bars;
      size_t slowest = static_cast<size_t>(
          std::max_element(slowest_count.begin(), slowest_count.end()) - slowest_count.begin());
      for (size_t r = 0; r < world; r++) {
        double m = median(per_rank[r]);
        bars.push_back({fmt::format("rank {}", r),
                        fmt::format("{:.1f} ms, slowest {}×", m, slowest_count[r]), m,
                        r == slowest ? 1 : 0});
      }
      int64_t counted = 0;
      for (auto n : slowest_count) counted += n;
      // A pipeline's measured bubble: the part of each step a rank did not compute.
      std::string bubble;
      if (compute && has_field(run, &TrainRecord::pipeline_wait_ms) &&
          median(field_values(run, &TrainRecord::pipeline_wait_ms)) > 0) {
        bubble =
            " Pipeline bubble, the share of the step each rank was idle (1 − compute ÷ step, "
            "median):";
        for (size_t r = 0; r < world; r++) {
          std::vector<double> idle;
          for (auto& t : run.train)
            if (r < t.rank_ms.size() && std::isfinite(t.rank_ms[r]) && t.step_ms > 0)
              idle.push_back(1 - t.rank_ms[r] / t.step_ms);
          bubble +=
              fmt::format(" rank {} {:.0f}%{}", r, 100 * median(idle), r + 1 < world ? "," : ".");
        }
      }
      out += render_bar_chart(
          "ranks", "Median " + what + " per rank", bars,
          fmt::format("Rank {} was the slowest in {} of {} steps (hatched bar).{}{}", slowest,
                      slowest_count[slowest], counted,
                      compute ? " Each rank's forward, backward and optimizer time, waits "
                                "excluded: the slowest rank is the one the others wait for."
                              : "",
                      bubble));
    } else {
      out +=
          "<figure class=\"chart\" id=\"ranks\"><figcaption>Step time across "
          "ranks</figcaption><p class=\"empty\">One rank (or per-rank times not recorded): no "
          "stragglers to show.</p></figure>\n";
    }
  }
  out += "</div>\n";

  // Runs, restarts and checkpoints.
  out += "<h2>Runs and restarts</h2>\n";
  {
    // Progress against wall time: a stall or a restart is a flat stretch.
    double t0 = kNaN;
    for (auto& r : run.runs)
      if (std::isfinite(r.time)) t0 = std::isfinite(t0) ? std::min(t0, r.time) : r.time;
    for (auto& t : run.train)
      if (std::isfinite(t.time)) t0 = std::isfinite(t0) ? std::min(t0, t.time) : t.time;
    std::vector<Point> pts;
    for (auto& t : run.train)
      if (std::isfinite(t.time)) pts.push_back({t.time - t0, static_cast<double>(t.step)});
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
    if (pts.size() >= 2) {
      const double span = pts.back().x;
      const auto [unit, div] = span < 120    ? std::pair{"seconds", 1.0}
                               : span < 7200 ? std::pair{"minutes", 60.0}
                                             : std::pair{"hours", 3600.0};
      for (auto& p : pts) p.x /= div;
      LineChart c;
      c.id = "progress";
      c.title = "Progress over wall time";
      c.integer_x = false;
      c.x_label = fmt::format("{} since the first record", unit);
      c.y_label = "step";
      c.from_zero = true;
      c.series.push_back({"step reached", decimate_min_max(pts, kMaxPointsPerSeries), 0, false});
      for (auto& r : run.restarts)
        if (std::isfinite(r.time))
          c.vlines.push_back({(r.time - t0) / div, r.rank >= 0
                                                       ? fmt::format("restart (rank {})", r.rank)
                                                       : std::string("restart")});
      out += "<div class=\"grid2\">\n" + render_line_chart(c) + "</div>\n";
    }
  }
  if (run.runs.empty() && run.restarts.empty() && run.stops.empty()) {
    out += "<p class=\"empty\">No run_start or restart records (a run from an older kiln).</p>\n";
  } else {
    struct Row {
      double time;
      int order;  // a restart comes before the start it causes
      std::vector<std::string> cells;
    };
    std::vector<Row> rows;
    for (auto& r : run.runs) {
      std::string detail = r.resumed_from.empty() ? "" : "resumed from " + r.resumed_from;
      auto add = [&](const std::string& what) { detail += (detail.empty() ? "" : "; ") + what; };
      if (!r.launcher.empty() && r.launcher != "none") add("launched by " + r.launcher);
      if (!r.job_id.empty()) add("Slurm job " + r.job_id);
      if (r.restarts > 0) add(fmt::format("after {} restart(s)", r.restarts));
      rows.push_back({r.time,
                      1,
                      {fmt_time(r.time), "start", std::to_string(r.step), std::to_string(r.world),
                       r.host, detail}});
    }
    for (auto& r : run.stops)
      rows.push_back({r.time,
                      0,
                      {fmt_time(r.time), "stopped", std::to_string(r.step), "",
                       r.signal > 0 ? fmt::format("signal {} ({})", r.signal, strsignal(r.signal))
                                    : "a signal to another rank",
                       "checkpoint written; the job can resume from it"}});
    for (auto& r : run.restarts)
      rows.push_back(
          {r.time,
           0,
           {fmt_time(r.time), fmt::format("restart {}", r.attempt),
            r.after_step >= 0 ? std::to_string(r.after_step) : "–",
            r.rank >= 0 ? "rank " + std::to_string(r.rank) + " failed" : "", r.how, r.message}});
    for (auto& r : rows)
      if (!std::isfinite(r.time)) r.time = std::numeric_limits<double>::infinity();  // last
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      return a.time != b.time ? a.time < b.time : a.order < b.order;
    });
    std::vector<std::vector<std::string>> cells;
    for (auto& r : rows) cells.push_back(std::move(r.cells));
    out += table({"time", "event", "step", "ranks", "host / how", "detail"}, cells);
  }
  // Long runs have many checkpoints and samples: the tables keep the newest.
  constexpr size_t kMaxRows = 100;
  out += "<h2>Checkpoints</h2>\n";
  if (run.checkpoints.empty()) {
    out += "<p class=\"empty\">No checkpoints.</p>\n";
  } else {
    Series took{"write time", {}, 0, false};
    for (auto& c : run.checkpoints)
      if (std::isfinite(c.seconds)) took.pts.push_back({static_cast<double>(c.step), c.seconds});
    if (took.pts.size() >= 2) {
      LineChart c;
      c.id = "checkpoint-time";
      c.title = "Checkpoint write time";
      c.y_label = "seconds";
      c.from_zero = true;
      took.dots = took.pts.size() <= 200;
      took.pts = decimate_min_max(took.pts, kMaxPointsPerSeries);
      c.series.push_back(std::move(took));
      c.vlines = ev;
      out += "<div class=\"grid2\">\n" + render_line_chart(c) + "</div>\n";
    }
    std::vector<std::vector<std::string>> rows;
    const size_t n = run.checkpoints.size(), first = n > kMaxRows ? n - kMaxRows : 0;
    for (size_t i = n; i-- > first;) {
      const CheckpointRecord& c = run.checkpoints[i];
      rows.push_back({std::to_string(c.step), fmt_num(c.seconds, "{:.2f} s"), fmt_time(c.time),
                      c.on_disk ? "yes" : "no (pruned)", c.dir});
    }
    if (first > 0)
      out += fmt::format("<p class=\"note\">The newest {} of {} checkpoints.</p>\n", kMaxRows, n);
    out += table({"step", "took", "written", "on disk", "directory"}, rows, "numeric");
  }

  // Samples, newest first.
  out += "<h2>Samples</h2>\n";
  if (run.samples.empty()) {
    out += "<p class=\"empty\">No samples (train.sample_tokens = 0, or no validation yet).</p>\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    const size_t n = run.samples.size(), first = n > kMaxRows ? n - kMaxRows : 0;
    for (size_t i = n; i-- > first;)
      rows.push_back({std::to_string(run.samples[i].step), run.samples[i].text});
    if (first > 0)
      out += fmt::format(
          "<p class=\"note\">The newest {} of {} samples; metrics.jsonl has them all.</p>\n",
          kMaxRows, n);
    out += table({"step", "generated text"}, rows, "samples");
  }

  // Config.
  out += "<h2>Config</h2>\n";
  if (!run.config.is_object()) {
    out += "<p class=\"empty\">No config found (no run_start record and no checkpoint).</p>\n";
  } else {
    // One table per section, side by side.
    out += "<p class=\"note\">From " + html_escape(run.config_source) + ".</p>\n";
    out += "<div class=\"config-grid\">\n";
    std::vector<std::vector<std::string>> loose;
    for (auto& [section, tbl] : run.config.items()) {
      if (!tbl.is_object()) {
        loose.push_back({section, config_value(tbl)});
        continue;
      }
      std::vector<std::vector<std::string>> rows;
      for (auto& [key, v] : tbl.items()) rows.push_back({section + "." + key, config_value(v)});
      out += table({"[" + section + "]", ""}, rows, "config");
    }
    if (!loose.empty()) out += table({"other", ""}, loose, "config");
    out += "</div>\n";
  }
  out += fmt::format(
      "<footer>Written by <code>kiln report</code>. Plots are inline SVG; the page loads "
      "nothing else.</footer>\n</main>\n</body>\n</html>\n");
  return out;
}

std::string report_html(const std::string& run_dir) {
  return render_report(read_run(run_dir));
}

}  // namespace kiln
