// Connects the communicators (comm/comm_observer.h) to this process's flight recorder and trace
// (obs/): every operation is recorded for the watchdog's diagnosis, and timed as a span while
// tracing. It lives here, above both, so that neither comm/ nor obs/ includes the other.
#pragma once

namespace kiln {

// Makes the flight recorder and the trace the communicators' observer (idempotent). Called by
// `kiln` at start and by the trainer; until then communicators record nothing.
void observe_communicators();

}  // namespace kiln
