// The exit codes kiln's commands end with, and what a launcher or job script does with each
// (BSD sysexits names where one fits). A launcher restarts a job only when trying again can help.
#pragma once

namespace kiln {

// A failure at run time (a crashed collective, a write error): a restart from the newest
// checkpoint may succeed.
constexpr int kExitFailure = 1;
// Refused at start-up: a bad config, data or checkpoint, a run directory in use. The same
// command fails the same way again, so launchers do not retry it (EX_CONFIG).
constexpr int kExitBadInput = 78;
// Training diverged: too many consecutive steps with a non-finite loss or gradient norm. A
// restart from the last checkpoint would repeat the same bits, so launchers do not retry it
// (EX_DATAERR).
constexpr int kExitNonFinite = 65;
// `kiln train` stopped as asked (a signal), after a checkpoint (EX_TEMPFAIL: "try again later"):
// the job script requeues the job, which resumes from the checkpoint.
constexpr int kExitStoppedForRequeue = 75;

// The watchdog found a hang (a rank made no progress for train.watchdog_seconds) and ended the
// job: a restart from the last checkpoint usually gets past it, so launchers retry.
constexpr int kExitHang = 86;

}  // namespace kiln
