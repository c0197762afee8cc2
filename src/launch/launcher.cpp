#include "launch/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "obs/metrics_log.h"
#include "obs/progress.h"

namespace kiln {

std::string RankFailure::how() const {
  if (!hang.empty()) return "hung";
  if (mpirun_signal)
    return fmt::format("mpirun killed by signal {} ({})", mpirun_signal, strsignal(mpirun_signal));
  return signal ? fmt::format("killed by signal {} ({})", signal, strsignal(signal))
                : fmt::format("exit code {}", exit_code);
}

std::string RankFailure::describe() const {
  std::string when = last_step > 0 ? fmt::format(" after step {}", last_step)
                                   : std::string(" before its first step");
  if (!hang.empty()) return "the job hung" + when + " (" + hang + ")";
  if (mpirun_signal)
    return fmt::format("mpirun itself was killed by signal {} ({}){}", mpirun_signal,
                       strsignal(mpirun_signal), when);
  if (rank < 0 && !signal && exit_code != kExitBadInput && exit_code != kExitNonFinite)
    return fmt::format("mpirun exited with code {} without naming a failed rank{}", exit_code,
                       when);
  std::string who = rank >= 0 ? fmt::format("rank {}", rank) : std::string("a rank");
  std::string how = signal ? fmt::format("was killed by signal {} ({})", signal, strsignal(signal))
                           : fmt::format("exited with code {}", exit_code);
  return who + " " + how + when;
}

std::string RankFailure::why_final() const {
  if (mpirun_signal || signal || !hang.empty()) return "";
  if (exit_code == kExitBadInput)
    return "the job refused its input at start-up (config, data, checkpoint or run directory; "
           "the message above says which): the same command would fail the same way, so it is "
           "not restarted. Fix the input and run it again";
  if (exit_code == kExitNonFinite)
    return "training diverged (non-finite loss or gradients, see above): a restart from the last "
           "checkpoint would repeat the same steps, so it is not restarted. Lower train.lr or "
           "resume from an earlier checkpoint";
  return "";
}

long progress_step(const std::string& out_dir, double since) {
  if (out_dir.empty()) return -1;
  auto p = read_progress(out_dir);
  if (!p || p->run_started < since) return -1;
  return static_cast<long>(p->step);
}

RankFailure parse_mpirun_failure(const std::string& out) {
  RankFailure f;
  std::smatch m;
  static const std::regex signaled(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex exited(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(\d+))");
  static const std::regex aborted(
      R"(MPI_ABORT was invoked on rank (\d+) in communicator \S+\s+with errorcode (\d+))");
  if (std::regex_search(out, m, aborted)) {
    f.rank = std::stoi(m[1]);
    f.exit_code = std::stoi(m[2]);
  } else if (std::regex_search(out, m, signaled)) {
    f.rank = std::stoi(m[1]);
    f.signal = std::stoi(m[2]);
  } else if (std::regex_search(out, m, exited)) {
    f.rank = std::stoi(m[1]);
    f.exit_code = std::stoi(m[2]);
  }
  return f;
}

std::vector<std::string> mpirun_prefix(int ranks) {
  std::vector<std::string> cmd = {"mpirun",          "-n",        std::to_string(ranks),
                                  "--oversubscribe", "--bind-to", "none"};
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  return cmd;
}

std::string launch_id(int attempt) {
  // The pid alone could be reused by a later launcher while an earlier one's ranks live on: a
  // random nonce drawn once per launcher process makes the mark its own.
  static const uint64_t nonce = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(now_seconds() * 1e9);
  }();
  return fmt::format("{}.{:016x}.{}", getpid(), nonce, attempt);
}

namespace {
bool carries_mark(long pid, const std::string& want) {
  std::ifstream f(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  if (!f) return false;  // gone, or another user's
  std::string entry;
  while (std::getline(f, entry, '\0'))
    if (entry == want) return true;
  return false;
}
}  // namespace

std::vector<int> processes_of_attempt(const std::string& id) {
  std::vector<int> found;
  const std::string want = "KILN_LAUNCH_ID=" + id;
  DIR* d = opendir("/proc");
  if (!d) return found;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == getpid()) continue;
    if (carries_mark(pid, want)) found.push_back(static_cast<int>(pid));
  }
  closedir(d);
  return found;
}

