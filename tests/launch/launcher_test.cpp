// kiln launch's reading of a failed attempt: who died and how, whether a restart can help, the
// step rank 0 last finished, and finding the ranks an attempt left behind.
#include "launch/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "core/clock.h"
#include "core/exit_codes.h"
#include "obs/progress.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;

// Elastic shrink keeps the global batch: the most replicas below the job's own, no fewer ranks
// than asked, whose count divides the step's micro-batches (replicas × grad_accum).
TEST(Launcher, ShrinkKeepsTheGlobalBatchWithTheMostReplicasLeft) {
  EXPECT_EQ(shrink_layout(4, 1, 1, 1), (std::pair{2, 2}));  // 3 does not divide 4
  EXPECT_EQ(shrink_layout(4, 1, 3, 1), (std::pair{3, 4}));  // 12 micro-batches: 3 x 4
  EXPECT_EQ(shrink_layout(8, 2, 1, 2), (std::pair{4, 2}));  // 4 replicas of 2 stages: 2 of 2
  EXPECT_EQ(shrink_layout(4, 1, 1, 3), (std::pair{0, 0}));  // 2 ranks would be fewer than 3
  EXPECT_EQ(shrink_layout(1, 1, 4, 1), (std::pair{0, 0}));  // nothing below one replica
  EXPECT_EQ(shrink_layout(6, 1, 1, 1), (std::pair{3, 2}));
}

TEST(Launcher, MpirunKilledItselfIsNotReportedAsARank) {
  RankFailure f;
  f.mpirun_signal = SIGKILL;
  f.last_step = 12;
  EXPECT_EQ(f.describe(), "mpirun itself was killed by signal 9 (Killed) after step 12");
  EXPECT_EQ(f.how(), "mpirun killed by signal 9 (Killed)");
  EXPECT_EQ(f.why_final(), "");  // a restart may help
}

TEST(Launcher, AnUnnamedExitIsMpirunsNotARanks) {
  RankFailure f;
  f.exit_code = 1;
  EXPECT_EQ(f.describe(),
            "mpirun exited with code 1 without naming a failed rank before its "
            "first step");
  f.rank = 1;
  f.last_step = 7;
  EXPECT_EQ(f.describe(), "rank 1 exited with code 1 after step 7");
}

TEST(Launcher, StartUpRefusalsAndDivergenceAreFinalOtherFailuresAreNot) {
  RankFailure bad;
  bad.rank = 0;
  bad.exit_code = kExitBadInput;
  EXPECT_NE(bad.why_final().find("not restarted"), std::string::npos);
  RankFailure nan;
  nan.exit_code = kExitNonFinite;
  EXPECT_NE(nan.why_final().find("diverged"), std::string::npos);
  RankFailure crash;
  crash.exit_code = 1;
  EXPECT_EQ(crash.why_final(), "");
  RankFailure killed;  // a signal says nothing about the input: a restart may help
  killed.signal = SIGKILL;
  killed.exit_code = kExitBadInput;
  EXPECT_EQ(killed.why_final(), "");
}

TEST(Launcher, AbortWithTheBadInputCodeIsParsed) {
  auto f = parse_mpirun_failure(
      "MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD\nwith errorcode 78.\n");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.exit_code, kExitBadInput);
  EXPECT_NE(f.why_final(), "");
}

TEST(Launcher, ProgressStepIsTheLastFinishedStepOfThisAttemptOnly) {
  TempDir dir;
  EXPECT_EQ(progress_step(dir.path(), 0), -1);  // no file
  const double t0 = unix_seconds();
  {
    ProgressFile p(dir.path(), t0);
    p.write(0);
    p.write(123456789);  // longer, then shorter: the record is fixed-width
    p.write(17);
  }
  EXPECT_EQ(progress_step(dir.path(), t0 - 1), 17);
  EXPECT_EQ(progress_step(dir.path(), t0 + 60), -1);  // from an earlier attempt
  auto r = read_progress(dir.path());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pid, getpid());
  std::ofstream(dir / "progress.json") << "{\"step\": 3";  // torn or garbage: not believed
  EXPECT_EQ(progress_step(dir.path(), 0), -1);
}

TEST(Launcher, FindsTheProcessesThatCarryAnAttemptsMark) {
  const std::string id = launch_id(5) + "-test";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string env = "KILN_LAUNCH_ID=" + id;
    char* envp[] = {env.data(), nullptr};
    execle("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr), envp);
    _exit(127);
  }
  std::vector<int> found;
  for (int i = 0; i < 500 && found.empty(); i++) {  // until exec has replaced the environment
    found = processes_of_attempt(id);
    if (found.empty()) usleep(10000);
  }
  EXPECT_EQ(found, std::vector<int>{child});
  EXPECT_TRUE(processes_of_attempt(id + "0").empty());  // exact match only
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(processes_of_attempt(id).empty());
}

TEST(Launcher, FirstAttemptCarriesResumeLaterOnesResumeAuto) {
  LaunchOptions o;
  o.ranks = 2;
  o.kiln_binary = "/k";
  o.train_args = {"c.toml"};
  o.resume = "must";
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& a : v) s += a + " ";
    return s;
  };
  EXPECT_NE(joined(mpirun_command(o, 0)).find("--set train.resume=must"), std::string::npos);
  EXPECT_NE(joined(mpirun_command(o, 1)).find("--set train.resume=auto"), std::string::npos);
  o.resume.clear();
  EXPECT_EQ(joined(mpirun_command(o, 0)).find("train.resume"), std::string::npos);
  EXPECT_NE(joined(mpirun_command(o, 0)).find("KILN_LAUNCH_ID=" + launch_id(0)), std::string::npos);
}

}  // namespace
}  // namespace kiln
