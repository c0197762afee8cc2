#include "obs/report_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include "core/error.h"
#include "obs/metrics_log.h"

namespace kiln {

std::vector<Point> decimate_min_max(const std::vector<Point>& pts, size_t max_points) {
  KILN_CHECK(max_points >= 4);
  const size_t n = pts.size();
  if (n <= max_points) return pts;
  std::vector<Point> out;
  out.reserve(max_points);
  out.push_back(pts[0]);
  // The interior points 1 .. n-2 split into equal runs; each gives its lowest and highest.
  const size_t buckets = (max_points - 2) / 2, inner = n - 2;
  for (size_t b = 0; b < buckets; b++) {
    size_t lo = 1 + b * inner / buckets, hi = 1 + (b + 1) * inner / buckets;
    if (lo >= hi) continue;
    size_t imin = lo, imax = lo;
    for (size_t i = lo; i < hi; i++) {
      if (pts[i].y < pts[imin].y) imin = i;
      if (pts[i].y > pts[imax].y) imax = i;
    }
    out.push_back(pts[std::min(imin, imax)]);
    if (imin != imax) out.push_back(pts[std::max(imin, imax)]);
  }
  out.push_back(pts[n - 1]);
  return out;
}

std::vector<Point> ema_smooth(const std::vector<Point>& pts, double window) {
  // alpha = 2 / (window + 1), the usual span convention; dividing by the weight seen so far
  // removes the start-up bias towards 0 (as TensorBoard's smoothing does).
  const double alpha = 2 / (window + 1);
  std::vector<Point> out;
  out.reserve(pts.size());
  double num = 0, den = 0;
  for (auto& p : pts) {
    num = (1 - alpha) * num + alpha * p.y;
    den = (1 - alpha) * den + alpha;
    out.push_back({p.x, num / den});
  }
  return out;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  // A span below double precision at this magnitude has no distinct round values.
  if (hi - lo <= 1e-12 * std::max(std::abs(lo), std::abs(hi))) return ticks;
  double raw = (hi - lo) / std::max(1, target);
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  // Round to the nearest of 1, 2, 5, 10 (geometrically), as d3's ticks do.
  double e = raw / p;
  double step = p * (e >= std::sqrt(50.0)   ? 10
                     : e >= std::sqrt(10.0) ? 5
                     : e >= std::sqrt(2.0)  ? 2
                                            : 1);
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && ticks.size() < 100;
       k++)
    ticks.push_back(std::abs(k * step) < step * 1e-9 ? 0.0 : k * step);
  return ticks;
}

namespace report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

// ---------------------------------------------------------------------------------------------
// Formatting

std::string fmt_si(double v, int digits) {
  if (!std::isfinite(v)) return "–";
  double a = std::abs(v);
  const char* suffix = "";
  double d = 1;
  if (a >= 1e12)
    suffix = "T", d = 1e12;
  else if (a >= 1e9)
    suffix = "G", d = 1e9;
  else if (a >= 1e6)
    suffix = "M", d = 1e6;
  else if (a >= 1e4)
    suffix = "k", d = 1e3;
  return fmt::format("{:.{}g}{}", v / d, digits, suffix);
}

// A tick label: as many decimals as the tick spacing needs.
std::string fmt_tick(double v, double spacing) {
  if (std::abs(spacing) >= 1000 || std::abs(v) >= 1e5) return fmt_si(v, 4);
  if (spacing >= 1) return fmt::format("{:.0f}", v);
  if (spacing >= 1e-6) {
    int dec = static_cast<int>(std::ceil(-std::log10(spacing) - 1e-9));
    return fmt::format("{:.{}f}", v, dec);
  }
  return v == 0 ? "0" : fmt::format("{:.1e}", v);
}

std::string fmt_bytes(double b) {
  if (!std::isfinite(b)) return "–";
  if (b >= 1073741824.0) return fmt::format("{:.2f} GiB", b / 1073741824.0);
  if (b >= 1048576.0) return fmt::format("{:.1f} MiB", b / 1048576.0);
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

// format_duration's clock, with days for long runs.
std::string fmt_duration(double seconds) {
  if (std::isfinite(seconds) && seconds >= 2 * 86400) {
    auto h = static_cast<int64_t>(seconds / 3600 + 0.5);
    return fmt::format("{}d{:02d}h", h / 24, h % 24);
  }
  return format_duration(seconds);
}

std::string fmt_time(double unix_seconds) {
  if (!std::isfinite(unix_seconds)) return "–";
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return std::string(buf) + " UTC";
}

std::string fmt_num(double v, const char* f) {
  if (!std::isfinite(v)) return "–";
  return fmt::format(fmt::runtime(f), v);
}

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return kNaN;
  size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  double hi = v[m];
  if (v.size() % 2) return hi;
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + m));
}

