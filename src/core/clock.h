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
