// `kiln report`: reading run directories (old and new record types, damage, restarts), the
// drawing helpers, and the page itself rendered by a real browser (headless Chromium).
#include "obs/report_html.h"

#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/file.h"
#include "core/rng.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::run_kiln;
using kiln::testing::TempDir;

void write_lines(const std::string& path, const std::vector<std::string>& lines,
                 const std::string& tail = "") {
  std::ofstream f(path);
  for (auto& l : lines) f << l << "\n";
  f << tail;
}

std::string train_line(int64_t step, double loss, const std::string& extra = "") {
  return fmt::format(
      R"({{"type":"train","step":{},"loss":{},"lr":0.001,"grad_norm":1.5,"tokens":{},)"
      R"("tokens_per_sec":1000.0,"step_ms":50.0,"mfu":0.2,"comm_wait_ms":0.0,"skipped":false{}}})",
      step, loss, step * 512, extra);
}

// A run with every record type: `world` ranks (the last one slow), a restart of rank 1 three
// steps after a checkpoint and the resume from that checkpoint (so three steps run twice),
// memory, checkpoints every tenth of the run, samples with markup, a skipped step and a
// truncated last line.
void write_full_run(const std::string& dir, int steps, int world,
                    const std::string& rank_field = "rank_step_ms") {
  std::vector<std::string> l;
  const std::string cfg = R"({"model":{"n_layer":2,"n_embd":64},"train":{"steps":)" +
                          std::to_string(steps) +
                          R"(,"lr":0.003,"sample_prompt":"<b>&"},"data":{"tokenizer":"bytes"}})";
  l.push_back(R"({"type":"run_start","time":1795000000.0,"step":0,"world":)" +
              std::to_string(world) + R"(,"resumed_from":null,"config":)" + cfg +
              R"(,"host":"node01"})");
  const int every = std::max(1, steps / 10);
  const int restart_after = steps * 6 / 10 / every * every + 3;
  double t = 1795000000.0;
  bool restarted = false;
  for (int s = 1; s <= steps; s++) {
    if (s == restart_after + 1 && !restarted) {
      restarted = true;
      l.push_back(fmt::format(
          R"({{"type":"restart","time":{},"attempt":1,"rank":1,"how":"killed by signal 9",)"
          R"("after_step":{},"message":"rank 1 <died> & came back"}})",
          t + 1, restart_after));
      l.push_back(
          fmt::format(R"({{"type":"run_start","time":{},"step":{},"world":{},)"
                      R"("resumed_from":"{}/checkpoints/step_{:08d}","config":{},"host":"node01",)"
                      R"("launcher":"slurm","slurm_job_id":"4242","restarts":1}})",
                      t + 3, restart_after - 3, world, dir, restart_after - 3, cfg));
      s = restart_after - 3;
      continue;
    }
    std::string ranks = "[";
    for (int r = 0; r < world; r++)
      ranks += fmt::format("{}{}", r ? "," : "", 60.0 + (r == world - 1 ? 9 : 0) + (s % 7) * 0.3);
    ranks += "]";
    double loss = 2 + 8.8 * std::exp(-s * 8.0 / steps) + 0.05 * (s % 5) + (restarted ? 0.01 : 0);
    bool skipped = s == steps / 2;
    t += 0.08;
    l.push_back(fmt::format(
        R"({{"type":"train","step":{},"loss":{},"lr":{},"grad_norm":{},"tokens":{},)"
        R"("tokens_per_sec":{},"step_ms":{},"mfu":0.21,"comm_wait_ms":4.0,"forward_ms":20.0,)"
        R"("backward_ms":40.0,"optimizer_ms":5.0,"data_ms":0.5,"skipped":{},"time":{},)"
        R"("{}":{}}})",
        s, skipped ? "null" : fmt::format("{}", loss), 0.003 * std::min(1.0, s / 5.0),
        skipped ? "null" : "1.25", s * 1024, 12800 + (s % 3) * 10, 80.0 + (s % 7) * 0.3,
        skipped ? "true" : "false", t, rank_field, ranks));
    if (s == 1)
      l.push_back(
          R"({"type":"memory","step":1,"params":400000,"grads":400000,"optimizer":800000,)"
          R"("working":1200000,"activations":3000000,"comm_buffers":100000,"peak_rss":90000000})");
    if (s % every == 0) {
      l.push_back(fmt::format(R"({{"type":"val","step":{},"val_loss":{}}})", s, loss + 0.1));
      l.push_back(fmt::format(
          R"({{"type":"sample","step":{},"text":"<script>alert('x')</script> & \"fox\"\nline 2"}})",
          s));
      l.push_back(fmt::format(
          R"({{"type":"checkpoint","step":{},"seconds":0.25,"dir":"{}/checkpoints/step_{:08d}",)"
          R"("time":{}}})",
          s, dir, s, t));
    }
  }
  l.push_back(fmt::format(R"({{"type":"stopped","step":{},"signal":10,"time":{}}})", steps, t));
  write_lines(dir + "/metrics.jsonl", l, R"({"type":"train","step":)" + std::to_string(steps + 1));
}

struct SeriesPath {
  int64_t declared = -1;  // data-points
  int64_t counted = 0;    // M and L commands in d
};

// The series paths of a page (or of Chromium's DOM dump of it), by data-series name.
std::map<std::string, SeriesPath> series_paths(const std::string& html) {
  std::map<std::string, SeriesPath> out;
  auto attr = [](const std::string& tag, const std::string& name) {
    size_t p = tag.find(" " + name + "=\"");
    if (p == std::string::npos) return std::string();
    p += name.size() + 3;
    return tag.substr(p, tag.find('"', p) - p);
  };
  for (size_t p = html.find("<path"); p != std::string::npos; p = html.find("<path", p + 1)) {
    std::string tag = html.substr(p, html.find('>', p) - p);
    if (attr(tag, "class") != "series") continue;
    SeriesPath s;
    s.declared = std::stoll(attr(tag, "data-points"));
    for (char c : attr(tag, "d")) s.counted += c == 'M' || c == 'L';
    out[attr(tag, "data-series")] = s;
  }
  return out;
}

