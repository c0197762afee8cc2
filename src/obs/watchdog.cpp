#include "obs/watchdog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/clock.h"
#include "core/file.h"
#include "core/job.h"
#include "core/process.h"
#include "obs/flight_recorder.h"

namespace fs = std::filesystem;

namespace kiln {

namespace {

std::string heartbeat_path(const std::string& dir, int rank) {
  return (fs::path(dir) / "heartbeat" / fmt::format("rank-{}.json", rank)).string();
}

// Ranks compare their records by wall clock (heartbeats are files, possibly from other hosts).
double age_of(const nlohmann::json& hb) {
  return unix_seconds() - hb.value("time", 0.0);
}

}  // namespace

Watchdog::Watchdog(WatchdogOptions o) : o_(std::move(o)) {
  last_step_time_ = now_seconds();
  fs::create_directories(fs::path(o_.dir) / "heartbeat");
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::step_done(int64_t step) {
  step_ = step;
  last_step_time_ = now_seconds();
}

nlohmann::json Watchdog::heartbeat() const {
  const FlightRecorder& fr = FlightRecorder::instance();
  const double now = now_seconds();
  nlohmann::json hb = {{"rank", o_.rank},      {"pid", getpid()},        {"host", host_name()},
                       {"step", step_.load()}, {"phase", phase_.load()}, {"time", unix_seconds()}};
  if (auto p = fr.oldest_pending()) hb["waiting_in"] = p->to_json(now);
  // The last finished operation of each communicator: how far this rank got.
  nlohmann::json done = nlohmann::json::object();
  auto events = fr.events();
  for (const auto& e : events)
    if (e.finished >= 0)
      done[e.comm] = std::max<uint64_t>(done.value(std::string(e.comm), uint64_t{0}), e.seq);
  hb["done_seq"] = done;
  nlohmann::json recent = nlohmann::json::array();
  for (size_t i = events.size() > 16 ? events.size() - 16 : 0; i < events.size(); i++)
    recent.push_back(events[i].to_json(now));
  hb["recent"] = recent;
  return hb;
}

std::string Watchdog::diagnose(double stalled) const {
  auto pending = FlightRecorder::instance().oldest_pending();
  std::string where = fmt::format("rank {} made no progress for {:.1f} s after step {} ({})",
                                  o_.rank, stalled, step_.load(), phase_.load());
  if (!pending) return where + ", outside any collective";
  where += fmt::format(", waiting in {} #{} on communicator '{}'", pending->describe(),
                       pending->seq, pending->comm);
  std::vector<std::string> missing, notes;
  for (int r = 0; r < o_.world; r++) {
    if (r == o_.rank) continue;
    nlohmann::json hb;
    try {
      hb = nlohmann::json::parse(read_file(heartbeat_path(o_.dir, r), "heartbeat"));
    } catch (const std::exception&) {
      missing.push_back(std::to_string(r));
      notes.push_back(fmt::format("rank {}: no heartbeat", r));
      continue;
    }
    // Rank r arrived if it finished this collective or waits in it (or a later one).
    uint64_t done = hb.value("done_seq", nlohmann::json::object())
                        .value(std::string(pending->comm), uint64_t{0});
    uint64_t waiting = 0;
    if (hb.contains("waiting_in") && hb["waiting_in"].value("comm", std::string()) == pending->comm)
      waiting = hb["waiting_in"].value("seq", uint64_t{0});
    if (done >= pending->seq || waiting >= pending->seq) continue;
    missing.push_back(std::to_string(r));
    std::string in = hb.contains("waiting_in")
                         ? fmt::format("waiting in {} #{}", hb["waiting_in"].value("op", "?"),
                                       hb["waiting_in"].value("seq", uint64_t{0}))
                         : fmt::format("in {}", hb.value("phase", "?"));
    notes.push_back(
        fmt::format("rank {} (pid {} on {}): last heartbeat {:.1f} s ago at step {}, "
                    "{}, last finished #{}",
                    r, hb.value("pid", 0), hb.value("host", "?"), age_of(hb),
                    hb.value("step", int64_t{0}), in, done));
  }
  if (missing.empty()) return where + "; every rank's heartbeat says it arrived";
  std::string list;
  for (size_t i = 0; i < missing.size(); i++) list += (i ? ", " : "") + missing[i];
  std::string s = where + fmt::format("; rank(s) {} did not arrive", list);
  for (const auto& n : notes) s += "\n  " + n;
  return s;
}

void Watchdog::on_hang(double stalled) {
  std::string msg = diagnose(stalled);
  nlohmann::json dump = {{"rank", o_.rank},
                         {"step", step_.load()},
                         {"message", msg},
                         {"time", unix_seconds()},
                         {"events", FlightRecorder::instance().to_json()}};
  std::string path = (fs::path(o_.dir) / "flight" / fmt::format("rank-{}.json", o_.rank)).string();
  try {
    fs::create_directories(fs::path(path).parent_path());
    write_file_atomic(path, dump.dump(2) + "\n");
  } catch (const std::exception&) {
    path = "(could not be written)";
  }
  std::fprintf(stderr,
               "kiln: error: watchdog: %s\n  flight recorder of rank %d: %s\n  ending the job so "
               "that it can restart from the last checkpoint\n",
               msg.c_str(), o_.rank, path.c_str());
  std::fflush(stderr);
  // Peers waiting on the same collective find the hang within a heartbeat or two: give them the
  // time to write their own flight records before the job ends.
  std::this_thread::sleep_for(std::chrono::duration<double>(2 * o_.interval_seconds));
  abort_job(kExitHang);
}

void Watchdog::loop() {
  const std::string path = heartbeat_path(o_.dir, o_.rank);
  std::unique_lock<std::mutex> lock(mu_);
  for (bool first = true; !stop_; first = false) {
    if (!first) cv_.wait_for(lock, std::chrono::duration<double>(o_.interval_seconds));
    if (stop_) break;
    lock.unlock();
    try {
      replace_file(path, heartbeat().dump() + "\n");  // once a second: no fsync
    } catch (const std::exception&) {
      // A full disk must not end the run; the hang check below does not need the file.
    }
    const double now = now_seconds();
    const double progress =
        std::max(last_step_time_.load(), FlightRecorder::instance().last_activity());
    if (o_.timeout_seconds > 0 && now - progress > o_.timeout_seconds) on_hang(now - progress);
    lock.lock();
  }
}

}  // namespace kiln
