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
#include <string_view>
#include <vector>

namespace kiln {

// Fixed-size text, so that recording an operation allocates nothing (the engine's small
// all-reduces take a fraction of a microsecond).
struct CommEvent {
  uint64_t id = 0;     // process-wide, increasing
  char comm[32] = {};  // the communicator's name ("world", "world/0", ...)
  uint64_t seq = 0;    // per communicator, from 1
  // The operation: either text given whole (op), or a kind, an element count and a peer that
  // describe() puts into words only when someone reads the record.
  char op[64] = {};
  const char* kind = nullptr;       // "all_reduce" (a string literal)
  int64_t count = 0;                // elements (-1: none, as for a barrier)
  const char* peer_word = nullptr;  // "from rank", "to rank" (string literals), or null
  int peer = -1;
  std::string describe() const;                    // "all_reduce of 4096 elements"
  double issued = 0, started = -1, finished = -1;  // now_seconds(); -1: not yet
  bool failed = false;
  nlohmann::json to_json(double now) const;
};

class FlightRecorder {
 public:
  static FlightRecorder& instance();
  explicit FlightRecorder(size_t capacity = 256) : capacity_(capacity) {}
  // Records an operation (truncating long names); `running`: it starts at once.
  uint64_t issued(std::string_view comm, uint64_t seq, std::string_view op, bool running = false);
  // The same without formatting text: the hot path of the engine's small collectives.
  uint64_t issued(std::string_view comm, uint64_t seq, const char* kind, int64_t count,
                  const char* peer_word, int peer, bool running);
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