// The text of <figure id="ID"> ... </figure>.
std::string figure(const std::string& html, const std::string& id) {
  size_t b = html.find("<figure class=\"chart\" id=\"" + id + "\"");
  if (b == std::string::npos) return "";
  return html.substr(b, html.find("</figure>", b) - b);
}

// The vertices of a series' path, in pixels.
std::vector<Point> path_points(const std::string& fig, const std::string& series) {
  std::vector<Point> pts;
  size_t p = fig.find("data-series=\"" + series + "\"");
  if (p == std::string::npos) return pts;
  p = fig.find(" d=\"", p) + 4;
  std::string d = fig.substr(p, fig.find('"', p) - p);
  for (size_t i = 0; (i = d.find_first_of("ML", i)) != std::string::npos; i++) {
    Point q{};
    if (std::sscanf(d.c_str() + i + 1, "%lf %lf", &q.x, &q.y) == 2) pts.push_back(q);
  }
  return pts;
}

// Tick labels of a chart as (value, pixel): the y axis's (anchored at their end) or the x axis's.
std::vector<Point> tick_labels(const std::string& fig, bool y_axis) {
  std::vector<Point> out;
  const std::string anchor = y_axis ? "text-anchor=\"end\"" : "text-anchor=\"middle\"";
  for (size_t p = fig.find("<text class=\"tick\""); p != std::string::npos;
       p = fig.find("<text class=\"tick\"", p + 1)) {
    std::string tag = fig.substr(p, fig.find('>', p) - p);
    if (tag.find(anchor) == std::string::npos) continue;
    double x, y;
    size_t q = tag.find(" x=\"");
    std::sscanf(tag.c_str() + q, " x=\"%lf\" y=\"%lf\"", &x, &y);
    size_t b = fig.find('>', p) + 1;
    out.push_back({std::stod(fig.substr(b, fig.find('<', b) - b)), y_axis ? y : x});
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Helpers

TEST(ReportHtml, EscapingNeutralisesMarkupInTextAndAttributes) {
  EXPECT_EQ(html_escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
  EXPECT_EQ(html_escape("plain text, é\nline\ttab"), "plain text, é\nline\ttab");
  // A byte-level model's sample: NUL, ESC and DEL are not allowed in HTML; they show as pictures.
  EXPECT_EQ(html_escape(std::string("a\0b\x1b"
                                    "c\x7f",
                                    6)),
            "a\u2400b\u241b"
            "c\u2421");
}

TEST(ReportHtml, DecimationKeepsEndsSpikesAndDipsWithinTheBudget) {
  std::vector<Point> pts;
  for (int i = 0; i < 100000; i++) pts.push_back({double(i), std::sin(i * 0.001)});
  pts[54321].y = 100;   // a loss spike
  pts[77777].y = -100;  // and a dip
  auto d = decimate_min_max(pts, 2000);
  EXPECT_LE(d.size(), 2000u);
  EXPECT_GE(d.size(), 1900u);
  EXPECT_EQ(d.front().x, 0);
  EXPECT_EQ(d.back().x, 99999);
  bool spike = false, dip = false;
  for (size_t i = 0; i < d.size(); i++) {
    if (i > 0) {
      EXPECT_LT(d[i - 1].x, d[i].x) << i;  // in order, no repeats
    }
    EXPECT_EQ(d[i].y, pts[static_cast<size_t>(d[i].x)].y) << i;  // only real points
    spike |= d[i].y == 100;
    dip |= d[i].y == -100;
  }
  EXPECT_TRUE(spike);
  EXPECT_TRUE(dip);
  // The envelope survives: the decimated curve's extremes over any stretch of 1000 steps are
  // those of the full curve (each run of points is at most 100 long).
  for (int b = 0; b < 100; b++) {
    double lo = 1e9, hi = -1e9, dlo = 1e9, dhi = -1e9;
    for (int i = b * 1000; i < (b + 1) * 1000; i++)
      lo = std::min(lo, pts[i].y), hi = std::max(hi, pts[i].y);
    for (auto& p : d)
      if (p.x >= b * 1000 - 100 && p.x < (b + 1) * 1000 + 100)
        dlo = std::min(dlo, p.y), dhi = std::max(dhi, p.y);
    EXPECT_LE(dlo, lo) << b;
    EXPECT_GE(dhi, hi) << b;
  }
  std::vector<Point> few = {{1, 2}, {2, 3}, {3, 1}};
  auto same = decimate_min_max(few, 2000);
  ASSERT_EQ(same.size(), 3u);
  EXPECT_EQ(same[2].y, 1);
}

TEST(ReportHtml, SmoothingStartsAtTheDataAndLagsARampByHalfItsWindow) {
  std::vector<Point> flat, ramp;
  for (int i = 0; i < 500; i++)
    flat.push_back({double(i), 3.5}), ramp.push_back({double(i), 2.0 * i});
  for (auto& p : ema_smooth(flat, 20)) EXPECT_NEAR(p.y, 3.5, 1e-12);  // no pull towards 0
  auto r = ema_smooth(ramp, 21);  // alpha = 1/11: a ramp's EMA lags (1 - alpha) / alpha = 10 points
  EXPECT_EQ(r[0].y, 0);
  EXPECT_NEAR(r[499].y, 2.0 * (499 - 10), 1e-6);
  EXPECT_EQ(r[499].x, 499);
}

TEST(ReportHtml, TicksAreRoundNumbersInsideTheRange) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  auto t = nice_ticks(0.00013, 0.00291, 5);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_NEAR(t[0], 0.0005, 1e-15);
  EXPECT_NEAR(t[4], 0.0025, 1e-15);
  EXPECT_EQ(nice_ticks(-3, 7, 4), (std::vector<double>{-2, 0, 2, 4, 6}));
  EXPECT_TRUE(nice_ticks(3, 3, 5).empty());
  EXPECT_TRUE(nice_ticks(3, 3.0000000000000004, 5).empty());  // one ulp apart: no round values
  EXPECT_EQ(nice_ticks(0, 1e6, 5).size(), 6u);
  // Any range, of any magnitude: a few ticks, ascending, inside it, on multiples of the spacing.
  Rng rng(7);
  for (int i = 0; i < 20000; i++) {
    double scale = std::pow(10.0, rng.uniform() * 30 - 15);
    double lo = (rng.uniform() * 2 - 1) * scale * std::pow(10.0, rng.uniform() * 12);
    double hi = lo + scale * rng.uniform();
    auto t = nice_ticks(lo, hi, 5);
    ASSERT_LE(t.size(), 100u) << lo << " " << hi;
    for (size_t k = 0; k < t.size(); k++) {
      EXPECT_GE(t[k], lo - (hi - lo) * 1e-6) << lo << " " << hi;
      EXPECT_LE(t[k], hi + (hi - lo) * 1e-6) << lo << " " << hi;
      if (k > 0) {
        EXPECT_GT(t[k], t[k - 1]) << lo << " " << hi;
      }
    }
    if (hi - lo > 1e-9 * std::max(std::abs(lo), std::abs(hi))) {
      EXPECT_GE(t.size(), 2u) << lo << " " << hi;
      EXPECT_LE(t.size(), 11u) << lo << " " << hi;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reading run directories

TEST(ReportRead, MissingRunDirectoryOrMetricsIsAnErrorNamingThePath) {
  TempDir dir;
  std::string e = error_of([&] { read_run(dir / "nope"); });
  EXPECT_NE(e.find(dir / "nope"), std::string::npos) << e;
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  e = error_of([&] { read_run(dir.path()); });
  EXPECT_NE(e.find(dir.path()), std::string::npos) << e;
  EXPECT_NE(e.find("no metrics.jsonl"), std::string::npos) << e;
}

TEST(ReportRead, ABadLineInTheMiddleIsAnErrorNamingFileAndLine) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl",
              {train_line(1, 3.0), "{\"type\": \"train\", oops", train_line(2, 2.9)});
  std::string e = error_of([&] { read_run(dir.path()); });
  EXPECT_NE(e.find(dir / "metrics.jsonl:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("not JSON"), std::string::npos) << e;

  write_lines(dir / "metrics.jsonl", {train_line(1, 3.0), "[1, 2]", train_line(2, 2.9)});
  e = error_of([&] { read_run(dir.path()); });
  EXPECT_NE(e.find("metrics.jsonl:2: not a JSON object"), std::string::npos) << e;

  write_lines(dir / "metrics.jsonl",
              {train_line(1, 3.0), R"({"type":"train","step":2,"loss":"low"})", train_line(3, 2)});
  e = error_of([&] { read_run(dir.path()); });
  EXPECT_NE(e.find("metrics.jsonl:2: \"loss\" should be a number, got \"low\""), std::string::npos)
      << e;

  write_lines(dir / "metrics.jsonl", {R"({"type":"val","val_loss":2.0})", train_line(1, 2)});
  e = error_of([&] { read_run(dir.path()); });
  EXPECT_NE(e.find("metrics.jsonl:1: a \"val\" record needs \"step\""), std::string::npos) << e;
}

TEST(ReportRead, ATruncatedLastLineIsSkippedAndSaidOnThePage) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl", {train_line(1, 3.0), train_line(2, 2.9)},
              R"({"type":"train","step":3,"lo)");
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.train.size(), 2u);
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_NE(run.notes[0].find("line 3"), std::string::npos) << run.notes[0];
  std::string html = render_report(run);
  EXPECT_NE(html.find("The last line of metrics.jsonl (line 3)"), std::string::npos);
  EXPECT_EQ(series_paths(html)["train loss"].declared, 2);
}

TEST(ReportRead, ARecordTornByACrashThenAppendedToByTheResumedRunIsSkipped) {
  // metrics.jsonl is opened for appending: the resumed run's first line lands after the cut one.
  TempDir dir;
  write_lines(dir / "metrics.jsonl",
              {train_line(1, 3.0), train_line(2, 2.9),
               R"({"type":"train","step":3,"lo)" +
                   std::string(R"({"type":"run_start","step":2,"world":1,"config":{"train":{}}})"),
               train_line(3, 2.8)});
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.train.size(), 3u);
  ASSERT_EQ(run.runs.size(), 1u);
  EXPECT_EQ(run.runs[0].step, 2);
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_NE(run.notes[0].find("Line 3 of metrics.jsonl starts with a record cut short"),
            std::string::npos)
      << run.notes[0];
  // Garbage that is not followed by a record is still an error.
  write_lines(dir / "metrics.jsonl", {train_line(1, 3.0), "xx{\"no\": 1}", train_line(2, 2.9)});
  EXPECT_NE(error_of([&] { read_run(dir.path()); }).find("metrics.jsonl:2: not JSON"),
            std::string::npos);
}

