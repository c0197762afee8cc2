// The hang watchdog. A thread on every rank writes a heartbeat (step, phase, the collective it
// waits in) to <out_dir>/heartbeat/rank-N.json about once a second, and watches for progress: a
// finished step or a started or finished communication operation. When a rank has made none for
// `timeout` seconds (stuck in a collective because a peer is stopped, dead or looping, or stuck
// itself), it reads its peers' heartbeats to name the ranks that did not arrive at the
// collective, dumps its flight recorder (the last communication events) to
// <out_dir>/flight/rank-N.json, prints what it found and ends the job (MPI_Abort), so that
// `kiln launch` restarts it from the last checkpoint instead of waiting forever.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/exit_codes.h"

namespace kiln {

struct WatchdogOptions {
  double timeout_seconds = 300;
  double interval_seconds = 1;  // heartbeat period
  std::string dir;              // the run directory
  int rank = 0, world = 1;
};

class Watchdog {
 public:
  explicit Watchdog(WatchdogOptions o);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Progress: a step finished (the trainer calls it after each one).
  void step_done(int64_t step);
  // What the rank does now ("train", "validate", "checkpoint"); must be a string literal.
  void set_phase(const char* phase) { phase_.store(phase); }

  // What this rank would say if it stopped now (tests, and the hang report).
  nlohmann::json heartbeat() const;
  // The hang report: which collective this rank waits in, which peers did not arrive (from
  // their heartbeats in `dir`), and the step. Empty when not waiting in a collective.
  std::string diagnose(double stalled_seconds) const;

 private:
  void loop();
  void on_hang(double stalled_seconds);

  WatchdogOptions o_;
  std::atomic<int64_t> step_{0};
  std::atomic<double> last_step_time_{0};
  std::atomic<const char*> phase_{"start"};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

}  // namespace kiln
