#include "train/run_directory.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/process.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::TempDir;

TEST(RunDirLock, ASecondHolderIsRefusedWithTheFirstOnesHostAndPid) {
  TempDir dir;
  RunDirLock first(dir.path());
  std::string e = error_of([&] { RunDirLock second(dir.path(), 0.2); });
  EXPECT_NE(e.find("is in use by another run"), std::string::npos) << e;
  EXPECT_NE(e.find("pid " + std::to_string(getpid())), std::string::npos) << e;
  EXPECT_NE(e.find("host " + host_name()), std::string::npos) << e;
  EXPECT_NE(e.find("train.out_dir"), std::string::npos) << e;
}

TEST(RunDirLock, ALockReleasedNormallyIsNotStale) {
  TempDir dir;
  { RunDirLock first(dir.path()); }
  RunDirLock second(dir.path(), 0);
  EXPECT_FALSE(second.stale());
}

TEST(RunDirLock, AHolderKilledWithoutReleasingLeavesAStaleLockThatIsTakenOver) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* lock = new RunDirLock(dir.path());  // never destroyed: the process is killed
    (void)lock;
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  // While the child lives, its lock holds.
  std::string e = error_of([&] { RunDirLock busy(dir.path(), 0.1); });
  EXPECT_NE(e.find("pid " + std::to_string(child)), std::string::npos) << e;
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  RunDirLock next(dir.path(), 1);
  ASSERT_TRUE(next.stale());
  EXPECT_EQ(next.stale()->pid, child);
  EXPECT_EQ(next.stale()->host, host_name());
}

TEST(RunDirLock, EarlierRunIsSeenInCheckpointsOrMetrics) {
  TempDir dir;
  EXPECT_EQ(earlier_run_in(dir.path()), "");
  std::ofstream(dir / "metrics.jsonl") << "{\"type\":\"run_start\"}\n";
  EXPECT_NE(earlier_run_in(dir.path()).find("metrics.jsonl"), std::string::npos);
  fs::create_directories(dir / "checkpoints/step_00000007");
  EXPECT_NE(earlier_run_in(dir.path()).find("step 7"), std::string::npos);
  remove_earlier_run(dir.path());
  EXPECT_EQ(earlier_run_in(dir.path()), "");
}

}  // namespace
}  // namespace kiln
