#include "obs/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace kiln {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  // A process that died while writing leaves a line without its end: end it, so that the torn
  // record stays alone on its line and the next one is whole.
  bool torn = false;
  if (std::FILE* r = std::fopen(path.c_str(), "rb")) {
    if (std::fseek(r, -1, SEEK_END) == 0) torn = std::fgetc(r) != '\n';
    std::fclose(r);
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) fail("cannot open metrics file {}: {}", path, std::strerror(errno));
  // Unbuffered: each record is one write, so a failed one is known at once and never retried
  // behind a later record's back.
  std::setvbuf(f_, nullptr, _IONBF, 0);
  if (torn) {
    std::fputc('\n', f_);
    std::fflush(f_);
  }
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& entry) {
  if (!f_) return;
  // Text (samples) may end inside a UTF-8 sequence: replace such bytes rather than fail.
  std::string line = entry.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (torn_) line.insert(line.begin(), '\n');
  std::clearerr(f_);
  const bool ok =
      std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  if (ok) {
    torn_ = false;
    return;
  }
  const int err = errno;
  torn_ = true;
  if (errors_++ == 0)
    fmt::print(stderr,
               "kiln: warning: cannot write {}: {}; training goes on, records are dropped until "
               "writes succeed again (counted in kiln_metrics_write_errors_total)\n",
               path_, std::strerror(err));
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02d}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02d}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace kiln
