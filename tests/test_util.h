// Helpers shared by the tests: temporary directories and running the kiln binary.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace kiln::testing {

// No test reads or writes the developer's peak cache (~/.cache/kiln/peak.json, written by `kiln
// bench peak`), also when kiln_tests runs outside ctest: unless the environment names a cache
// directory, it is one where nothing can be created. A test that needs a cache points
// KILN_CACHE_DIR at its own directory (ScopedEnv, or in the command it runs).
inline const bool kNoDeveloperPeakCache = [] {
  setenv("KILN_CACHE_DIR", "/dev/null/kiln-test-cache", /*overwrite=*/0);
  return true;
}();

// A fresh directory removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    path_ = mkdtemp(buf.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Sets an environment variable (or unsets it: nullopt) until the object dies, then puts back
// what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct RunResult {
  int exit_code;
  std::string output;  // stdout and stderr together
};

// Runs a shell command and captures its output (stdout and stderr together).
inline RunResult run_command(const std::string& cmd) {
  RunResult r{0, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs `kiln <args>` through the shell and captures its output.
inline RunResult run_kiln(const std::string& args) {
  return run_command(std::string(KILN_BIN) + " " + args);
}

// Starts `kiln <args>` in the background with its stdout and stderr in `log` ("/dev/null" to
// drop them); the shell execs kiln, so the returned pid is kiln's own and signals reach it.
inline pid_t spawn_kiln(const std::string& args, const std::string& log) {
  const std::string cmd = "exec " + std::string(KILN_BIN) + " " + args + " > " + log + " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// A byte-level dataset of `lines` numbered pangram lines, prepared by `kiln data prepare` into
// dir/data (with `prepare_args`, e.g. " --val-fraction 0.2"); the corpus is dir/corpus.txt.
// Returns kiln's output when it fails, else "".
inline std::string prepare_pangram_data(const std::string& dir, int lines,
                                        const std::string& prepare_args = "") {
  std::string text;
  for (int i = 0; i < lines; i++)
    text += "Line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog.\n";
  std::ofstream(dir + "/corpus.txt") << text;
  auto r = run_kiln("data prepare --tokenizer bytes --input " + dir + "/corpus.txt --output " +
                    dir + "/data" + prepare_args);
  return r.exit_code == 0 ? "" : r.output;
}

// Polls `ready` every millisecond for up to `seconds`: true once it holds; false when time ran
// out or process `pid` ended first (its wait status then in *status).
inline bool wait_until(pid_t pid, const std::function<bool()>& ready, double seconds,
                       int* status = nullptr) {
  const int polls = static_cast<int>(seconds * 1000);
  for (int i = 0; i < polls; i++) {
    if (ready()) return true;
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (status) *status = st;
      return ready();
    }
    usleep(1000);
  }
  return ready();
}

// For a job started with spawn_kiln (`pid`) in run directory `out`: once checkpoint `step`
// exists and rank `victim` has written its pid, SIGKILLs that rank. "" when it did, else why
// not (with the job's log).
inline std::string kill_rank_after_checkpoint(pid_t pid, const std::string& out, int victim,
                                              int step, double seconds) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  const std::string ck = out + "/checkpoints/" + name;
  const std::string pidfile = out + "/pids/rank-" + std::to_string(victim) + ".pid";
  auto there = [&] { return std::filesystem::exists(ck) && std::filesystem::exists(pidfile); };
  if (!wait_until(pid, there, seconds)) return "no " + ck + " and " + pidfile + " in time";
  std::ifstream f(pidfile);
  pid_t rank_pid = 0;
  f >> rank_pid;
  if (rank_pid <= 0) return "no pid in " + pidfile;
  kill(rank_pid, SIGKILL);
  return "";
}

// Runs `kiln <args>` as n ranks under tests/mpirun.sh (one thread each), output captured.
inline RunResult run_kiln_mpi(int n, const std::string& args) {
  return run_command(std::string(KILN_MPIRUN) + " -n " + std::to_string(n) +
                     " -x OMP_NUM_THREADS=1 " + KILN_BIN + " " + args);
}

// The training loss of each step in a run's metrics.jsonl, by step.
inline std::map<int, double> train_losses(const std::string& metrics) {
  std::map<int, double> out;
  std::ifstream f(metrics);
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

// A file's bytes ("" when it cannot be read).
inline std::string bytes_of(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string out;
  std::array<char, 65536> buf;
  size_t k;
  while ((k = std::fread(buf.data(), 1, buf.size(), f)) > 0) out.append(buf.data(), k);
  std::fclose(f);
  return out;
}

// The message of the kiln::Error that fn throws, or "" if it throws none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline std::string source_path(const std::string& rel) {
  return std::string(KILN_SOURCE_DIR) + "/" + rel;
}

}  // namespace kiln::testing
