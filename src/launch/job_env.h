// Where this process sits in its job, read from the launcher's environment: mpirun (OpenMPI),
// srun (Slurm with PMIx) or nothing (one process). MPI itself gives rank and size; this adds what
// MPI does not say directly: the ranks sharing this machine (to share its cores out), the node,
// and the scheduler's job.
#pragma once
#include <string>

namespace kiln {

struct JobEnv {
  std::string launcher = "none";  // "mpirun" | "slurm" | "none"
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;  // ranks on this machine
  int node = 0, nodes = 1;
  int cpus_per_task = 0;  // Slurm's --cpus-per-task (0: not given)
  std::string job_id;     // Slurm's job id
  std::string node_list;  // Slurm's compressed node list ("vm", "node[01-04]")
};

JobEnv job_env();

// Slurm's per-node task counts ("2(x3),1" = 2,2,2,1): the entry of node `node`, or 0.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace kiln
