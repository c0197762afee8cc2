// A run directory (train.out_dir) belongs to one run at a time. Rank 0 holds an advisory lock on
// <out_dir>/run.lock (flock: released by the kernel when the holder exits or dies, also over NFS
// where flock maps to byte-range locks), and the lock file names its holder, so a second run, or
// a launcher's restart while orphaned ranks of the last attempt still train, is refused with the
// holder's host and pid instead of mixing its checkpoints and metrics with another run's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

struct RunDirHolder {
  std::string host;
  int64_t pid = 0;
  double since = 0;       // unix seconds
  std::string job_id;     // Slurm's, when there is one
  bool released = false;  // it let go normally (otherwise it died holding the lock)
};

class RunDirLock {
 public:
  // Takes the lock, waiting up to wait_seconds for a holder that is about to exit (a launcher's
  // restart follows the old ranks' exit closely). Throws kiln::Error naming the holder (host,
  // pid, since when) when another live process keeps it.
  explicit RunDirLock(const std::string& dir, double wait_seconds = 5);
  ~RunDirLock();  // marks the lock file released and lets go
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  // The holder recorded before this one, if it died holding the lock (a stale lock, taken over).
  const std::optional<RunDirHolder>& stale() const { return stale_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::optional<RunDirHolder> stale_;
};

// What an earlier run left in out_dir that a fresh run (train.resume = "none") would mix with or
// prune: its checkpoints and its metrics.jsonl. Empty when out_dir holds no earlier run.
std::string earlier_run_in(const std::string& out_dir);
// Deletes an earlier run's checkpoints and metrics (train.overwrite = true).
void remove_earlier_run(const std::string& out_dir);

}  // namespace kiln
