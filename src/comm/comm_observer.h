// What communicators report about their operations, to whoever watches: each operation's issue,
// start and end (or failure), and timed spans while a trace is being taken. obs/ implements it
// (the flight recorder and the trace, obs/comm_observer.h); comm/ knows only this interface, so
// the two folders do not depend on each other both ways. With no observer set, nothing is
// recorded.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "comm/op_desc.h"

namespace kiln {

class CommObserver {
 public:
  virtual ~CommObserver() = default;
  // An operation of communicator `comm` with sequence number `seq`, in words (e.g. "split") or
  // as an OpDesc (no text made on the hot path); `running`: it starts at once. Returns an id
  // for started() and finished().
  virtual uint64_t issued(std::string_view comm, uint64_t seq, std::string_view text,
                          bool running) = 0;
  virtual uint64_t issued(std::string_view comm, uint64_t seq, const OpDesc& op, bool running) = 0;
  virtual void started(uint64_t id) = 0;
  virtual void finished(uint64_t id, bool failed) = 0;
  // Spans are wanted only while tracing() is true.
  virtual bool tracing() const = 0;
  virtual void span(const std::string& name, double start, double end, std::string_view comm,
                    uint64_t seq) = 0;
  virtual void name_thread(const std::string& name) = 0;
};

// The observer every communicator reports to; a no-op one until set_comm_observer() is called.
CommObserver& comm_observer();
// Sets it (nullptr: back to none). The observer must outlive every communicator.
void set_comm_observer(CommObserver* observer);

}  // namespace kiln
