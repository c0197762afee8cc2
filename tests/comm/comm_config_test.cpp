// The [comm] keys of the training config: accepted values, and errors that name the key.
#include <gtest/gtest.h>

#include "test_util.h"
#include "train/config.h"

namespace kiln {
namespace {

const std::string kBase = "[model]\nn_layer=1\nn_head=1\nn_embd=8\nblock_size=64\nvocab_size=10\n";

TEST(CommConfig, BackendAndCompressionDefaultsAndChoices) {
  TrainConfig c = parse_train_config(kBase, "c.toml", {});
  EXPECT_EQ(c.comm_backend, "auto");
  EXPECT_EQ(c.comm_compress, "none");
  for (const char* b : {"auto", "mpi", "shm", "hier"})
    EXPECT_EQ(parse_train_config(kBase, "c.toml", {std::string("comm.backend=") + b}).comm_backend,
              b);
  EXPECT_EQ(parse_train_config(kBase, "c.toml", {"comm.compress=bf16"}).comm_compress, "bf16");
  EXPECT_EQ(c.comm_algorithm, "auto");
  for (const char* a : {"auto", "one_shot", "direct", "ring", "halving_doubling"})
    EXPECT_EQ(
        parse_train_config(kBase, "c.toml", {std::string("comm.algorithm=") + a}).comm_algorithm,
        a);
}

TEST(CommConfig, UnknownValuesNameTheKeyAndTheChoices) {
  std::string e = testing::error_of(
      [] { parse_train_config(kBase + "[comm]\nbackend = \"nccl\"\n", "c.toml", {}); });
  EXPECT_NE(e.find("c.toml: comm.backend must be \"auto\", \"mpi\", \"shm\" or \"hier\""),
            std::string::npos)
      << e;
  e = testing::error_of([] { parse_train_config(kBase, "c.toml", {"comm.compress=fp8"}); });
  EXPECT_NE(e.find("comm.compress must be \"none\" or \"bf16\""), std::string::npos) << e;
  e = testing::error_of(
      [] { parse_train_config(kBase + "[comm]\nalgorithm = \"tree\"\n", "c.toml", {}); });
  EXPECT_NE(e.find("c.toml: comm.algorithm must be \"auto\", \"one_shot\", \"direct\", "
                   "\"ring\" or \"halving_doubling\", got 'tree'"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace kiln
