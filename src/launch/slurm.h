// `kiln submit`: a Slurm batch script for a training run, and its submission. The script asks
// for --requeue and --signal=USR1@<seconds>: on that warning (time limit, preemption) every task
// checkpoints and exits with kExitStoppedForRequeue, and the script requeues the job, which
// resumes from the checkpoint (train.resume = "auto"). With max_restarts, a run that fails (a
// rank crashed, or the watchdog ended a hang) is requeued too: the script records a `restart` in
// the run's metrics.jsonl, counts the nodes srun names in its errors (in
// <out_dir>/failed-nodes), excludes any named twice, and requeues.
#pragma once
#include <string>
#include <vector>

namespace kiln {

struct SubmitOptions {
  std::string config;             // absolute path of the TOML config
  std::vector<std::string> sets;  // section.key=value overrides
  std::string kiln_binary;        // absolute
  std::string workdir;            // the job runs here (relative paths in the config)
  std::string out_dir;            // train.out_dir, absolute: logs and the script go there
  std::string job_name = "kiln";
  int nodes = 1;
  int ntasks_per_node = 1;
  int cpus_per_task = 0;  // 0: Slurm's default
  std::string time;       // --time, e.g. "2:00:00" ("" : the partition's default)
  std::string partition;
  std::string gres;          // e.g. "gpu:4"
  int signal_seconds = 120;  // USR1 this long before the time limit
  // Requeues after a failed run (a crashed or hung rank: any exit but success, a requested
  // stop, a refused input or divergence), at most this many times (SLURM_RESTART_COUNT counts
  // the job's requeues, requested stops included); a node named in two failures is excluded.
  int max_restarts = 0;
  // Elastic shrink: the job may start (or be requeued) on as few as this many nodes (0: always
  // `nodes`). On fewer nodes it trains with fewer data-parallel replicas and grad_accum grown to
  // keep the global batch: the config's replicas (nodes × ntasks_per_node / ranks_per_replica)
  // times its grad_accum must divide by the replicas it gets.
  int min_nodes = 0;
  int ranks_per_replica = 1;             // the config's parallel.tp × parallel.pp
  int grad_accum = 1;                    // the config's train.grad_accum
  std::vector<std::string> sbatch_args;  // extra #SBATCH lines' arguments
};

// Quotes a word for sh.
std::string shell_quote(const std::string& s);
// Quotes an #SBATCH option's value as sbatch reads it (double quotes, backslash escapes), when it
// holds a space, a quote, a backslash or a #. A line break cannot be carried: an error.
std::string sbatch_quote(const std::string& s);

std::string sbatch_script(const SubmitOptions& o);

// Writes the script under out_dir, runs `sbatch --parsable` on it and returns the job id.
std::string submit_job(const SubmitOptions& o, std::string* script_path);

}  // namespace kiln
