// A Communicator that reports every operation of another one to the flight recorder (issue,
// completion as observed by wait()/test(), failure) and, when tracing, adds a span from issue
// to completion on the thread that observed it. Backends that run operations on a thread of
// their own (MPI) report exact start and end times themselves; this wrapper serves the others
// (the shared-memory engine, the hierarchical one), so that the watchdog can name the collective
// a rank waits in whatever the backend.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace kiln {

std::unique_ptr<Communicator> with_flight_recorder(std::unique_ptr<Communicator> inner,
                                                   std::string name);

}  // namespace kiln
