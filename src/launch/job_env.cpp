#include "launch/job_env.h"

#include <cstdlib>
#include <string>

namespace kiln {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  return v ? std::atoi(v) : fallback;
}

}  // namespace

int slurm_tasks_on_node(const std::string& spec, int node) {
  int seen = 0;
  size_t i = 0;
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    int count = std::atoi(item.c_str()), repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    if (node < seen + repeat) return count;
    seen += repeat;
    i = end + 1;
  }
  return 0;
}

JobEnv job_env() {
  JobEnv e;
  if (env("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun";
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
    e.nodes = env_int("OMPI_MCA_orte_num_nodes", 1);
  } else if (env("SLURM_STEP_ID") && env("SLURM_PROCID")) {  // a task of an srun step
    e.launcher = "slurm";
    e.rank = env_int("SLURM_PROCID", 0);
    e.world = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1));
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.node = env_int("SLURM_NODEID", 0);
    e.nodes = env_int("SLURM_STEP_NUM_NODES", env_int("SLURM_JOB_NUM_NODES", 1));
    const char* tpn = env("SLURM_STEP_TASKS_PER_NODE");
    if (!tpn) tpn = env("SLURM_TASKS_PER_NODE");
    e.local_size = tpn ? slurm_tasks_on_node(tpn, e.node) : 1;
    if (e.local_size < 1) e.local_size = 1;
  }
  if (const char* j = env("SLURM_JOB_ID")) e.job_id = j;
  if (const char* n = env("SLURM_JOB_NODELIST")) e.node_list = n;
  e.cpus_per_task = env_int("SLURM_CPUS_PER_TASK", 0);
  return e;
}

}  // namespace kiln