std::vector<std::string> mpirun_command(const LaunchOptions& o, int attempt) {
  const bool resume = attempt > 0;
  std::vector<std::string> cmd = mpirun_prefix(o.ranks);
  cmd.push_back("--tag-output");
  // The ranks count the restarts (their metrics and run records say so).
  cmd.push_back("-x");
  cmd.push_back(fmt::format("KILN_RESTART_COUNT={}", attempt));
  // Marks this attempt's ranks, so that those mpirun leaves behind can be found and stopped.
  cmd.push_back("-x");
  cmd.push_back("KILN_LAUNCH_ID=" + launch_id(attempt));
  cmd.insert(cmd.end(), o.mpirun_args.begin(), o.mpirun_args.end());
  cmd.push_back(o.kiln_binary);
  cmd.push_back("train");
  cmd.insert(cmd.end(), o.train_args.begin(), o.train_args.end());
  if (resume || !o.resume.empty()) {
    cmd.push_back("--set");
    cmd.push_back("train.resume=" + (resume ? std::string("auto") : o.resume));
  }
  return cmd;
}

namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_stop_signal = 0;  // the user asked the launcher itself to stop

void forward_signal(int sig) {
  g_stop_signal = sig;
  if (g_child > 0) kill(g_child, sig);
}

struct Attempt {
  int status = 0;
  std::string output;   // everything mpirun printed
  long last_step = -1;  // the last step rank 0 reported
  int error_rank = -1;  // the first rank that printed "kiln: error:"
  std::string hang;     // the first watchdog report
};

// Runs one attempt and streams its output with rank prefixes.
Attempt run_attempt(const std::vector<std::string>& cmd) {
  Attempt a;
  int fds[2];
  if (pipe(fds) != 0) fail("launch: pipe failed: {}", std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) fail("launch: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  close(fds[1]);
  FILE* in = fdopen(fds[0], "r");
  static const std::regex tag(R"(^\[\d+,(\d+)\]<(stdout|stderr)>:\s?(.*)$)");
  static const std::regex step(R"(^step\s+(\d+)/\d+ \|)");
  char* line = nullptr;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&line, &cap, in)) > 0) {
    std::string s(line, n);
    a.output += s;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    std::smatch m;
    if (std::regex_match(s, m, tag)) {
      int rank = std::stoi(m[1]);
      std::string text = m[3];
      std::smatch sm;
      if (rank == 0 && std::regex_search(text, sm, step)) a.last_step = std::stol(sm[1]);
      if (a.error_rank < 0 && text.rfind("kiln: error:", 0) == 0) a.error_rank = rank;
      if (a.hang.empty() && text.rfind("kiln: error: watchdog: ", 0) == 0) {
        a.hang = text.substr(std::strlen("kiln: error: watchdog: "));
        static const std::regex after(R"(after step (\d+))");
        std::smatch am;  // the watchdog knows the step even when progress lines are sparse
        if (std::regex_search(a.hang, am, after))
          a.last_step = std::max(a.last_step, std::stol(am[1]));
      }
      // Rank 0 speaks for the job; the others only when they report an error.
      if (rank == 0 || m[2] == "stderr") fmt::print("[rank {}] {}\n", rank, text);
    } else if (!s.empty()) {
      fmt::print("[mpirun] {}\n", s);
    }
    std::fflush(stdout);
  }
  free(line);
  fclose(in);
  waitpid(pid, &a.status, 0);
  g_child = 0;
  return a;
}

}  // namespace