// ---------------------------------------------------------------------------------------------
// SVG charts. Every series has a colour, a dash pattern and (for bars) a hatch, so the page reads
// in grey too.

// Hatch patterns, defined once per page in a hidden SVG.
std::string hatch_defs() {
  std::string s =
      "<svg width=\"0\" height=\"0\" style=\"position:absolute\" aria-hidden=\"true\"><defs>";
  const char* marks[] = {
      "",                                                                        // solid
      "<path d=\"M0 8 L8 0\" stroke=\"#fff\" stroke-width=\"2\"/>",              // diagonal
      "<circle cx=\"4\" cy=\"4\" r=\"1.6\" fill=\"#fff\"/>",                     // dots
      "<path d=\"M0 4 H8\" stroke=\"#fff\" stroke-width=\"2\"/>",                // horizontal
      "<path d=\"M0 0 L8 8 M0 8 L8 0\" stroke=\"#fff\" stroke-width=\"1.5\"/>",  // cross
      "<path d=\"M4 0 V8\" stroke=\"#fff\" stroke-width=\"2\"/>",                // vertical
      "<path d=\"M0 0 L8 8\" stroke=\"#fff\" stroke-width=\"2\"/>",              // back diagonal
      "<path d=\"M0 2 H8 M0 6 H8 M2 0 V8 M6 0 V8\" stroke=\"#fff\" stroke-width=\"1\"/>",  // grid
  };
  for (int i = 0; i < kNumStyles; i++)
    s += fmt::format(
        "<pattern id=\"{}\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\"><rect "
        "width=\"8\" height=\"8\" fill=\"{}\"/>{}</pattern>",
        kStyles[i].hatch, kStyles[i].color, marks[i]);
  return s + "</defs></svg>\n";
}

// The tooltip of a line: its last, lowest and highest values (decimation keeps all three).
std::string series_summary(const Series& s, const LineChart& c) {
  auto at = [&](const Point& p) {
    if (c.integer_x) return fmt::format("{:.5g} at step {}", p.y, p.x);
    return fmt::format("{:.5g} at {:.4g} {}", p.y, p.x, c.x_label.substr(0, c.x_label.find(' ')));
  };
  auto [lo, hi] = std::minmax_element(s.pts.begin(), s.pts.end(),
                                      [](const Point& a, const Point& b) { return a.y < b.y; });
  return fmt::format("{}: last {}; lowest {}; highest {}", s.name, at(s.pts.back()), at(*lo),
                     at(*hi));
}

