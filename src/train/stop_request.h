// A polite stop: SIGUSR1 (Slurm's warning before a time limit or a preemption, sent with
// `--signal=USR1@T` or `scancel --signal=USR1`) and SIGTERM ask a run to stop at the end of the
// current step, after writing a checkpoint. Every rank learns of it in the step's loss reduction,
// so all stop at the same step even when the signal reached only some of them.
#pragma once

#include "core/exit_codes.h"

namespace kiln {

// Installs the handlers (idempotent).
void install_stop_handlers();
// The signal that asked this process to stop, or 0.
int stop_signal();
void clear_stop_signal();

}  // namespace kiln
