#include "core/process.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>

namespace kiln {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

int restart_count() {
  int n = 0;
  for (const char* v : {"KILN_RESTART_COUNT", "SLURM_RESTART_COUNT"})
    if (const char* s = std::getenv(v)) n += std::atoi(s);
  return n;
}

}  // namespace kiln