TEST(ReportRead, AStepWrittenAgainAfterAResumeKeepsItsLaterValues) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl",
              {train_line(1, 5.0), train_line(2, 4.0), train_line(3, 3.0), train_line(4, 2.5),
               R"({"type":"val","step":4,"val_loss":3.5})", train_line(3, 3.3), train_line(4, 2.7),
               R"({"type":"val","step":4,"val_loss":3.25})", train_line(5, 2.2)});
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.train.size(), 5u);
  EXPECT_EQ(run.superseded, 2);
  EXPECT_EQ(run.train[2].loss, 3.3);
  EXPECT_EQ(run.train[3].loss, 2.7);
  ASSERT_EQ(run.val.size(), 1u);
  EXPECT_EQ(run.val[0].val_loss, 3.25);
  EXPECT_EQ(series_paths(render_report(run))["train loss"].counted, 5);
}

TEST(ReportRead, TheMfuChartSaysWhichPeakAndWhenAStepRaisedIt) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl",
              {R"({"type":"run_start","step":0,"world":1,"peak_gflops":50.0,)"
               R"("peak_source":"kiln bench peak","peak_date":"2026-11-25"})",
               train_line(1, 5.0),
               R"({"type":"peak_raised","step":2,"peak_gflops":61.5,"was_gflops":50.0})",
               train_line(2, 4.0),
               R"({"type":"peak_raised","step":3,"peak_gflops":62.25,"was_gflops":61.5})",
               train_line(3, 3.0)});
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.peak_raises.size(), 2u);
  const std::string page = render_report(run);
  EXPECT_NE(page.find("Against a peak of 50.0 GFLOP/s per process (cached by kiln bench peak on "
                      "2026-11-25)."),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("Step 2 ran faster than the peak (50.0 GFLOP/s per process)"),
            std::string::npos);
  EXPECT_NE(page.find("62.2 GFLOP/s from step 3 on"), std::string::npos);
  EXPECT_EQ(page.find("unknown to this kiln"), std::string::npos);  // its own record
}

