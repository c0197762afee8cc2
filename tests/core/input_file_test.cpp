// Errors reading users' files say whose fault they are: a missing or unreadable path is the
// input's (kiln train exits 78 and launchers do not retry), a system failure such as running out
// of file descriptors is an IoError (exit 1, retried).
#include "core/input_file.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "core/exit_codes.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::TempDir;

// What refused_as_bad_input makes of reading `path`: 78 (refused), 1 (an IoError) or 0.
int outcome(const std::string& path) {
  try {
    refused_as_bad_input([&] { read_regular_file(path, "shard"); });
  } catch (const ExitCodeError& e) {
    return e.code();
  } catch (const IoError&) {
    return 1;
  }
  return 0;
}

TEST(InputFile, AMissingFileIsRefusedInputATooManyFilesErrorIsTheSystems) {
  TempDir dir;
  std::ofstream(dir / "ok.bin") << "x";
  EXPECT_EQ(outcome(dir / "ok.bin"), 0);
  EXPECT_EQ(outcome(dir / "missing.bin"), kExitBadInput);
  EXPECT_EQ(outcome(dir.path()), kExitBadInput);  // a directory
  // Out of file descriptors (EMFILE), in a child so that the limit stays there.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit lim{0, 0};
    setrlimit(RLIMIT_NOFILE, &lim);
    _exit(outcome(dir / "ok.bin"));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

}  // namespace
}  // namespace kiln
