// metrics.jsonl: one JSON object per line, flushed as written, so a crash loses at most the line
// being written and `tail -f` shows progress.
#pragma once
#include <cstdint>
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
  // Appends one record. A failed write (a full disk) does not stop training: the first one is
  // reported on stderr, every one is counted, and the next record starts on a fresh line.
  void write(const nlohmann::json& entry);
  int64_t write_errors() const { return errors_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  int64_t errors_ = 0;
  bool torn_ = false;  // the last write may have left a partial line
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace kiln
