// metrics.jsonl: one JSON object per line, flushed as written, so a crash loses at most the line
// being written and `tail -f` shows progress.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Appends to path (creating it).
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& entry);

 private:
  std::FILE* f_ = nullptr;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace kiln
