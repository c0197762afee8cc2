// The job this process belongs to, as far as every layer needs to know: whether a launcher
// (mpirun, srun) started it, and how to end the whole job after a fatal error. The MPI backend
// registers how to abort (MPI_Abort) when it initialises MPI; core knows no MPI.
#pragma once

namespace kiln {

// True when a launcher (mpirun, srun) started this process as part of a job.
bool launched_by_mpi();

// Ends the whole job after a fatal error on this rank: through the registered abort (MPI_Abort,
// so that peers blocked in a collective do not wait for their timeout) when there is one,
// exit(code) otherwise. Output is flushed first.
[[noreturn]] void abort_job(int code);

// Registers how to end every process of the job (called by the MPI backend once MPI is up).
void set_job_abort(void (*abort_all)(int code));

}  // namespace kiln
