// The checkpointer as a job: every rank writes its own shard into one temporary directory and the
// checkpoint is published once all are durable; when one rank's write fails every rank stops
// with an error (the failing one its own, the others naming the failure elsewhere), nothing is
// published and no temporary directory is left.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpointer.h"
#include "ckpt/sharded_state.h"
#include "comm/communicator.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

Communicator& world() {
  static std::unique_ptr<Communicator> c = make_world_communicator();
  return *c;
}

// One directory for the job's ranks (they share mpirun as their parent), fresh per test.
std::string job_dir(const std::string& name) {
  const std::string d = fmt::format("/tmp/kiln-checkpointer-{}-{}", getppid(), name);
  if (world().rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  world().barrier();
  return d;
}

const std::vector<FlatTensor> kTensors = {{"a.weight", {4, 6}, 0, 24}, {"b.bias", {9}, 24, 9}};
constexpr int64_t kTotal = 33;

CheckpointContents contents(std::vector<float>& state, std::vector<float>& weights) {
  const int R = world().size(), r = world().rank();
  const int64_t per = (kTotal + R - 1) / R;
  CheckpointContents c;
  c.model = {{"a.weight", "F32", {4, 6}, weights.data()},
             {"b.bias", "F32", {9}, weights.data() + 24}};
  CheckpointContents::Shard sh;
  sh.rank = r;
  sh.ranks = R;
  c.shard_tensors = kTensors;
  sh.begin = std::min<int64_t>(kTotal, r * per);
  sh.end = std::min<int64_t>(kTotal, (r + 1) * per);
  sh.buffers = {{"exp_avg.", state.data() + sh.begin}};
  c.shards.push_back(sh);
  c.files = {{"trainer_state.json", "{}\n"}};
  return c;
}

TEST(Checkpointer, EveryRanksShardIsPublishedTogetherAndReadsBackWhole) {
  const std::string root = job_dir("ok");
  std::vector<float> state(kTotal), weights(kTotal);
  for (int64_t i = 0; i < kTotal; i++) {
    state[i] = 0.5f * static_cast<float>(i);
    weights[i] = -static_cast<float>(i);
  }
  int calls = 0;
  CheckpointContents c = contents(state, weights);
  c.before_tensor = [&](size_t) { calls++; };
  const std::string dir = Checkpointer(world(), root, 0).save(3, c);
  EXPECT_EQ(calls, 2);  // every rank runs the hooks around each whole tensor
  world().barrier();
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->dir, dir);
  const auto files = state_shard_files(dir, "optimizer");
  EXPECT_EQ(static_cast<int>(files.size()), world().size());
  std::vector<float> back(kTotal, 99.0f);
  read_state_shards(files, kTensors, 0, kTotal, {{"exp_avg.", back.data()}});
  EXPECT_EQ(back, state);
  SafeTensorsReader m(dir + "/model.safetensors");
  std::vector<float> b(9);
  m.read_f32("b.bias", {9}, b.data());
  EXPECT_EQ(b[8], -32.0f);
  world().barrier();
  if (world().rank() == 0) fs::remove_all(root);
}

TEST(Checkpointer, AFailedShardOnOneRankFailsTheSaveEverywhereAndPublishesNothing) {
  if (world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string root = job_dir("fail");
  std::vector<float> state(kTotal, 1.0f), weights(kTotal, 2.0f);
  CheckpointContents c = contents(state, weights);
  Checkpointer(world(), root, 0).save(1, c);
  // Rank 1 writes its shard into a directory that does not exist.
  if (world().rank() == 1) c.shard_stem = "no/such/dir/optimizer";
  std::string error;
  try {
    Checkpointer(world(), root, 0).save(2, c);
  } catch (const Error& e) {
    error = e.what();
  }
  if (world().rank() == 1)
    EXPECT_NE(error.find("no/such/dir"), std::string::npos) << error;
  else
    EXPECT_NE(error.find("another rank failed writing its part of checkpoint step 2"),
              std::string::npos)
        << error;
  world().barrier();
  auto latest = latest_checkpoint(root);
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->step, 1);
  for (const auto& e : fs::directory_iterator(root))
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  world().barrier();
  if (world().rank() == 0) fs::remove_all(root);
}

}  // namespace
}  // namespace kiln
