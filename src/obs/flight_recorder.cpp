#include "obs/flight_recorder.h"

#include <algorithm>

#include "core/clock.h"

namespace kiln {

nlohmann::json CommEvent::to_json(double now) const {
  std::string state = failed          ? "failed"
                      : finished >= 0 ? "done"
                      : started >= 0  ? "running"
                                      : "queued";
  nlohmann::json j = {{"id", id}, {"comm", comm}, {"seq", seq}, {"op", op}, {"state", state}};
  // Ages in seconds before `now`, so ranks' records compare without a common clock.
  j["issued_ago_s"] = now - issued;
  if (started >= 0) j["started_ago_s"] = now - started;
  if (finished >= 0) j["duration_s"] = finished - started;
  return j;
}

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder r;
  return r;
}

uint64_t FlightRecorder::issued(const std::string& comm, uint64_t seq, const std::string& op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.size() < capacity_) ring_.resize(capacity_);
  uint64_t id = next_id_++;
  CommEvent& e = ring_[id % capacity_];
  e = CommEvent{};
  e.id = id;
  e.comm = comm;
  e.seq = seq;
  e.op = op;
  e.issued = now_seconds();
  return id;
}

CommEvent* FlightRecorder::find(uint64_t id) {
  if (ring_.empty()) return nullptr;
  CommEvent& e = ring_[id % capacity_];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  last_activity_ = now_seconds();
  if (CommEvent* e = find(id)) e->started = last_activity_;
}

void FlightRecorder::finished(uint64_t id, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  last_activity_ = now_seconds();
  if (CommEvent* e = find(id)) {
    e->finished = last_activity_;
    e->failed = failed;
  }
}

std::vector<CommEvent> FlightRecorder::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommEvent> out;
  for (const auto& e : ring_)
    if (e.id) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::optional<CommEvent> FlightRecorder::oldest_pending() const {
  for (const auto& e : events())
    if (e.finished < 0) return e;
  return std::nullopt;
}

std::optional<CommEvent> FlightRecorder::last_finished(const std::string& comm) const {
  auto ev = events();
  for (auto it = ev.rbegin(); it != ev.rend(); ++it)
    if (it->comm == comm && it->finished >= 0) return *it;
  return std::nullopt;
}

nlohmann::json FlightRecorder::to_json() const {
  double now = now_seconds();
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : events()) a.push_back(e.to_json(now));
  return a;
}

double FlightRecorder::last_activity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_activity_;
}

}  // namespace kiln
