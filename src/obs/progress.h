// <out_dir>/progress.json: the last step rank 0 finished, rewritten in place after every step.
// `kiln launch` reads it when a job ends badly, to say "after step N" exactly (progress lines are
// printed only every train.log_every steps, heartbeats once a second). One pwrite of a
// fixed-width record per step, not fsynced: a killed process's writes stay in the page cache,
// and only a machine crash loses them, when the launcher is gone too.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

struct ProgressRecord {
  int64_t step = -1;
  double run_started = 0;  // unix seconds when the run (this attempt) started
  double time = 0;         // unix seconds when `step` finished
  int64_t pid = 0;
  std::string host;
};

class ProgressFile {
 public:
  // Creates or truncates <out_dir>/progress.json. A file that cannot be written is reported
  // once on stderr; training goes on without it.
  ProgressFile(const std::string& out_dir, double run_started);
  ~ProgressFile();
  ProgressFile(const ProgressFile&) = delete;
  ProgressFile& operator=(const ProgressFile&) = delete;
  void write(int64_t step);

 private:
  int fd_ = -1;
  std::string path_;
  double run_started_;
  std::string host_;
};

// The record in <out_dir>/progress.json; nullopt when it is missing or unreadable.
std::optional<ProgressRecord> read_progress(const std::string& out_dir);

}  // namespace kiln