TEST(ReportRead, NonFiniteStepsAreMarkedNotDrawn) {
  TempDir dir;
  write_lines(
      dir / "metrics.jsonl",
      {train_line(1, 5.0), train_line(2, 4.0),
       R"({"type":"train","step":3,"loss":null,"lr":0.001,"grad_norm":null,"skipped":true})",
       train_line(4, 3.0)});
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.train.size(), 4u);
  EXPECT_TRUE(std::isnan(run.train[2].loss));
  EXPECT_TRUE(run.train[2].skipped);
  std::string html = render_report(run);
  auto paths = series_paths(html);
  EXPECT_EQ(paths["train loss"].counted, 3);
  EXPECT_EQ(paths["grad norm"].counted, 3);
  EXPECT_EQ(paths["lr"].counted, 4);
  EXPECT_NE(html.find("<title>step 3 skipped (non-finite)</title>"), std::string::npos);
  EXPECT_NE(html.find("1 step(s) had a non-finite loss"), std::string::npos);
}

TEST(ReportRead, AnOlderRunWithOnlyTrainValAndSampleRecordsStillReports) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl",
              {train_line(1, 5.0), train_line(2, 4.0), R"({"type":"val","step":2,"val_loss":4.5})",
               R"({"type":"sample","step":2,"text":"</td></tr><script>x()</script>"})",
               R"({"type":"future_record","step":2})"});
  // The config comes from the newest checkpoint when no run_start record has it.
  fs::create_directories(dir / "checkpoints/step_00000002");
  std::ofstream(dir / "checkpoints/step_00000002/trainer_state.json")
      << R"({"step":2,"config":{"train":{"steps":2,"lr":0.003},"model":{"n_layer":1}}})";
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.checkpoints.size(), 1u);
  EXPECT_EQ(run.checkpoints[0].step, 2);
  EXPECT_TRUE(run.checkpoints[0].on_disk);
  EXPECT_TRUE(std::isnan(run.checkpoints[0].seconds));
  EXPECT_EQ(run.config["train"]["lr"], 0.003);
  std::string html = render_report(run);
  EXPECT_NE(html.find("<td>train.lr</td><td>0.003</td>"), std::string::npos);
  EXPECT_NE(html.find("&lt;/td&gt;&lt;/tr&gt;&lt;script&gt;x()&lt;/script&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("1 record(s) of type &quot;future_record&quot;"), std::string::npos);
  EXPECT_NE(html.find("id=\"memory\"><figcaption>Memory per rank by kind</figcaption>\n<p "
                      "class=\"empty\">Not recorded"),
            std::string::npos);
  auto paths = series_paths(html);
  EXPECT_EQ(paths["train loss"].counted, 2);
  EXPECT_EQ(paths["val loss"].counted, 1);
  EXPECT_EQ(paths.count("forward"), 0u);  // parts not recorded: no empty series
}

TEST(ReportRead, AnEmptyMetricsFileGivesAPageThatSaysSo) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl", {});
  std::string html = report_html(dir.path());
  EXPECT_NE(html.find("metrics.jsonl has no training steps yet."), std::string::npos);
  EXPECT_TRUE(series_paths(html).empty());
  EXPECT_NE(html.find("</html>"), std::string::npos);
}

