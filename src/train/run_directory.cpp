#include "train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/process.h"
#include "launch/job_env.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

std::optional<RunDirHolder> read_holder(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
    text.append(buf, static_cast<size_t>(n));
    off += n;
    if (text.size() > (1 << 20)) break;  // not ours: a lock file is a few hundred bytes
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  RunDirHolder h;
  h.host = j.value("host", std::string("?"));
  h.pid = j.value("pid", int64_t{0});
  h.since = j.value("since", 0.0);
  h.job_id = j.value("slurm_job_id", std::string());
  h.released = j.value("released", false);
  return h;
}

std::string describe(const RunDirHolder& h) {
  std::string s = fmt::format("kiln pid {} on host {}", h.pid, h.host);
  if (h.since > 0) s += fmt::format(", running for {:.0f} s", unix_seconds() - h.since);
  if (!h.job_id.empty()) s += fmt::format(", Slurm job {}", h.job_id);
  return s;
}

void write_holder(int fd, const nlohmann::json& j) {
  std::string text = j.dump() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) return;
  fdatasync(fd);  // best effort: the lock itself is the kernel's, the text only names its holder
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir, double wait_seconds) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  path_ = (fs::path(dir) / "run.lock").string();
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail("cannot open the run directory's lock {}: {} (is train.out_dir writable?)", path_,
         std::strerror(errno));
  const double deadline = now_seconds() + wait_seconds;
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd_);
      fail("cannot lock the run directory {}: {}", path_, std::strerror(err));
    }
    if (now_seconds() >= deadline) {
      auto h = read_holder(fd_);
      ::close(fd_);
      fail(
          "train.out_dir {} is in use by another run ({}): one run directory holds one run at a "
          "time. Wait for it to end, stop it (kill {}), or set another train.out_dir",
          dir, h ? describe(*h) : std::string("holder unknown"), h ? h->pid : 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto prev = read_holder(fd_);
  if (prev && !prev->released) stale_ = prev;
  JobEnv env = job_env();
  write_holder(fd_, {{"host", host_name()},
                     {"pid", static_cast<int64_t>(getpid())},
                     {"since", unix_seconds()},
                     {"slurm_job_id", env.job_id},
                     {"released", false}});
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  write_holder(fd_, {{"host", host_name()},
                     {"pid", static_cast<int64_t>(getpid())},
                     {"since", 0},
                     {"released", true}});
  ::close(fd_);  // closing the last descriptor releases the flock
}

std::string earlier_run_in(const std::string& out_dir) {
  const std::string root = (fs::path(out_dir) / "checkpoints").string();
  if (auto last = latest_checkpoint(root))
    return fmt::format("checkpoints up to step {} ({})", last->step, last->dir);
  std::error_code ec;
  const fs::path metrics = fs::path(out_dir) / "metrics.jsonl";
  if (fs::is_regular_file(metrics, ec) && fs::file_size(metrics, ec) > 0)
    return fmt::format("its metrics ({})", metrics.string());
  return "";
}

void remove_earlier_run(const std::string& out_dir) {
  std::error_code ec;
  fs::remove_all(fs::path(out_dir) / "checkpoints", ec);
  if (ec) fail("--overwrite: cannot remove {}/checkpoints: {}", out_dir, ec.message());
  fs::remove(fs::path(out_dir) / "metrics.jsonl", ec);
  if (ec) fail("--overwrite: cannot remove {}/metrics.jsonl: {}", out_dir, ec.message());
}

}  // namespace kiln
