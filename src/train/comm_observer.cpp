#include "train/comm_observer.h"

#include <fmt/format.h>

#include "comm/comm_observer.h"
#include "obs/flight_recorder.h"
#include "obs/trace.h"

namespace kiln {

namespace {

class RecorderAndTrace : public CommObserver {
 public:
  uint64_t issued(std::string_view comm, uint64_t seq, std::string_view text,
                  bool running) override {
    return FlightRecorder::instance().issued(comm, seq, text, running);
  }
  uint64_t issued(std::string_view comm, uint64_t seq, const OpDesc& op, bool running) override {
    return FlightRecorder::instance().issued(comm, seq, op.kind, op.count, op.peer_word, op.peer,
                                             running);
  }
  void started(uint64_t id) override { FlightRecorder::instance().started(id); }
  void finished(uint64_t id, bool failed) override {
    FlightRecorder::instance().finished(id, failed);
  }
  bool tracing() const override { return Tracer::instance().enabled(); }
  // A grid group's operations say which group in their name ("all_gather of 4096 elements
  // (tp)"), so that tensor-, pipeline- and data-parallel traffic read apart in the timeline.
  void span(const std::string& name, double start, double end, std::string_view comm,
            uint64_t seq) override {
    const std::string_view group = comm.substr(comm.rfind('/') + 1);
    const bool grid =
        comm.find('/') != std::string_view::npos && group.size() > 2 &&
        (group.starts_with("tp") || group.starts_with("pp") || group.starts_with("dp"));
    Tracer::instance().complete(grid ? fmt::format("{} ({})", name, group.substr(0, 2)) : name,
                                "comm", start, end,
                                fmt::format(R"({{"comm":"{}","seq":{}}})", comm, seq));
  }
  void name_thread(const std::string& name) override { Tracer::instance().name_thread(name); }
};

}  // namespace

void observe_communicators() {
  static RecorderAndTrace observer;
  set_comm_observer(&observer);
}

}  // namespace kiln