TEST(ReportCli, WritesThePageAndFailsWithTheRunDirectoryNamed) {
  TempDir dir;
  auto r = run_kiln("report " + (dir / "missing"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("kiln: error: " + (dir / "missing") + " is not a directory"),
            std::string::npos)
      << r.output;
  write_lines(dir / "metrics.jsonl", {train_line(1, 3.0), "not json", train_line(2, 2.0)});
  r = run_kiln("report " + dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(dir / "metrics.jsonl:2: not JSON"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  write_lines(dir / "metrics.jsonl", {train_line(1, 3.0), train_line(2, 2.0)});
  r = run_kiln("report " + dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + (dir / "report.html")), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir / "report.html", "report"), report_html(dir.path()));
  // The page is named after the run directory however it was written.
  const std::string name = fs::path(dir.path()).filename().string();
  for (const std::string& d : {dir.path(), dir.path() + "/", dir.path() + "/."})
    EXPECT_NE(report_html(d).find("<title>kiln run: " + name + "</title>"), std::string::npos) << d;
}

TEST(ReportRead, OnePointIsDrawnAsAMarker) {
  TempDir dir;
  write_lines(dir / "metrics.jsonl", {train_line(1, 5.0)});
  std::string html = report_html(dir.path());
  EXPECT_EQ(series_paths(html)["train loss"].counted, 1);
  EXPECT_NE(html.find("<title>train loss: last 5 at step 1; lowest 5 at step 1; highest 5 at "
                      "step 1</title></path>"),
            std::string::npos);
  EXPECT_NE(html.find("<title>train loss 5 at step 1</title></circle>"), std::string::npos);
}

TEST(ReportRead, EveryRecordTypeReachesThePage) {
  TempDir dir;
  write_full_run(dir.path(), 200, 4);
  RunData run = read_run(dir.path());
  EXPECT_EQ(run.train.size(), 200u);
  EXPECT_EQ(run.superseded, 3);  // steps 121..123 ran again after the restart
  EXPECT_EQ(run.runs.size(), 2u);
  ASSERT_EQ(run.restarts.size(), 1u);
  EXPECT_EQ(run.restarts[0].rank, 1);
  ASSERT_EQ(run.memory.size(), 1u);
  EXPECT_EQ(run.memory[0].bytes.size(), 6u);
  EXPECT_EQ(run.checkpoints.size(), 10u);
  EXPECT_FALSE(run.checkpoints[0].on_disk);  // the fixture has no checkpoint directories
  EXPECT_EQ(run.train[10].rank_ms.size(), 4u);
  EXPECT_EQ(run.rank_field, "rank_step_ms");
  ASSERT_EQ(run.stops.size(), 1u);
  EXPECT_EQ(run.stops[0].signal, 10);
  std::string html = render_report(run);
  auto paths = series_paths(html);
  for (const char* s : {"train loss", "train loss, EMA 3 steps", "val loss", "lr", "grad norm",
                        "tokens/s", "MFU", "step", "forward", "backward", "optimizer", "comm wait",
                        "data", "fastest rank", "median rank", "slowest rank"}) {
    ASSERT_EQ(paths.count(s), 1u) << s;
    EXPECT_EQ(paths[s].counted, paths[s].declared) << s;
  }
  EXPECT_EQ(paths["train loss"].counted, 199);  // step 100 was skipped
  EXPECT_EQ(paths["val loss"].counted, 10);
  EXPECT_NE(html.find("Rank 3 was the slowest in 200 of 200 steps"), std::string::npos);
  EXPECT_NE(html.find("Step time across ranks</figcaption>"), std::string::npos);
  EXPECT_NE(html.find("launched by slurm; Slurm job 4242; after 1 restart(s)"), std::string::npos);
  EXPECT_NE(html.find("<td>stopped</td><td>200</td><td></td><td>signal 10 ("), std::string::npos);
  EXPECT_NE(figure(html, "loss").find(">stopped</text>"), std::string::npos);
  EXPECT_NE(html.find("<td>killed by signal 9</td><td>rank 1 &lt;died&gt; &amp; came back</td>"),
            std::string::npos);
  // Progress over wall time: the steps in the order they were reached, the restart marked.
  std::string progress = figure(html, "progress");
  EXPECT_NE(progress.find(">seconds since the first record</text>"), std::string::npos);
  EXPECT_NE(progress.find(">restart (rank 1)</text>"), std::string::npos);
  EXPECT_EQ(paths["step reached"].counted, 200);
  EXPECT_NE(figure(html, "loss").find(">restart (rank 1)</text>"), std::string::npos);
  EXPECT_NE(figure(html, "loss").find(">resume</text>"), std::string::npos);
  EXPECT_NE(html.find(">activations</text>"), std::string::npos);
  EXPECT_NE(html.find("2.9 MiB"), std::string::npos);  // 3,000,000 bytes of activations
  EXPECT_NE(html.find("<td>train.sample_prompt</td><td>&lt;b&gt;&amp;</td>"), std::string::npos);
  EXPECT_NE(html.find("The last line of metrics.jsonl"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(ReportRead, EveryLineInAChartDiffersInMoreThanColour) {
  // Dash pattern, width or opacity tell the lines of one chart apart in grey; hatches the bars.
  TempDir dir;
  write_full_run(dir.path(), 300, 4);
  std::string html = report_html(dir.path());
  auto attr = [](const std::string& tag, const std::string& name) {
    size_t p = tag.find(" " + name + "=\"");
    return p == std::string::npos
               ? ""
               : tag.substr(p + name.size() + 3,
                            tag.find('"', p + name.size() + 3) - p - name.size() - 3);
  };
  int charts = 0;
  for (size_t f = html.find("<figure"); f != std::string::npos; f = html.find("<figure", f + 1)) {
    std::string fig = html.substr(f, html.find("</figure>", f) - f);
    std::set<std::string> looks, fills;
    int lines = 0, bars = 0;
    for (size_t p = fig.find("<path class=\"series\""); p != std::string::npos;
         p = fig.find("<path class=\"series\"", p + 1)) {
      std::string tag = fig.substr(p, fig.find('>', p) - p);
      looks.insert(attr(tag, "stroke-dasharray") + "|" + attr(tag, "stroke-width") + "|" +
                   attr(tag, "stroke-opacity"));
      lines++;
    }
    for (size_t p = fig.find("<rect class=\"bar\""); p != std::string::npos;
         p = fig.find("<rect class=\"bar\"", p + 1)) {
      fills.insert(attr(fig.substr(p, fig.find('>', p) - p), "fill"));
      bars++;
    }
    EXPECT_EQ(looks.size(), static_cast<size_t>(lines)) << fig.substr(0, 120);
    if (fig.find("id=\"ranks\"") == std::string::npos) {  // ranks: one hatch marks the slowest
      EXPECT_EQ(fills.size(), static_cast<size_t>(bars)) << fig.substr(0, 120);
    }
    charts += lines > 1 || bars > 1;
  }
  EXPECT_GE(charts, 5);
}

TEST(ReportRead, PerRankComputeTimesAreShownAsSuch) {
  TempDir dir;
  write_full_run(dir.path(), 50, 3, "rank_compute_ms");
  RunData run = read_run(dir.path());
  EXPECT_EQ(run.rank_field, "rank_compute_ms");
  EXPECT_EQ(run.train[0].rank_ms.size(), 3u);
  std::string html = render_report(run);
  EXPECT_NE(html.find("Compute time across ranks (waits excluded)</figcaption>"),
            std::string::npos);
  EXPECT_NE(html.find("Median compute time per rank</figcaption>"), std::string::npos);
  EXPECT_NE(html.find("Rank 2 was the slowest in 50 of 50 steps"), std::string::npos);
  EXPECT_EQ(series_paths(html)["slowest rank"].counted, 50);
}

TEST(ReportRead, LongTablesKeepTheNewestRows) {
  TempDir dir;
  std::vector<std::string> l;
  for (int s = 1; s <= 300; s++) {
    l.push_back(train_line(s, 3.0));
    l.push_back(fmt::format(R"({{"type":"sample","step":{},"text":"sample of step {}"}})", s, s));
    l.push_back(fmt::format(R"({{"type":"checkpoint","step":{},"seconds":{},"dir":"c{}"}})", s,
                            0.5 + s % 3, s));
  }
  write_lines(dir / "metrics.jsonl", l);
  std::string html = report_html(dir.path());
  EXPECT_NE(html.find("The newest 100 of 300 samples"), std::string::npos);
  EXPECT_NE(html.find("The newest 100 of 300 checkpoints"), std::string::npos);
  EXPECT_NE(html.find("<td>sample of step 300</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>sample of step 201</td>"), std::string::npos);
  EXPECT_EQ(html.find("<td>sample of step 200</td>"), std::string::npos);
  EXPECT_LT(html.find("<td>sample of step 300</td>"), html.find("<td>sample of step 299</td>"));
  EXPECT_NE(html.find("<td>c201</td>"), std::string::npos);
  EXPECT_EQ(html.find("<td>c200</td>"), std::string::npos);
  EXPECT_EQ(series_paths(html)["write time"].counted, 300);  // the chart has every checkpoint
  // A constant loss (its EMA differs from it only in rounding) still gets a labelled axis.
  EXPECT_GE(tick_labels(figure(html, "loss"), true).size(), 3u);
}

TEST(ReportRead, RandomRecordsEitherReportOrFailWithAKilnError) {
  // Fields of every record type with values of random types: the page is written, or a
  // kiln::Error names the line; nothing else escapes, nothing hangs.
  const char* types[] = {"train",      "val",     "sample",  "run_start",   "memory",
                         "checkpoint", "restart", "stopped", "peak_raised", "other"};
  const char* keys[] = {
      "step",      "loss",         "lr",       "grad_norm",    "tokens_per_sec",  "step_ms",
      "mfu",       "forward_ms",   "skipped",  "rank_step_ms", "rank_compute_ms", "val_loss",
      "text",      "time",         "world",    "config",       "resumed_from",    "params",
      "peak_rss",  "seconds",      "dir",      "rank",         "after_step",      "how",
      "signal",    "slurm_job_id", "restarts", "peak_gflops",  "peak_source",     "peak_date",
      "was_gflops"};
  Rng rng(11);
  auto value = [&]() -> nlohmann::json {
    if (rng.below(100) < 93) return static_cast<int64_t>(rng.below(50));  // mostly plausible
    switch (rng.below(10)) {
      case 0:
        return nullptr;
      case 1:
        return static_cast<int64_t>(rng.below(1000)) - 10;
      case 2:
        return (rng.uniform() - 0.5) * std::pow(10.0, rng.uniform() * 40 - 20);
      case 3:
        return "<s>" + std::to_string(rng.below(100));
      case 4:
        return rng.below(2) == 1;
      case 5:
        return nlohmann::json::array({1.5, nullptr, 2});
      case 6:
        return nlohmann::json{{"train", {{"steps", 5}}}, {"x", 1}};
      case 7:
        return 3.0;
      default:
        return static_cast<int64_t>(rng.below(50));
    }
  };
  int errors = 0, pages = 0;
  for (int file = 0; file < 150; file++) {
    TempDir dir;
    std::vector<std::string> lines;
    for (int i = 0; i < 12; i++) {
      nlohmann::json j = {{"type", types[rng.below(9)]}};
      // Mostly well-formed: a step, and a few other fields.
      if (rng.below(10) > 0) j["step"] = static_cast<int64_t>(rng.below(30));
      for (int k = 0, n = static_cast<int>(rng.below(6)); k < n; k++)
        j[keys[rng.below(27)]] = value();
      lines.push_back(j.dump());
    }
    write_lines(dir / "metrics.jsonl", lines);
    try {
      std::string html = report_html(dir.path());
      EXPECT_NE(html.find("</html>"), std::string::npos);
      pages++;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("metrics.jsonl:"), std::string::npos) << e.what();
      errors++;
    }
  }
  EXPECT_GT(pages, 10);
  EXPECT_GT(errors, 10);
}

TEST(ReportRead, AHugeRunIsDecimatedToAtMost2000PointsPerSeries) {
  TempDir dir;
  {
    std::ofstream f(dir / "metrics.jsonl");
    for (int s = 1; s <= 100000; s++)
      f << train_line(s, s == 65432 ? 50.0 : 3.0 + (s % 10) * 0.01) << "\n";
  }
  RunData run = read_run(dir.path());
  ASSERT_EQ(run.train.size(), 100000u);
  std::string html = render_report(run);
  auto paths = series_paths(html);
  EXPECT_LE(paths["train loss"].counted, 2000);
  EXPECT_GE(paths["train loss"].counted, 1000);
  EXPECT_EQ(paths["train loss"].counted, paths["train loss"].declared);
  EXPECT_LT(html.size(), 2u << 20) << "the page stays small";
  // The spike is the highest point: a vertex sits at the top of the plot area (y = 34 + 5% pad).
  std::string d;
  size_t p = html.find("data-series=\"train loss\"");
  p = html.find(" d=\"", p) + 4;
  d = html.substr(p, html.find('"', p) - p);
  double top = 1e9;
  for (size_t i = 0; (i = d.find_first_of("ML", i)) != std::string::npos; i++) {
    double x, y;
    ASSERT_EQ(std::sscanf(d.c_str() + i + 1, "%lf %lf", &x, &y), 2);
    top = std::min(top, y);
  }
  EXPECT_LT(top, 34 + 0.06 * (300 - 34 - 46));
}

// Prepares byte-level data and trains a tiny model into dir/run for `steps` steps (validation and
// a sample every 6, a checkpoint every 6); extra arguments go to `kiln train`.
void train_tiny(const TempDir& dir, int steps, const std::string& extra = "") {
  if (!fs::exists(dir / "data/manifest.json")) {
    ASSERT_EQ(kiln::testing::prepare_pangram_data(dir.path(), 300, " --val-fraction 0.2"), "");
  }
  std::ofstream(dir / "tiny.toml")
      << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nblock_size = 32\nvocab_size = 257\n"
         "[train]\nbatch_size = 2\nseq_len = 16\nsteps = "
      << steps
      << "\nlr = 3e-3\nval_every = 6\n"
         "val_batches = 2\nsample_tokens = 24\nsample_prompt = \"<b>\"\nout_dir = \""
      << (dir / "run") << "\"\n[data]\ntrain = \"" << (dir / "data/train_*.bin") << "\"\nval = \""
      << (dir / "data/val_*.bin")
      << "\"\ntokenizer = \"bytes\"\n[checkpoint]\nevery = 6\n[hardware]\npeak_gflops = 100.0\n";
  auto r = run_kiln("train " + (dir / "tiny.toml") + " " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

TEST(ReportCli, AResumedRealRunIsOneCurveWithBothCheckpoints) {
  TempDir dir;
  ASSERT_NO_FATAL_FAILURE(train_tiny(dir, 6));
  // As if the first run died while writing its last line (the step-6 checkpoint record, written
  // after the sample): the resumed run ends the torn line and starts its own.
  const std::string metrics = dir / "run/metrics.jsonl";
  fs::resize_file(metrics, fs::file_size(metrics) - 10);
  ASSERT_NO_FATAL_FAILURE(train_tiny(dir, 12, "--resume"));
  auto r = run_kiln("report " + (dir / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  RunData run = read_run(dir / "run");
  ASSERT_EQ(run.train.size(), 12u);
  for (size_t i = 0; i < 12; i++) EXPECT_EQ(run.train[i].step, static_cast<int64_t>(i + 1));
  EXPECT_EQ(run.superseded, 0);
  ASSERT_EQ(run.checkpoints.size(), 2u);
  EXPECT_EQ(run.checkpoints[0].step, 6);
  EXPECT_EQ(run.checkpoints[1].step, 12);
  EXPECT_TRUE(run.checkpoints[0].on_disk);
  EXPECT_TRUE(run.checkpoints[1].on_disk);
  EXPECT_EQ(run.val.size(), 2u);
  // The torn record is gone, the records on either side of it are read.
  ASSERT_EQ(run.samples.size(), 2u);
  EXPECT_EQ(run.samples[0].step, 6);
  EXPECT_EQ(run.samples[1].step, 12);
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_NE(run.notes[0].find("is a record cut short"), std::string::npos) << run.notes[0];
  EXPECT_EQ(run.config["train"]["steps"], 12);  // the resumed run's config
  std::string html = read_file(dir / "run/report.html", "report");
  EXPECT_EQ(series_paths(html)["train loss"].counted, 12);
  EXPECT_NE(html.find("<td>train.steps</td><td>12</td>"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// In a real browser

std::string chromium_binary() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    std::string cmd = std::string("command -v ") + name + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    char buf[512] = {0};
    std::string path = fgets(buf, sizeof buf, p) ? buf : "";
    pclose(p);
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (!path.empty()) return path;
  }
  return "";
}

// Runs headless Chromium on a file with extra arguments; returns its stdout.
std::string run_chromium(const std::string& bin, const TempDir& tmp, const std::string& page,
                         const std::string& args) {
  static int n = 0;
  std::string profile = tmp / fmt::format("profile-{}", n++);
  std::string out = tmp / "chromium.out";
  // Without the background-networking flags Chromium keeps calling home on a closed network;
  // without --disable-dev-shm-usage its renderer dies in containers with a small /dev/shm.
  std::string cmd = fmt::format(
      "timeout 120 {} --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--disable-dev-shm-usage --user-data-dir={} --window-size=1200,2000 {} file://{} > {} 2> {}",
      bin, profile, args, fs::absolute(page).string(), out, tmp / "chromium.err");
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << read_file(tmp / "chromium.err", "chromium log");
  return read_file(out, "chromium output");
}

// URLs the page itself asked for: Chromium's own background requests have no origin.
std::vector<std::string> page_requests(const std::string& netlog_path) {
  auto j = nlohmann::json::parse(read_file(netlog_path, "net log"));
  int start_job = j.at("constants").at("logEventTypes").at("URL_REQUEST_START_JOB").get<int>();
  std::vector<std::string> urls;
  for (auto& e : j.at("events")) {
    if (e.value("type", -1) != start_job || !e.contains("params")) continue;
    auto& p = e["params"];
    if (p.contains("url") && p.value("initiator", "") != "not an origin")
      urls.push_back(p["url"].get<std::string>());
  }
  return urls;
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

Image read_png(const std::string& path) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&im, path.c_str())) return out;
  im.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, nullptr, out.rgb.data(), 0, nullptr)) return {};
  out.width = static_cast<int>(im.width);
  out.height = static_cast<int>(im.height);
  return out;
}

struct PixelCount {
  int64_t not_background = 0, series_blue = 0;
  size_t colours = 0;
};

PixelCount count_pixels(const Image& im) {
  PixelCount c;
  std::set<uint32_t> colours;
  for (size_t i = 0; i + 2 < im.rgb.size(); i += 3) {
    uint8_t r = im.rgb[i], g = im.rgb[i + 1], b = im.rgb[i + 2];
    colours.insert(r << 16 | g << 8 | b);
    bool page_bg = r == 0xf6 && g == 0xf7 && b == 0xf9, white = r == 255 && g == 255 && b == 255;
    c.not_background += !page_bg && !white;
    // The first series colour, #1f5fbf, or close to it (antialiasing).
    c.series_blue += std::abs(r - 0x1f) < 24 && std::abs(g - 0x5f) < 24 && std::abs(b - 0xbf) < 24;
  }
  c.colours = colours.size();
  return c;
}

class ReportBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = chromium_binary();
    if (chromium_.empty())
      GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs Debian's chromium); "
                      "the page is not checked in a browser";
  }
  std::string chromium_;
  TempDir tmp_;
};

TEST_F(ReportBrowser, TheDetectorOfExternalRequestsSeesThem) {
  // A page that does load from the network, to show page_requests() would catch one.
  std::ofstream(tmp_ / "leaky.html")
      << "<!DOCTYPE html><html><body><img src=\"http://127.0.0.1:9/x.png\"></body></html>\n";
  run_chromium(chromium_, tmp_, tmp_ / "leaky.html",
               "--dump-dom --log-net-log=" + (tmp_ / "leaky.json"));
  auto urls = page_requests(tmp_ / "leaky.json");
  ASSERT_EQ(urls.size(), 1u);
  EXPECT_EQ(urls[0], "http://127.0.0.1:9/x.png");
}

TEST_F(ReportBrowser, ATinyTrainingRunsReportRendersWithItsCurvesAndNoRequests) {
  // Train a real tiny model for 12 steps (as tests/e2e/cli_test.cpp does), then report on it.
  ASSERT_NO_FATAL_FAILURE(train_tiny(tmp_, 12));
  auto r = run_kiln("report " + (tmp_ / "run") + " -o " + (tmp_ / "page.html"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrote " + (tmp_ / "page.html")), std::string::npos) << r.output;
  std::string html = read_file(tmp_ / "page.html", "report");
  // The samples of a byte-level model hold control characters, which HTML does not allow.
  for (char c : html)
    ASSERT_TRUE(static_cast<unsigned char>(c) >= 0x20 || c == '\n' || c == '\t' || c == '\r')
        << "control character " << int(c) << " in the page";
  for (const char* external :
       {"<script", "<link", "<img", "<iframe", "src=", "url(http", "@import", "href=\"http"})
    EXPECT_EQ(html.find(external), std::string::npos) << external;

  // What Chromium built from it: the SVG paths with one vertex per step.
  std::string dom = run_chromium(chromium_, tmp_, tmp_ / "page.html",
                                 "--dump-dom --log-net-log=" + (tmp_ / "net.json"));
  EXPECT_NE(dom.find("<svg"), std::string::npos) << dom.substr(0, 2000);
  auto paths = series_paths(dom);
  ASSERT_EQ(paths.count("train loss"), 1u) << dom.substr(0, 2000);
  EXPECT_EQ(paths["train loss"].counted, 12);
  EXPECT_EQ(paths["train loss"].declared, 12);
  EXPECT_EQ(paths["val loss"].counted, 2);
  EXPECT_EQ(paths["lr"].counted, 12);
  EXPECT_EQ(paths["tokens/s"].counted, 12);
  EXPECT_EQ(paths["MFU"].counted, 12);
  // The curve is the data: pixels are one affine map of (step, loss) as metrics.jsonl has them,
  // and the axis labels sit where that map puts their values.
  std::vector<Point> data;
  {
    std::ifstream f(tmp_ / "run/metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
      auto j = nlohmann::json::parse(line);
      if (j["type"] == "train") data.push_back({j["step"].get<double>(), j["loss"].get<double>()});
    }
  }
  std::string fig = figure(dom, "loss");
  auto px = path_points(fig, "train loss");
  ASSERT_EQ(px.size(), data.size());
  auto lo = std::min_element(data.begin(), data.end(), [](auto& a, auto& b) { return a.y < b.y; });
  auto hi = std::max_element(data.begin(), data.end(), [](auto& a, auto& b) { return a.y < b.y; });
  const double sx = (px.back().x - px.front().x) / (data.back().x - data.front().x);
  const double sy = (px[hi - data.begin()].y - px[lo - data.begin()].y) / (hi->y - lo->y);
  auto map_x = [&](double step) { return px.front().x + sx * (step - data.front().x); };
  auto map_y = [&](double loss) { return px[lo - data.begin()].y + sy * (loss - lo->y); };
  EXPECT_GT(sx, 0);
  EXPECT_LT(sy, 0);  // up is a higher loss
  for (size_t i = 0; i < data.size(); i++) {
    EXPECT_NEAR(px[i].x, map_x(data[i].x), 0.11) << i;
    EXPECT_NEAR(px[i].y, map_y(data[i].y), 0.11) << i;
  }
  auto yt = tick_labels(fig, true), xt = tick_labels(fig, false);
  EXPECT_GE(yt.size(), 3u);
  EXPECT_GE(xt.size(), 3u);
  for (auto& t : yt) EXPECT_NEAR(t.y, map_y(t.x), 0.11) << "y tick " << t.x;
  for (auto& t : xt) EXPECT_NEAR(t.y, map_x(t.x), 0.11) << "x tick " << t.x;

  EXPECT_NE(dom.find("<td>train.steps</td><td>12</td>"), std::string::npos);
  EXPECT_NE(dom.find("<td>train.sample_prompt</td><td>&lt;b&gt;</td>"), std::string::npos);
  EXPECT_NE(dom.find("step_00000012"), std::string::npos);  // the checkpoints table
  EXPECT_EQ(page_requests(tmp_ / "net.json"), std::vector<std::string>{});

  // And what it drew: a page of charts, not a blank or an error page.
  run_chromium(chromium_, tmp_, tmp_ / "page.html", "--screenshot=" + (tmp_ / "page.png"));
  Image im = read_png(tmp_ / "page.png");
  ASSERT_EQ(im.width, 1200) << "cannot read the screenshot";
  ASSERT_EQ(im.height, 2000);
  PixelCount c = count_pixels(im);
  EXPECT_GT(c.not_background, int64_t{1200} * 2000 / 20) << "less than 5% of the page is drawn";
  EXPECT_GT(c.colours, 100u);
  EXPECT_GT(c.series_blue, 2000) << "the curves are not on the screenshot";
}

TEST_F(ReportBrowser, AFullRunsPageDrawsEveryPanel) {
  write_full_run(tmp_.path(), 400, 4);
  std::string page = tmp_ / "full.html";
  write_file_atomic(page, report_html(tmp_.path()));
  std::string dom = run_chromium(chromium_, tmp_, page, "--dump-dom");
  auto paths = series_paths(dom);
  EXPECT_EQ(paths.size(), 18u);
  EXPECT_EQ(paths["slowest rank"].counted, 400);
  EXPECT_NE(dom.find("Rank 3 was the slowest"), std::string::npos);
  run_chromium(chromium_, tmp_, page, "--screenshot=" + (tmp_ / "full.png"));
  Image im = read_png(tmp_ / "full.png");
  ASSERT_EQ(im.width, 1200);
  PixelCount c = count_pixels(im);
  EXPECT_GT(c.not_background, int64_t{1200} * 2000 / 20);
  EXPECT_GT(c.series_blue, 2000);
}

}  // namespace
}  // namespace kiln
