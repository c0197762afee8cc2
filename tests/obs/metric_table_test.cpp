// The metric table is the one declaration of every number kiln reports: the trainer's records
// and series follow it exactly, and the Grafana dashboard asks only for series it declares.
#include "obs/metric_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"

namespace kiln {
namespace {

std::set<std::string> declared_series() {
  std::set<std::string> names;
  for (const auto& s : metric_specs())
    if (s.prometheus) names.insert(s.prometheus);
  return names;
}

TEST(MetricTable, NamesAreUniqueAndLabelledKeysSayWhereTheLabelGoes) {
  std::set<std::string> series, keys;
  for (const auto& s : metric_specs()) {
    ASSERT_NE(s.prometheus, nullptr);
    EXPECT_TRUE(series.insert(s.prometheus).second) << s.prometheus << " is declared twice";
    EXPECT_EQ(&metric(s.id), &s);
    EXPECT_NE(std::string(s.help), "");
    if (!s.json) continue;
    ASSERT_NE(s.record, nullptr) << s.prometheus;
    EXPECT_TRUE(keys.insert(std::string(s.record) + "." + s.json).second)
        << s.record << "." << s.json << " is claimed by two metrics";
    // A labelled series has a key per label value, or (per rank) one array.
    if (s.label) {
      EXPECT_TRUE(std::string(s.json).find("{}") != std::string::npos ||
                  s.id == Metric::RankComputeSeconds)
          << s.prometheus;
    }
  }
  EXPECT_EQ(metric_json_key(Metric::PhaseSeconds, "comm_wait"), "comm_wait_ms");
  EXPECT_EQ(metric_json_key(Metric::Loss), "loss");
}

TEST(MetricTable, TheGrafanaDashboardAsksOnlyForDeclaredSeries) {
  std::ifstream f(kiln::testing::source_path("docs/grafana-dashboard.json"));
  ASSERT_TRUE(f.good());
  auto dashboard = nlohmann::json::parse(f);
  const auto declared = declared_series();
  std::set<std::string> asked;
  static const std::regex name(R"(\bkiln_[a-z0-9_]+)");
  std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
    if (j.is_object()) {
      for (auto& [k, v] : j.items()) {
        if (k == "expr" && v.is_string()) {
          const std::string e = v.get<std::string>();
          for (std::sregex_iterator it(e.begin(), e.end(), name), end; it != end; ++it)
            asked.insert(it->str());
        }
        walk(v);
      }
    } else if (j.is_array()) {
      for (auto& v : j) walk(v);
    }
  };
  walk(dashboard);
  ASSERT_GT(asked.size(), 5u);  // the walk found the panels
  for (const auto& a : asked) EXPECT_TRUE(declared.count(a)) << "the dashboard asks for " << a;
}

}  // namespace
}  // namespace kiln
