#include "obs/trace.h"

#include <fmt/format.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/file.h"

namespace kiln {

Tracer& Tracer::instance() {
  static Tracer t;
  return t;
}

void Tracer::start(int rank, double origin) {
  std::lock_guard<std::mutex> lock(mu_);
  rank_ = rank;
  origin_ = origin;
  enabled_ = true;
}

int Tracer::thread_id() {
  static std::atomic<int> next{0};
  thread_local int id = next++;
  return id;
}

void Tracer::name_thread(const std::string& name) {
  int tid = thread_id();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [t, n] : thread_names_)
    if (t == tid) {
      n = name;
      return;
    }
  thread_names_.emplace_back(tid, name);
}

void Tracer::complete(std::string name, const char* category, double begin, double end,
                      std::string args_json) {
  if (!enabled_) return;
  int tid = thread_id();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({std::move(name), category, begin, end, tid, std::move(args_json)});
}

void Tracer::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
}

std::string Tracer::events_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "[\n";
  auto emit = [&](const std::string& line) {
    if (out.size() > 2) out += ",\n";
    out += line;
  };
  emit(fmt::format(
      R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"rank {}"}}}})", rank_,
      rank_));
  emit(fmt::format(
      R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
      rank_, rank_));
  for (const auto& [tid, name] : thread_names_)
    emit(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})",
                     rank_, tid, nlohmann::json(name).dump()));
  for (const auto& e : events_) {
    // Microseconds from the trace's zero, as the format wants.
    emit(fmt::format(
        R"({{"ph":"X","name":{},"cat":"{}","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}{}}})",
        nlohmann::json(e.name).dump(), e.category, rank_, e.tid, (e.begin - origin_) * 1e6,
        (e.end - e.begin) * 1e6, e.args.empty() ? "" : ",\"args\":" + e.args));
  }
  return out + "\n]\n";
}

TraceSpan::TraceSpan(const char* name, const char* category) : name_(name), category_(category) {
  if (Tracer::instance().enabled()) begin_ = now_seconds();
}

TraceSpan::TraceSpan(const char* name, const char* category, int micro)
    : TraceSpan(name, category) {
  micro_ = micro;
}

void TraceSpan::end() {
  if (begin_ < 0) return;
  Tracer::instance().complete(name_, category_, begin_, now_seconds(),
                              micro_ < 0 ? "" : fmt::format("{{\"micro\": {}}}", micro_));
  begin_ = -1;
}

void write_merged_trace(const std::vector<std::string>& part_paths, const std::string& out) {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& p : part_paths) {
    auto part = nlohmann::json::parse(read_file(p, "trace part"), nullptr, false);
    if (part.is_discarded() || !part.is_array()) fail("trace part {} is not a JSON array", p);
    for (auto& e : part) events.push_back(std::move(e));
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  write_file_atomic(out, doc.dump() + "\n");
}

}  // namespace kiln
