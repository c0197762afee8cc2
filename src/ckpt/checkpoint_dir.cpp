#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/file.h"
#include "core/process.h"

namespace fs = std::filesystem;

namespace kiln {

std::string checkpoint_name(int64_t step) {
  return fmt::format("step_{:08d}", step);
}

namespace {
std::optional<int64_t> parse_step(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}
}  // namespace

std::vector<CheckpointRef> list_checkpoints(const std::string& root) {
  std::vector<CheckpointRef> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory()) continue;
    auto step = parse_step(e.path().filename().string());
    if (step) out.push_back({*step, e.path().string()});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointRef& a, const CheckpointRef& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointRef> latest_checkpoint(const std::string& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

namespace {
// ".tmp-step_00000100.<host>.<pid>": the writer's host and pid; nullopt for other names (an older
// kiln's ".tmp-step_N-<pid>", which carried no host).
std::optional<std::pair<std::string, long>> temp_writer(const std::string& name) {
  const auto first = name.find('.', 5), last = name.rfind('.');  // host names may hold dots
  if (name.rfind(".tmp-step_", 0) != 0 || first == std::string::npos || last <= first + 1)
    return std::nullopt;
  std::string pid = name.substr(last + 1);
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::pair{name.substr(first + 1, last - first - 1), std::stol(pid)};
}

bool alive_here(const std::pair<std::string, long>& w) {
  if (w.first != host_name() || w.second == static_cast<long>(::getpid())) return false;
  if (::kill(static_cast<pid_t>(w.second), 0) != 0 && errno != EPERM) return false;
  // A zombie answers kill(0) but writes nothing: a rank killed mid-save whose parent (mpirun,
  // or a container's init) has not reaped it yet.
  std::ifstream stat(fmt::format("/proc/{}/stat", w.second));
  std::string line;
  if (!std::getline(stat, line)) return true;  // no procfs: assume it lives
  const auto close = line.rfind(')');
  const char state = close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
  return state != 'Z' && state != 'X';
}
}  // namespace

std::vector<std::string> recover_checkpoint_dir(const std::string& root) {
  std::vector<std::string> notes;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return notes;
  std::vector<fs::path> temps;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) temps.push_back(e.path());
  std::sort(temps.begin(), temps.end());
  for (const auto& t : temps) {
    const std::string name = t.filename().string();
    if (name.rfind(".tmp-old-", 0) == 0) {
      // A complete checkpoint moved aside to be replaced: if its replacement never arrived, it is
      // the only copy of that step.
      const fs::path final_dir = fs::path(root) / name.substr(9);
      if (!fs::exists(final_dir, ec)) {
        fs::rename(t, final_dir, ec);
        if (ec) fail("cannot restore {} to {}: {}", t.string(), final_dir.string(), ec.message());
        notes.push_back(fmt::format("restored {} from {} (a rewrite of it was interrupted)",
                                    final_dir.string(), name));
        continue;
      }
    } else if (auto w = temp_writer(name); w && alive_here(*w)) {
      notes.push_back(fmt::format(
          "kept {}: its writer, pid {} on this host, is still running (not a kiln run holding "
          "this directory's lock; stop it if it is a leftover)",
          t.string(), w->second));
      continue;
    }
    fs::remove_all(t, ec);
    if (ec) fail("cannot remove the unfinished checkpoint {}: {}", t.string(), ec.message());
    notes.push_back(fmt::format("removed the unfinished checkpoint {}", t.string()));
  }
  return notes;
}

std::string checkpoint_temp_dir(const std::string& root, int64_t step, const std::string& host,
                                int64_t pid) {
  return (fs::path(root) / fmt::format(".tmp-{}.{}.{}", checkpoint_name(step), host, pid)).string();
}

void create_checkpoint_temp(const std::string& tmp) {
  fs::create_directories(fs::path(tmp).parent_path());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
}

void discard_checkpoint_temp(const std::string& tmp) noexcept {
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

std::string publish_checkpoint(const std::string& root, int64_t step, const std::string& tmp,
                               int keep_last) {
  const std::string name = checkpoint_name(step);
  const std::string final_dir = (fs::path(root) / name).string();
  std::string leftover;  // once the new copy is in place: what is left to remove
  try {
    fsync_path(tmp);
    if (fs::exists(final_dir)) {
      // The same step written again (a resumed run). One atomic swap where the filesystem has
      // it; otherwise the old copy moves aside first, so that at every instant one complete copy
      // exists under a name recover_checkpoint_dir knows.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
        leftover = tmp;  // now the old copy
      } else {
        std::string old = (fs::path(root) / (".tmp-old-" + name)).string();
        fs::remove_all(old);
        fs::rename(final_dir, old);
        fsync_path(root);
        fs::rename(tmp, final_dir);
        leftover = old;
      }
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_path(root);
  } catch (const std::exception& e) {
    if (leftover.empty()) {  // not published: the temporary directory goes
      discard_checkpoint_temp(tmp);
      throw;
    }
    fmt::print(stderr,
               "kiln: warning: checkpoint {} is in place, but syncing {} failed: {} (a machine "
               "crash now could lose it)\n",
               final_dir, root, e.what());
  }
  // The checkpoint is in place: failing to tidy up is said, not an error of the save.
  try {
    if (!leftover.empty()) fs::remove_all(leftover);
    if (keep_last > 0) {
      auto all = list_checkpoints(root);
      for (size_t i = 0; i + keep_last < all.size(); i++) fs::remove_all(all[i].dir);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr,
               "kiln: warning: checkpoint {} is complete, but tidying {} failed: {} (the next "
               "start removes what is left)\n",
               final_dir, root, e.what());
  }
  return final_dir;
}

std::string commit_checkpoint(const std::string& root, int64_t step,
                              const std::function<void(const std::string& dir)>& write,
                              int keep_last) {
  const std::string tmp = checkpoint_temp_dir(root, step, host_name(), ::getpid());
  create_checkpoint_temp(tmp);
  try {
    write(tmp);
  } catch (...) {
    discard_checkpoint_temp(tmp);
    throw;
  }
  return publish_checkpoint(root, step, tmp, keep_last);
}

}  // namespace kiln
