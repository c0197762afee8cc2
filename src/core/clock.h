#pragma once
#include <chrono>

namespace kiln {

inline double now_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace kiln

namespace kiln {

// Seconds since the Unix epoch (wall clock), for timestamps people and Prometheus read.
inline double unix_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace kiln

#include <time.h>

namespace kiln {

// now_seconds() to within a few milliseconds (the kernel's tick), at a fraction of the cost: for
// timestamps taken on every operation that only the watchdog reads.
inline double coarse_now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace kiln
