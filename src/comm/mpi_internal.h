// What the MPI backend lends to the backends built on it (the shared-memory engine): MPI set-up,
// the datatypes, and a way to run MPI calls on an MPI communicator's own thread, in order with
// its other operations, so that MPI is only ever called from one thread per communicator.
#pragma once
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace kiln::detail {

void ensure_mpi();
MPI_Datatype mpi_type(DType t);
MPI_Op sum_op(DType t);

// An MPI communicator over `comm` (freed with it when `owns`).
// `name` labels its operations in the flight recorder and the trace.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const CommOptions& o, bool owns,
                                                    const std::string& name = "world");
// Runs f(comm) on c's communication thread and waits; f returns an MPI error code, which is
// thrown as an Error naming `what`. c must be an MPI-backend communicator.
void run_on_mpi_thread(Communicator& c, const std::string& what,
                       const std::function<int(MPI_Comm)>& f);

// The backend o.backend names ("shm", "hier" or "auto") over the MPI communicator `mpi`
// (hier_communicator.cpp says how "auto" chooses).
std::unique_ptr<Communicator> make_node_communicator(std::unique_ptr<Communicator> mpi,
                                                     const CommOptions& o);
// The shared-memory engine over `mpi`, whose ranks must all run on one node.
std::unique_ptr<Communicator> make_shm_communicator(std::unique_ptr<Communicator> mpi,
                                                    const CommOptions& o);

}  // namespace kiln::detail
