// Per-rank shards of flat state: written by one layout, read back by any other, and refused by
// name when a file is missing, mixed in from another save, overlapping or of another model.
#include "ckpt/sharded_state.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "ckpt/safetensors.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

using kiln::testing::error_of;
using kiln::testing::TempDir;

// Three tensors back to back in a flat buffer of 30 elements.
const std::vector<FlatTensor> kTensors = {
    {"a.weight", {3, 5}, 0, 15}, {"b.bias", {7}, 15, 7}, {"c.weight", {2, 2, 2}, 22, 8}};
constexpr int64_t kTotal = 30;

struct State {
  std::vector<float> m, v;
  State() : m(kTotal), v(kTotal) {
    for (int64_t i = 0; i < kTotal; i++) {
      m[i] = 0.5f * static_cast<float>(i) + 0.25f;
      v[i] = -static_cast<float>(i) - 1.0f;
    }
  }
};

// Writes the state as `ranks` shards cut at `cuts` (ranks + 1 flat positions).
void write_as(const std::string& dir, const std::vector<int64_t>& cuts, const State& s) {
  const int ranks = static_cast<int>(cuts.size()) - 1;
  for (int r = 0; r < ranks; r++)
    write_state_shard(dir, "optimizer", r, ranks, kTensors, cuts[r], cuts[r + 1],
                      {{"exp_avg.", const_cast<float*>(s.m.data()) + cuts[r]},
                       {"exp_avg_sq.", const_cast<float*>(s.v.data()) + cuts[r]}},
                      {{"optimizer", "adamw"}});
}

void expect_reads_back(const std::string& dir, int64_t begin, int64_t end, const State& s) {
  SCOPED_TRACE("range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  std::vector<float> m(end - begin, 99.0f), v(end - begin, 99.0f);
  read_state_shards(state_shard_files(dir, "optimizer"), kTensors, begin, end,
                    {{"exp_avg.", m.data()}, {"exp_avg_sq.", v.data()}});
  for (int64_t i = begin; i < end; i++) {
    EXPECT_EQ(m[i - begin], s.m[i]) << i;
    EXPECT_EQ(v[i - begin], s.v[i]) << i;
  }
}

TEST(ShardedState, ShardsCutAcrossTensorsReadBackIntoAnyOtherLayout) {
  TempDir dir;
  State s;
  write_as(dir.path(), {0, 11, 19, 30}, s);  // cuts inside a.weight and b.bias
  ASSERT_EQ(state_shard_files(dir.path(), "optimizer").size(), 3u);
  // Each file holds only its slices, named by the logical tensor.
  SafeTensorsReader f(dir / "optimizer-00001-of-00003.safetensors");
  EXPECT_TRUE(f.has("exp_avg.a.weight"));
  EXPECT_TRUE(f.has("exp_avg_sq.b.bias"));
  EXPECT_FALSE(f.has("exp_avg.c.weight"));
  EXPECT_EQ(f.entry("exp_avg.a.weight").shape, std::vector<int64_t>{4});
  expect_reads_back(dir.path(), 0, kTotal, s);  // one rank, whole
  expect_reads_back(dir.path(), 0, 15, s);      // two ranks
  expect_reads_back(dir.path(), 15, kTotal, s);
  expect_reads_back(dir.path(), 5, 23, s);  // a range no writer had
}

TEST(ShardedState, AMissingShardIsNamed) {
  TempDir dir;
  write_as(dir.path(), {0, 11, 19, 30}, State());
  fs::remove(dir / "optimizer-00001-of-00003.safetensors");
  std::string e = error_of([&] { state_shard_files(dir.path(), "optimizer"); });
  EXPECT_NE(e.find("optimizer-00001-of-00003.safetensors is missing"), std::string::npos) << e;
  EXPECT_TRUE(state_shard_files(dir.path(), "nothing").empty());
}

TEST(ShardedState, ShardsOfTwoSavesAreRefused) {
  TempDir dir;
  write_as(dir.path(), {0, 11, 19, 30}, State());
  write_as(dir.path(), {0, 30}, State());  // a one-rank save beside a three-rank one
  std::string e = error_of([&] { state_shard_files(dir.path(), "optimizer"); });
  EXPECT_NE(e.find("from one save"), std::string::npos) << e;
}

TEST(ShardedState, OverlappingShardsAreRefused) {
  TempDir dir;
  State s;
  write_state_shard(dir.path(), "optimizer", 0, 2, kTensors, 0, 20, {{"exp_avg.", s.m.data()}}, {});
  write_state_shard(dir.path(), "optimizer", 1, 2, kTensors, 15, 30,
                    {{"exp_avg.", s.m.data() + 15}}, {});
  std::vector<float> m(kTotal);
  std::string e = error_of([&] {
    read_state_shards(state_shard_files(dir.path(), "optimizer"), kTensors, 0, kTotal,
                      {{"exp_avg.", m.data()}});
  });
  EXPECT_NE(e.find("twice"), std::string::npos) << e;
}

TEST(ShardedState, AnotherModelsTensorsAreRefusedNamingTheTensor) {
  TempDir dir;
  write_as(dir.path(), {0, kTotal}, State());
  auto other = kTensors;
  other[2].shape = {4, 2};  // same size, another shape
  std::vector<float> m(kTotal), v(kTotal);
  std::string e = error_of([&] {
    read_state_shards(state_shard_files(dir.path(), "optimizer"), other, 0, kTotal,
                      {{"exp_avg.", m.data()}, {"exp_avg_sq.", v.data()}});
  });
  EXPECT_NE(e.find("c.weight has shape (4, 2) here but (2, 2, 2)"), std::string::npos) << e;
  other = kTensors;
  other[1].name = "b.weight";
  e = error_of([&] {
    read_state_shards(state_shard_files(dir.path(), "optimizer"), other, 0, kTotal,
                      {{"exp_avg.", m.data()}, {"exp_avg_sq.", v.data()}});
  });
  EXPECT_NE(e.find("b.bias is not a tensor of this model"), std::string::npos) << e;
}

TEST(ShardedState, AFileWithoutSlicesIsNotAShard) {
  TempDir dir;
  float x[2] = {1, 2};
  write_safetensors(dir / "optimizer-00000-of-00001.safetensors",
                    {{"exp_avg.b.bias", "F32", {2}, x}}, {});
  std::vector<float> m(kTotal);
  std::string e = error_of([&] {
    read_state_shards(state_shard_files(dir.path(), "optimizer"), kTensors, 0, kTotal,
                      {{"exp_avg.", m.data()}});
  });
  EXPECT_NE(e.find("not a kiln state shard"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
