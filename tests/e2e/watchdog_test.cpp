// A hang, not a crash: one rank of a 2-rank job is stopped (SIGSTOP) mid-run. The other rank's
// watchdog must notice within its timeout, name the rank that did not arrive, the collective and
// its sequence number and the step, dump its flight recorder, and end the job; `kiln launch` then
// restarts it from the last checkpoint and the run finishes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::bytes_of;
using kiln::testing::run_kiln_mpi;
using kiln::testing::source_path;
using kiln::testing::spawn_kiln;
using kiln::testing::TempDir;
using kiln::testing::wait_until;

TEST(Watchdog, StoppedRankIsNamedAndTheJobRestartsFromItsCheckpoint) {
  TempDir dir;
  const std::string out = dir / "run";
  pid_t pid =
      spawn_kiln("launch -n 2 --max-restarts 1 " + source_path("configs/tiny.toml") +
                     " --set train.steps=200 --set checkpoint.every=10 --set checkpoint.keep_last=0"
                     " --set train.val_every=0 --set train.sample_tokens=0 --set train.threads=1"
                     " --set train.watchdog_seconds=3 --set 'data.train=" +
                     source_path("data/licenses/train_*.bin") + "' --set 'data.val=" +
                     source_path("data/licenses/val_*.bin") + "' --set train.out_dir=" + out,
                 out + ".log");
  ASSERT_GE(pid, 0);
  const std::string ck = out + "/checkpoints/step_00000020";
  int status = 0;
  ASSERT_TRUE(wait_until(
      pid, [&] { return fs::exists(ck) && fs::exists(out + "/pids/rank-1.pid"); }, 60, &status))
      << bytes_of(out + ".log");
  pid_t rank1 = 0;
  std::ifstream(out + "/pids/rank-1.pid") >> rank1;
  ASSERT_GT(rank1, 0);
  ASSERT_EQ(kill(rank1, SIGSTOP), 0);
  waitpid(pid, &status, 0);
  kill(rank1, SIGKILL);  // in case the job's teardown left it stopped
  std::string log = bytes_of(out + ".log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;

  EXPECT_NE(log.find("watchdog: rank 0 made no progress"), std::string::npos) << log;
  EXPECT_NE(log.find("rank(s) 1 did not arrive"), std::string::npos) << log;
  EXPECT_NE(log.find("waiting in all_reduce"), std::string::npos) << log;
  EXPECT_NE(log.find("the job hung after step"), std::string::npos) << log;
  EXPECT_NE(log.find("restarting from the newest complete checkpoint"), std::string::npos) << log;
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  EXPECT_NE(log.find("step 200/200"), std::string::npos) << log;

  // Rank 0's flight recorder: the collective it waited in is the last event, still running.
  std::ifstream ff(out + "/flight/rank-0.json");
  ASSERT_TRUE(ff.good()) << log;
  auto flight = nlohmann::json::parse(ff);
  ASSERT_FALSE(flight["events"].empty());
  EXPECT_EQ(flight["events"].back()["state"], "running");
  EXPECT_NE(flight["message"].get<std::string>().find("rank(s) 1 did not arrive"),
            std::string::npos);
  // The stopped rank's last heartbeat is still there, older than the others'.
  EXPECT_TRUE(fs::exists(out + "/heartbeat/rank-1.json"));

  // The run records the restart, as a hang, and the restarted run counts it.
  std::ifstream mf(out + "/metrics.jsonl");
  int restarts = 0, restarted_runs = 0;
  for (std::string line; std::getline(mf, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "restart") {
      restarts++;
      EXPECT_EQ(j["how"], "hung");
      EXPECT_GE(j["after_step"].get<int>(), 20);
    }
    if (j["type"] == "run_start" && j["restarts"] == 1) restarted_runs++;
  }
  EXPECT_EQ(restarts, 1);
  EXPECT_EQ(restarted_runs, 1);
}

TEST(Launch, SigtermStopsTheJobAfterACheckpointWithoutRestarting) {
  TempDir dir;
  const std::string out = dir / "run";
  const std::string tiny = source_path("configs/tiny.toml");
  pid_t pid = spawn_kiln("launch -n 2 --max-restarts 2 " + tiny +
                             " --set train.steps=100000 --set train.val_every=0 --set "
                             "train.sample_tokens=0 --set train.threads=1 --set checkpoint.every=10"
                             " --set 'data.train=" +
                             source_path("data/licenses/train_*.bin") +
                             "' --set 'data.val=" + source_path("data/licenses/val_*.bin") +
                             "' --set train.out_dir=" + out,
                         out + ".log");
  ASSERT_GE(pid, 0);
  int status = 0;
  ASSERT_TRUE(wait_until(
      pid, [&] { return fs::exists(out + "/checkpoints/step_00000020"); }, 60, &status))
      << bytes_of(out + ".log");
  kill(pid, SIGTERM);
  waitpid(pid, &status, 0);
  std::string log = bytes_of(out + ".log");
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_NE(WEXITSTATUS(status), 0) << log;
  EXPECT_NE(log.find("stopping at step"), std::string::npos) << log;
  EXPECT_NE(log.find("not restarting"), std::string::npos) << log;
  EXPECT_EQ(log.find("restarting from the newest"), std::string::npos) << log;
  // The step it stopped at has its checkpoint.
  std::ifstream mf(out + "/metrics.jsonl");
  int64_t stopped = -1;
  for (std::string line; std::getline(mf, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "stopped") stopped = j["step"].get<int64_t>();
  }
  ASSERT_GT(stopped, 0) << log;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/" + fmt::format("step_{:08d}", stopped) +
                         "/model.safetensors"));
}

}  // namespace
}  // namespace kiln
