#include "obs/flight_recorder.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/clock.h"

namespace kiln {

nlohmann::json CommEvent::to_json(double now) const {
  std::string state = failed          ? "failed"
                      : finished >= 0 ? "done"
                      : started >= 0  ? "running"
                                      : "queued";
  nlohmann::json j = {
      {"id", id}, {"comm", comm}, {"seq", seq}, {"op", describe()}, {"state", state}};
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

namespace {
template <size_t N>
void copy_text(char (&dst)[N], std::string_view src) {
  const size_t n = std::min(src.size(), N - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}
}  // namespace

std::string CommEvent::describe() const {
  if (!kind) return op;
  // The same words as comm's OpDesc::text(), which the trace's spans use.
  if (count < 0) return kind;  // no count: "barrier"
  std::string s = fmt::format("{} of {} elements", kind, count);
  if (peer_word) s += fmt::format(" {} {}", peer_word, peer);
  return s;
}

uint64_t FlightRecorder::issued(std::string_view comm, uint64_t seq, std::string_view op,
                                bool running) {
  uint64_t id = issued(comm, seq, nullptr, 0, nullptr, -1, running);
  std::lock_guard<std::mutex> lock(mu_);
  if (CommEvent* e = find(id)) copy_text(e->op, op);
  return id;
}

uint64_t FlightRecorder::issued(std::string_view comm, uint64_t seq, const char* kind,
                                int64_t count, const char* peer_word, int peer, bool running) {
  const double now = coarse_now_seconds();
  std::lock_guard<std::mutex> lock(mu_);
  if (ring_.size() < capacity_) ring_.resize(capacity_);
  uint64_t id = next_id_++;
  CommEvent& e = ring_[id % capacity_];
  e.id = id;
  copy_text(e.comm, comm);
  e.seq = seq;
  e.op[0] = '\0';
  e.kind = kind;
  e.count = count;
  e.peer_word = peer_word;
  e.peer = peer;
  e.issued = now;
  e.started = running ? now : -1;
  e.finished = -1;
  e.failed = false;
  if (running) last_activity_ = now;
  return id;
}

CommEvent* FlightRecorder::find(uint64_t id) {
  if (ring_.empty()) return nullptr;
  CommEvent& e = ring_[id % capacity_];
  return e.id == id ? &e : nullptr;
}

void FlightRecorder::started(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  last_activity_ = coarse_now_seconds();
  if (CommEvent* e = find(id)) e->started = last_activity_;
}

void FlightRecorder::finished(uint64_t id, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  last_activity_ = coarse_now_seconds();
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
    if (comm == it->comm && it->finished >= 0) return *it;
  return std::nullopt;
}

nlohmann::json FlightRecorder::to_json() const {
  double now = coarse_now_seconds();
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : events()) a.push_back(e.to_json(now));
  return a;
}

double FlightRecorder::last_activity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_activity_;
}

}  // namespace kiln