namespace {

// Ranks of an attempt that outlived its mpirun (killed, crashed) would go on training and hold
// the run directory: stop them before anything restarts. Returns how many there were; fails when
// they do not go (a process stuck in uninterruptible I/O), since a restart would then find the
// run directory held.
int stop_left_behind_ranks(int attempt) {
  const std::string id = launch_id(attempt), want = "KILN_LAUNCH_ID=" + id;
  std::vector<int> left = processes_of_attempt(id);
  for (int pid : left)
    if (carries_mark(pid, want)) kill(pid, SIGKILL);  // checked again: the pid is still ours
  for (int i = 0; i < 6000; i++) {                    // up to a minute
    std::vector<int> still = processes_of_attempt(id);
    if (still.empty()) return static_cast<int>(left.size());
    if (i % 500 == 499)
      fmt::print(stderr, "launch: waiting for {} rank process{} of attempt {} to exit\n",
                 still.size(), still.size() == 1 ? "" : "es", attempt + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string pids;
  for (int pid : processes_of_attempt(id)) pids += fmt::format(" {}", pid);
  fail(
      "launch: rank processes of attempt {} (pids{}) did not exit a minute after SIGKILL (stuck "
      "in I/O?); not restarting while they may hold the run directory. Check them, then run "
      "again with --resume",
      attempt + 1, pids);
}

}  // namespace

std::pair<int, int> shrink_layout(int ranks, int ranks_per_replica, int grad_accum, int min_ranks) {
  const int replicas = ranks / ranks_per_replica;
  const int64_t micro = static_cast<int64_t>(replicas) * grad_accum;  // per step, job-wide
  for (int d = replicas - 1; d >= 1 && d * ranks_per_replica >= min_ranks; d--)
    if (micro % d == 0) return {d * ranks_per_replica, static_cast<int>(micro / d)};
  return {0, 0};
}

int launch(const LaunchOptions& o) {
  if (o.ranks < 1) fail("launch: -n must be at least 1");
  if (o.max_restarts < 0) fail("launch: --max-restarts must not be negative");
  if (o.min_ranks < 0 || o.min_ranks > o.ranks)
    fail("launch: --min-ranks must be between 0 and -n ({})", o.ranks);
  signal(SIGINT, forward_signal);
  signal(SIGTERM, forward_signal);
  std::vector<RankFailure> story;
  LaunchOptions now = o;  // the layout of the next attempt (a shrink changes it)
  for (int attempt = 0;; attempt++) {
    const double started = unix_seconds();
    Attempt a = run_attempt(mpirun_command(now, attempt));
    const int status = a.status;
    // rank 0 records every step it finishes; its progress lines may be sparse.
    a.last_step = std::max(a.last_step, progress_step(o.out_dir, started));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      if (!story.empty())
        fmt::print("launch: finished after {} restart{}\n", story.size(),
                   story.size() == 1 ? "" : "s");
      return 0;
    }
    if (int n = stop_left_behind_ranks(attempt))
      fmt::print(stderr, "launch: stopped {} rank process{} that mpirun left running\n", n,
                 n == 1 ? "" : "es");
    // A stop that was asked for is not a failure: the ranks checkpoint on SIGTERM (and on
    // SIGUSR1 sent to them directly) and exit with kExitStoppedForRequeue; do not restart.
    const bool stopped_on_request =
        WIFEXITED(status) && WEXITSTATUS(status) == kExitStoppedForRequeue;
    if (g_stop_signal || stopped_on_request) {
      fmt::print(stderr,
                 "launch: the job stopped on request{}{}; not restarting. Run the same command "
                 "with --resume to continue from its checkpoint\n",
                 g_stop_signal ? fmt::format(" (signal {})", strsignal(g_stop_signal)) : "",
                 a.last_step >= 0 ? fmt::format(" after step {}", a.last_step) : "");
      if (stopped_on_request) return kExitStoppedForRequeue;
      return g_stop_signal ? 128 + g_stop_signal : 1;
    }
    RankFailure f = parse_mpirun_failure(a.output);
    f.last_step = a.last_step;
    if (WIFSIGNALED(status)) {
      f = RankFailure{};  // mpirun's own death: what it printed is not about a rank
      f.mpirun_signal = WTERMSIG(status);
      f.last_step = a.last_step;
    } else if (f.rank <
               0) {  // mpirun's report can be lost when a job aborts; the error line is not
      f.rank = a.error_rank;
      if (WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
      // mpirun exits 128 + N when a rank died of signal N and it could not say which.
      if (f.rank < 0 && f.exit_code > 128 && f.exit_code < 160) f.signal = f.exit_code - 128;
    }
    f.hang = a.hang;
    story.push_back(f);
    const std::string final_reason = f.why_final();
    const bool restarting = final_reason.empty() && attempt < o.max_restarts;
    // A rank that failed in this attempt and the one before keeps failing: go on without it.
    std::pair<int, int> shrink{0, 0};
    if (restarting && o.min_ranks > 0 && f.rank >= 0 && story.size() >= 2 &&
        story[story.size() - 2].rank == f.rank)
      shrink = shrink_layout(now.ranks, o.ranks_per_replica, now.grad_accum, o.min_ranks);
    if (!o.out_dir.empty()) {  // the run's own record of what happened to it (kiln report)
      try {
        std::filesystem::create_directories(o.out_dir);
        MetricsLog log((std::filesystem::path(o.out_dir) / "metrics.jsonl").string());
        log.write({{"type", "restart"},
                   {"time", unix_seconds()},
                   {"attempt", attempt + 1},
                   {"rank", f.rank},
                   {"how", f.how()},
                   {"after_step", f.last_step},
                   {"message", shrink.first > 0
                                   ? fmt::format("{}; going on with {} ranks, train.grad_accum {}",
                                                 f.describe(), shrink.first, shrink.second)
                                   : f.describe()},
                   {"restarting", restarting},
                   {"ranks", shrink.first > 0 ? shrink.first : now.ranks}});
      } catch (const std::exception& e) {
        fmt::print(stderr, "launch: could not record the failure in {}: {}\n", o.out_dir, e.what());
      }
    }
    if (!final_reason.empty()) {
      fmt::print(stderr, "launch: {}; {}\n", f.describe(), final_reason);
      return f.exit_code;
    }
    if (attempt >= o.max_restarts) {
      fmt::print(stderr, "launch: giving up after {} attempt{}:\n", story.size(),
                 story.size() == 1 ? "" : "s");
      for (size_t i = 0; i < story.size(); i++)
        fmt::print(stderr, "  attempt {}: {}\n", i + 1, story[i].describe());
      return 1;
    }
    if (shrink.first > 0) {
      fmt::print(stderr,
                 "launch: rank {} failed in two attempts in a row; going on with {} ranks instead "
                 "of {} and train.grad_accum {} instead of {}, the same global batch\n",
                 f.rank, shrink.first, now.ranks, shrink.second, now.grad_accum);
      now.ranks = shrink.first;
      now.grad_accum = shrink.second;
      const int replicas = shrink.first / o.ranks_per_replica;
      now.train_args.insert(now.train_args.end(),
                            {"--set", fmt::format("parallel.dp={}", replicas), "--set",
                             fmt::format("train.grad_accum={}", shrink.second)});
    } else if (o.min_ranks > 0 && f.rank >= 0 && story.size() >= 2 &&
               story[story.size() - 2].rank == f.rank) {
      fmt::print(stderr,
                 "launch: rank {} failed twice in a row, but no smaller layout of at least {} "
                 "ranks keeps the global batch of {} micro-batches; restarting as it was\n",
                 f.rank, o.min_ranks, now.ranks / o.ranks_per_replica * now.grad_accum);
    }
    fmt::print(stderr,
               "launch: {}; restarting from the newest complete checkpoint (restart {} of {})\n",
               f.describe(), attempt + 1, o.max_restarts);
  }
}

}  // namespace kiln
