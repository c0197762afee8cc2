#include "ckpt/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/process.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::TempDir;

std::string read_all(const std::string& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_step(const std::string& root, int64_t step, const std::string& text) {
  commit_checkpoint(
      root, step, [&](const std::string& dir) { std::ofstream(dir + "/state") << text; }, 0);
}

TEST(CheckpointDir, RewritingAStepReplacesItAndLeavesNoTemporary) {
  TempDir dir;
  write_step(dir.path(), 4, "first");
  write_step(dir.path(), 4, "second");
  EXPECT_EQ(read_all(dir / "step_00000004/state"), "second");
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
}

TEST(CheckpointDir, ACrashBetweenTheRenamesOfARewriteLosesNoCopy) {
  // The state a crash leaves between "move the old copy aside" and "move the new one in" on a
  // filesystem without RENAME_EXCHANGE: the old copy aside, the new one unfinished.
  TempDir dir;
  write_step(dir.path(), 4, "complete");
  fs::rename(dir / "step_00000004", dir / ".tmp-old-step_00000004");
  fs::create_directories(dir / ".tmp-step_00000004.otherhost.12345");
  auto notes = recover_checkpoint_dir(dir.path());
  EXPECT_EQ(read_all(dir / "step_00000004/state"), "complete");
  EXPECT_FALSE(fs::exists(dir / ".tmp-old-step_00000004"));
  EXPECT_FALSE(fs::exists(dir / ".tmp-step_00000004.otherhost.12345"));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("restored"), std::string::npos) << notes[0];
}

TEST(CheckpointDir, AMovedAsideCopyWhoseStepExistsIsRemoved) {
  TempDir dir;
  write_step(dir.path(), 4, "new");
  fs::create_directories(dir / ".tmp-old-step_00000004");
  recover_checkpoint_dir(dir.path());
  EXPECT_EQ(read_all(dir / "step_00000004/state"), "new");
  EXPECT_FALSE(fs::exists(dir / ".tmp-old-step_00000004"));
}

TEST(CheckpointDir, RecoveryKeepsTheTemporaryOfAWriterStillAliveOnThisHost) {
  TempDir dir;
  // Our parent (the test runner's shell or ctest) is alive: its save in progress must survive.
  const std::string live =
      dir / (".tmp-step_00000009." + host_name() + "." + std::to_string(getppid()));
  fs::create_directories(live);
  // A writer that is gone: a child that has exited and been reaped.
  pid_t child = fork();
  if (child == 0) _exit(0);
  int status;
  waitpid(child, &status, 0);
  const std::string dead =
      dir / (".tmp-step_00000008." + host_name() + "." + std::to_string(child));
  fs::create_directories(dead);
  auto notes = recover_checkpoint_dir(dir.path());
  EXPECT_TRUE(fs::exists(live));
  EXPECT_FALSE(fs::exists(dead));
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE((notes[0] + notes[1]).find("still running"), std::string::npos);
}

TEST(CheckpointDir, TemporaryNamesCarryTheWritersHostAndPid) {
  TempDir dir;
  std::string seen;
  commit_checkpoint(
      dir.path(), 3, [&](const std::string& d) { seen = fs::path(d).filename().string(); }, 0);
  EXPECT_EQ(seen, ".tmp-step_00000003." + host_name() + "." + std::to_string(getpid()));
}

}  // namespace
}  // namespace kiln