std::string render_line_chart(const LineChart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  size_t total = 0;
  for (auto& s : c.series)
    for (auto& p : s.pts) {
      x0 = std::min(x0, p.x), x1 = std::max(x1, p.x);
      y0 = std::min(y0, p.y), y1 = std::max(y1, p.y);
      total++;
    }
  std::string out = fmt::format("<figure class=\"chart\" id=\"{}\"><figcaption>{}</figcaption>\n",
                                c.id, html_escape(c.title));
  if (total == 0) {
    return out + "<p class=\"empty\">Not recorded in this run.</p></figure>\n";
  }
  for (double s : c.skipped) x0 = std::min(x0, s), x1 = std::max(x1, s);
  for (auto& v : c.vlines) x0 = std::min(x0, v.x), x1 = std::max(x1, v.x);
  if (c.from_zero) y0 = std::min(y0, 0.0);
  if (x1 - x0 <= 1e-9 * std::max(std::abs(x0), std::abs(x1))) x0 -= 1, x1 += 1;
  // A flat series (or one that differs only in rounding, like the EMA of a constant) gets a
  // band around its value.
  if (y1 - y0 <= 1e-9 * std::max(std::abs(y0), std::abs(y1))) {
    double d = std::abs(y0) > 0 ? std::abs(y0) * 0.1 : 1;
    if (!(c.from_zero && y0 >= 0 && y0 - d < 0)) y0 -= d;
    y1 += d;
  } else {
    double pad = (y1 - y0) * 0.05;
    y1 += pad;
    if (!(c.from_zero && y0 == 0)) y0 -= pad;
  }
  const double pw = kW - kL - kR, ph = kH - kT - kB;
  auto px = [&](double x) { return kL + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return kT + (1 - (y - y0) / (y1 - y0)) * ph; };

  out += fmt::format(
      "<svg viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"{2}\">\n<clipPath id=\"clip-{3}\"><rect x=\"{4}\" y=\"{5}\" width=\"{6}\" "
      "height=\"{7}\"/></clipPath>\n<rect class=\"plot\" x=\"{4}\" y=\"{5}\" width=\"{6}\" "
      "height=\"{7}\"/>\n",
      kW, kH, html_escape(c.title), c.id, kL, kT, pw, ph);
  // Grid and ticks.
  auto yt = nice_ticks(y0, y1, 5), xt = nice_ticks(x0, x1, 6);
  double ys = yt.size() > 1 ? yt[1] - yt[0] : 1, xs = xt.size() > 1 ? xt[1] - xt[0] : 1;
  if (c.integer_x && xs < 1 && x1 - x0 < 20) {
    xt.clear();
    for (double x = std::ceil(x0); x <= x1; x++) xt.push_back(x);
    xs = 1;
  }
  for (double y : yt)
    out += fmt::format(
        "<line class=\"grid\" x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/><text "
        "class=\"tick\" x=\"{3}\" y=\"{2:.1f}\" text-anchor=\"end\" "
        "dominant-baseline=\"middle\">{4}</text>\n",
        kL, kL + pw, py(y), kL - 6, fmt_tick(y, ys));
  for (double x : xt)
    out += fmt::format(
        "<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"/><text "
        "class=\"tick\" x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(x), kT, kT + ph, kT + ph + 16, fmt_tick(x, xs));
  out += fmt::format(
      "<line class=\"axis\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/><line class=\"axis\" "
      "x1=\"{0}\" x2=\"{3}\" y1=\"{2}\" y2=\"{2}\"/>\n",
      kL, kT, kT + ph, kL + pw);
  out += fmt::format(
      "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n<text "
      "class=\"label\" transform=\"translate(14 {}) rotate(-90)\" "
      "text-anchor=\"middle\">{}</text>\n",
      kL + pw / 2, kH - 8, html_escape(c.x_label), kT + ph / 2, html_escape(c.y_label));
  // Resumes and restarts.
  for (size_t i = 0; i < c.vlines.size(); i++) {
    const VLine& v = c.vlines[i];
    double x = px(v.x);
    out += fmt::format(
        "<line class=\"event\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\"><title>{3} at "
        "step {4}</title></line><text class=\"event-label\" x=\"{5:.1f}\" y=\"{6}\">{3}</text>\n",
        x, kT, kT + ph, html_escape(v.label), v.x, x + 3, kT + 10 + 11 * (i % 3));
  }
  // The series.
  out += fmt::format("<g clip-path=\"url(#clip-{})\">\n", c.id);
  for (auto& s : c.series) {
    if (s.pts.empty()) continue;
    const Style& st = kStyles[s.style % kNumStyles];
    std::string d;
    d.reserve(s.pts.size() * 16);
    for (size_t i = 0; i < s.pts.size(); i++)
      d += fmt::format("{}{:.1f} {:.1f}", i == 0 ? "M" : " L", px(s.pts[i].x), py(s.pts[i].y));
    out += fmt::format(
        "<path class=\"series\" data-series=\"{}\" data-points=\"{}\" d=\"{}\" fill=\"none\" "
        "stroke=\"{}\" stroke-width=\"{}\" stroke-opacity=\"{}\" stroke-dasharray=\"{}\" "
        "stroke-linejoin=\"round\"><title>{}</title></path>\n",
        html_escape(s.name), s.pts.size(), d, st.color, s.width, s.opacity, st.dash,
        html_escape(series_summary(s, c)));
    if (s.dots || s.pts.size() == 1)
      for (auto& p : s.pts)
        out += fmt::format(
            "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"#fff\" stroke=\"{}\" "
            "stroke-width=\"1.6\"><title>{} {:.5g} at step {}</title></circle>\n",
            px(p.x), py(p.y), st.color, html_escape(s.name), p.y, p.x);
  }
  out += "</g>\n";
  // Skipped steps: a triangle under the x axis, merged when closer than 3 px.
  double last_px = -10;
  int marks = 0;
  for (double s : c.skipped) {
    double x = px(s);
    if (x - last_px < 3) continue;
    last_px = x;
    marks++;
    out += fmt::format(
        "<path class=\"skipped\" d=\"M{0:.1f} {1} l-4 7 h8 z\"><title>step {2} skipped "
        "(non-finite)</title></path>\n",
        x, kT + ph - 7, s);
  }
  // Legend in the top margin: a sample of each line (its dash) and its name.
  // A second row when the first is full (the top margin holds two).
  double lx = kL, ly = 10;
  auto legend_item = [&](const std::string& sample, const std::string& name) {
    const double w = 34 + 6.5 * static_cast<double>(name.size());
    if (lx + w > kW && lx > kL) lx = kL, ly += 13;
    out += fmt::format(
        "<g class=\"legend\" transform=\"translate({:.0f} {})\">{}<text x=\"26\" "
        "y=\"4\">{}</text></g>\n",
        lx, ly, sample, html_escape(name));
    lx += w;
  };
  for (auto& s : c.series) {
    const Style& st = kStyles[s.style % kNumStyles];
    std::string sample = fmt::format(
        "<line x1=\"0\" x2=\"22\" y1=\"0\" y2=\"0\" stroke=\"{}\" stroke-width=\"{}\" "
        "stroke-opacity=\"{}\" stroke-dasharray=\"{}\"/>",
        st.color, s.width + 0.4, s.opacity, st.dash);
    if (s.dots)
      sample += fmt::format(
          "<circle cx=\"11\" cy=\"0\" r=\"3\" fill=\"#fff\" stroke=\"{}\" stroke-width=\"1.6\"/>",
          st.color);
    legend_item(sample, s.name);
  }
  if (marks > 0) legend_item("<path class=\"skipped\" d=\"M11 -4 l-4 7 h8 z\"/>", "skipped step");
  out += "</svg>\n";
  if (!c.note.empty()) out += "<p class=\"note\">" + html_escape(c.note) + "</p>\n";
  return out + "</figure>\n";
}

// Horizontal bars, one per row, labelled with their values.
std::string render_bar_chart(const std::string& id, const std::string& title,
                             const std::vector<Bar>& bars, const std::string& note) {
  std::string out = fmt::format("<figure class=\"chart\" id=\"{}\"><figcaption>{}</figcaption>\n",
                                id, html_escape(title));
  double vmax = 0;
  for (auto& b : bars)
    if (std::isfinite(b.value)) vmax = std::max(vmax, b.value);
  if (bars.empty() || vmax <= 0)
    return out + "<p class=\"empty\">Not recorded in this run.</p></figure>\n";
  const int row = 24, label_w = 110, value_w = 170;
  const int h = static_cast<int>(bars.size()) * row + 12;
  const double bw = kW - label_w - value_w - 8;
  out += fmt::format(
      "<svg viewBox=\"0 0 {0} {1}\" width=\"{0}\" height=\"{1}\" role=\"img\" "
      "aria-label=\"{2}\">\n",
      kW, h, html_escape(title));
  for (size_t i = 0; i < bars.size(); i++) {
    const Bar& b = bars[i];
    double y = 6 + static_cast<double>(i) * row;
    double w = std::isfinite(b.value) ? std::max(1.0, b.value / vmax * bw) : 0;
    out += fmt::format(
        "<text class=\"tick\" x=\"{0}\" y=\"{1:.1f}\" text-anchor=\"end\" "
        "dominant-baseline=\"middle\">{2}</text><rect class=\"bar\" x=\"{3}\" y=\"{4:.1f}\" "
        "width=\"{5:.1f}\" height=\"{6}\" fill=\"url(#{7})\" stroke=\"{8}\"><title>{2}: "
        "{9}</title></rect><text class=\"tick\" x=\"{10:.1f}\" y=\"{1:.1f}\" "
        "dominant-baseline=\"middle\">{9}</text>\n",
        label_w - 6, y + row / 2.0 - 2, html_escape(b.label), label_w, y + 2, w, row - 8,
        kStyles[b.style % kNumStyles].hatch, kStyles[b.style % kNumStyles].color,
        html_escape(b.value_text), label_w + w + 6);
  }
  out += "</svg>\n";
  if (!note.empty()) out += "<p class=\"note\">" + html_escape(note) + "</p>\n";
  return out + "</figure>\n";
}

}  // namespace report
}  // namespace kiln
