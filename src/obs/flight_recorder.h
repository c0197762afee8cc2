// The flight recorder: the last N communication operations of this process (which
// communicator, its sequence number, the operation, when it was issued, started and finished),
// kept in a ring so that a hang can be explained after the fact. Ranks issue the collectives of
// a communicator in the same order, so sequence number k names the same collective on every
// rank: comparing the ranks' records shows who did not arrive.
#pragma once
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct CommEvent {
  uint64_t id = 0;                                 // process-wide, increasing
  std::string comm;                                // the communicator's name ("world", "dp", ...)
  uint64_t seq = 0;                                // per communicator, from 1
  std::string op;                                  // "all_reduce of 4096 elements"
  double issued = 0, started = -1, finished = -1;  // now_seconds(); -1: not yet
  bool failed = false;
  nlohmann::json to_json(double now) const;
};

class FlightRecorder {
 public:
  static FlightRecorder& instance();
  explicit FlightRecorder(size_t capacity = 256) : capacity_(capacity) {}
  uint64_t issued(const std::string& comm, uint64_t seq, const std::string& op);
  void started(uint64_t id);
  void finished(uint64_t id, bool failed);
  // The oldest operation issued but not finished, if any.
  std::optional<CommEvent> oldest_pending() const;
  // The newest finished operation of communicator `comm`, if any.
  std::optional<CommEvent> last_finished(const std::string& comm) const;
  // The last N events, oldest first.
  std::vector<CommEvent> events() const;
  nlohmann::json to_json() const;
  double last_activity() const;  // now_seconds() of the last start or finish (0: none)

 private:
  CommEvent* find(uint64_t id);
  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<CommEvent> ring_;  // ring_[id % capacity_]
  uint64_t next_id_ = 1;
  double last_activity_ = 0;
};

}  // namespace kiln
