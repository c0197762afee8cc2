// A timeline of the run in the Chrome trace event format (chrome://tracing, Perfetto): each rank
// records complete events ("X") for forward, backward, optimizer, its collectives (on the
// communication thread) and checkpoints; at the end every rank writes its part and rank 0 merges
// them into one file, one process per rank, so a person sees which rank waits on which.
//
// Recording is off unless started; a TraceSpan then costs one clock read. Events are kept in
// memory until written (about 100 bytes each, a few dozen per step).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace kiln {

class Tracer {
 public:
  static Tracer& instance();
  // Starts recording for this rank; `origin` (now_seconds()) is time zero of the trace. Ranks
  // call it just after a barrier, so their zeros agree to within the barrier's skew.
  void start(int rank, double origin);
  bool enabled() const { return enabled_; }
  // A span [begin, end] (now_seconds() values) on the calling thread.
  void complete(std::string name, const char* category, double begin, double end,
                std::string args_json = "");
  // Names the calling thread in the trace ("train", "comm").
  void name_thread(const std::string& name);
  // This rank's events as a JSON array (one event per line).
  std::string events_json() const;
  void clear();

 private:
  struct Event {
    std::string name;
    const char* category;
    double begin, end;
    int tid;
    std::string args;
  };
  int thread_id();
  bool enabled_ = false;
  int rank_ = 0;
  double origin_ = 0;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> thread_names_;
};

// Records [construction, end() or destruction] when the tracer is on.
class TraceSpan {
 public:
  TraceSpan(const char* name, const char* category);
  // The same with the micro-batch it works on (pipeline schedules: an argument of the event).
  TraceSpan(const char* name, const char* category, int micro);
  ~TraceSpan() { end(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;
  void end();

 private:
  const char* name_;
  const char* category_;
  int micro_ = -1;
  double begin_ = -1;
};

// Rank 0 joins the ranks' parts (each an events_json() array) into one trace file, written
// atomically.
void write_merged_trace(const std::vector<std::string>& part_paths, const std::string& out);

}  // namespace kiln
