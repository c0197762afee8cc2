// `kiln report`'s pieces that are not the page: number formatting and the SVG charts (lines with
// a legend, skipped steps and marks; horizontal bars). report_html.cpp composes the page from
// them. Every series has a colour, a dash pattern and (for bars) a hatch, so the page reads in
// grey too.
#pragma once
#include <string>
#include <vector>

#include "obs/report_html.h"

namespace kiln::report {

// Numbers for people: SI prefixes, a tick label with the decimals its spacing needs, bytes,
// durations (with days), a local time, and a plain number ("-" when not finite).
std::string fmt_si(double v, int digits = 3);
std::string fmt_tick(double v, double spacing);
std::string fmt_bytes(double b);
std::string fmt_duration(double seconds);
std::string fmt_time(double unix_seconds);
std::string fmt_num(double v, const char* f = "{:.4g}");
double median(std::vector<double> v);  // NaN when empty

struct Style {
  const char* color;
  const char* dash;   // stroke-dasharray ("" = solid)
  const char* hatch;  // pattern id for bars
};

constexpr Style kStyles[] = {
    {"#1f5fbf", "", "h0"},        {"#d9480f", "7 4", "h1"},     {"#2b8a3e", "2 3", "h2"},
    {"#862e9c", "9 3 2 3", "h3"}, {"#e67700", "14 4", "h4"},    {"#495057", "1 2", "h5"},
    {"#0b7285", "5 2 1 2", "h6"}, {"#5c940d", "3 2 8 2", "h7"},
};
constexpr int kNumStyles = sizeof(kStyles) / sizeof(kStyles[0]);

// Hatch patterns, defined once per page in a hidden SVG.
std::string hatch_defs();

struct Series {
  std::string name;
  std::vector<Point> pts;  // finite, sorted by x
  int style = 0;
  bool dots = false;  // draw a marker at every point (few points, e.g. validation)
  double width = 1.6, opacity = 1;
};

struct VLine {
  double x;
  std::string label;
};

struct LineChart {
  std::string id, title, x_label = "step", y_label;
  std::vector<Series> series;
  std::vector<VLine> vlines;    // resumes and restarts
  std::vector<double> skipped;  // steps marked on the x axis
  bool from_zero = false;
  bool integer_x = true;  // x is a step: no ticks between whole numbers
  std::string note;       // under the chart
};

constexpr int kW = 560, kH = 300, kL = 64, kR = 16, kT = 34, kB = 46;

// The tooltip of a line: its last, lowest and highest values (decimation keeps all three).
std::string series_summary(const Series& s, const LineChart& c);
std::string render_line_chart(const LineChart& c);

struct Bar {
  std::string label, value_text;
  double value;
  int style = 0;
};

// Horizontal bars, one per row, labelled with their values.
std::string render_bar_chart(const std::string& id, const std::string& title,
                             const std::vector<Bar>& bars, const std::string& note);

}  // namespace kiln::report
