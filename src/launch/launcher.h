// `kiln launch`: starts N ranks of `kiln train` on this machine through mpirun (with the flags
// that root and containers need), prefixes each output line with its rank (only rank 0's
// progress is shown), and when a rank dies, stops the job, tells which rank died, how and at
// which step, and restarts it from the newest complete checkpoint, at most max_restarts times.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct LaunchOptions {
  int ranks = 1;
  int max_restarts = 0;
  std::string kiln_binary;               // this executable
  std::vector<std::string> train_args;   // CONFIG and --set ... passed to `kiln train`
  std::vector<std::string> mpirun_args;  // extra arguments for mpirun
  std::string out_dir;  // the run directory: restarts are recorded in its metrics.jsonl
  std::string resume;   // the first attempt's train.resume ("" = the config's); later: "auto"
  // Elastic shrink: when the same rank fails in two attempts in a row, the next attempt runs
  // fewer data-parallel replicas (never fewer than min_ranks processes; 0: never shrink) with
  // train.grad_accum raised so that the global batch, and so the training math, stay the same.
  int min_ranks = 0;
  int grad_accum = 1;         // the config's train.grad_accum
  int ranks_per_replica = 1;  // the config's parallel.pp × parallel.tp
};

// The layout a job of `ranks` processes shrinks to: the most data-parallel replicas below its
// own, of at least `min_ranks` processes, whose count divides the global batch's micro-batches
// (replicas × grad_accum); {ranks, grad_accum} of that layout, or {0, 0} when none does.
std::pair<int, int> shrink_layout(int ranks, int ranks_per_replica, int grad_accum, int min_ranks);

// How one attempt ended, read from mpirun's exit status and its messages.
struct RankFailure {
  int rank = -1;            // -1: unknown
  int signal = 0;           // killed by this signal, or
  int exit_code = 0;        // exited with this code
  int mpirun_signal = 0;    // mpirun itself was killed by this signal (its ranks' fate unknown)
  long last_step = -1;      // last step rank 0 finished
  std::string hang;         // a watchdog's report, when the job ended on a hang
  std::string how() const;  // "killed by signal 9 (Killed)", "exit code 1", "hung"
  std::string describe() const;
  // Trying again cannot help: a start-up refusal (kExitBadInput) or a diverged run
  // (kExitNonFinite). Empty when a restart may succeed.
  std::string why_final() const;
};

// Parses mpirun's report of a failed job ("process rank 1 ... exited on signal 9", "Process
// name: [[x,y],1] Exit code: 3").
RankFailure parse_mpirun_failure(const std::string& output);

// mpirun and the flags kiln needs on one machine (more ranks than cores; root in containers).
std::vector<std::string> mpirun_prefix(int ranks);

// The mark (KILN_LAUNCH_ID) this launcher puts in the environment of attempt `attempt`'s ranks.
std::string launch_id(int attempt);
// The processes of this machine whose environment carries that mark.
std::vector<int> processes_of_attempt(const std::string& id);

// The mpirun command line for attempt `attempt` (0: the first; later ones resume).
std::vector<std::string> mpirun_command(const LaunchOptions& o, int attempt);

// The last step rank 0 finished, from <out_dir>/progress.json (written by the trainer after every
// step), if that record is from a run that started at or after `since` (unix seconds); else -1.
long progress_step(const std::string& out_dir, double since);

// Runs the job; returns the process exit code (0 on success).
int launch(const LaunchOptions& o);

}  // namespace kiln
