#include "train/trainer_state.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"

namespace kiln {
namespace {

using kiln::testing::error_of;

nlohmann::json good_state() {
  TrainerState s;
  s.step = 8;
  s.adam_steps = 7;
  s.skipped_steps = 1;
  s.train_position = 8;
  s.train_sequences = 32;
  s.rng_state = 99;
  s.config = TrainConfig().to_json();
  return trainer_state_to_json(s);
}

TEST(TrainerState, RoundTripsThroughJson) {
  TrainerState s = parse_trainer_state(good_state().dump(), "ts.json");
  EXPECT_EQ(s.step, 8);
  EXPECT_EQ(s.adam_steps, 7);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_EQ(s.train_position, 8u);
  EXPECT_EQ(s.train_sequences, 32u);
  EXPECT_EQ(s.rng_state, 99u);
}

// Each damaged value is refused, and the message names the file and the key.
TEST(TrainerState, DamagedValuesAreRefusedNamingFileAndKey) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> damage;
    const char* key;
  };
  const Case cases[] = {
      {"negative step", [](auto& j) { j["step"] = -3; }, "'step'"},
      {"fractional step", [](auto& j) { j["step"] = 1.5; }, "'step'"},
      {"step as text", [](auto& j) { j["step"] = "8"; }, "'step'"},
      {"missing adam_steps", [](auto& j) { j.erase("adam_steps"); }, "'adam_steps'"},
      {"adam_steps beyond step", [](auto& j) { j["adam_steps"] = 9; }, "'adam_steps'"},
      {"contradicting skipped_steps", [](auto& j) { j["skipped_steps"] = 0; }, "'skipped_steps'"},
      {"negative position", [](auto& j) { j["data"]["train_position"] = -1; },
       "'data.train_position'"},
      {"fractional position", [](auto& j) { j["data"]["train_position"] = 1.5; },
       "'data.train_position'"},
      {"missing position", [](auto& j) { j["data"].erase("train_position"); },
       "'data.train_position'"},
      {"missing data", [](auto& j) { j.erase("data"); }, "'data'"},
      {"negative rng", [](auto& j) { j["rng_state"] = -7; }, "'rng_state'"},
      {"missing config", [](auto& j) { j.erase("config"); }, "'config'"},
      {"huge step", [](auto& j) { j["step"] = uint64_t{1} << 63; }, "'step'"},
  };
  for (const auto& c : cases) {
    nlohmann::json j = good_state();
    c.damage(j);
    std::string e = error_of([&] { parse_trainer_state(j.dump(), "ckpt/trainer_state.json"); });
    EXPECT_NE(e.find("ckpt/trainer_state.json"), std::string::npos) << c.what << ": " << e;
    EXPECT_NE(e.find(c.key), std::string::npos) << c.what << ": " << e;
  }
  for (const char* text : {"", "[]", "{", "3", "null", "{\"step\": 1"}) {
    std::string e = error_of([&] { parse_trainer_state(text, "ckpt/trainer_state.json"); });
    EXPECT_NE(e.find("ckpt/trainer_state.json"), std::string::npos) << text << ": " << e;
  }
}

TEST(TrainerState, ResumeRefusesModelAndDataOrderChangesAndReportsSchedule) {
  TrainConfig a;
  a.model.n_embd = 32;
  TrainConfig b = a;
  EXPECT_TRUE(compare_resume_config(a, b).refused.empty());
  EXPECT_TRUE(compare_resume_config(a, b).changed.empty());
  b.seed = a.seed + 1;
  b.model.n_embd = a.model.n_embd * 2;
  b.lr = a.lr / 2;
  b.steps = a.steps * 2;
  b.zero = 2;       // layout: free
  b.log_every = 7;  // logging: free
  ResumeDiff d = compare_resume_config(a, b);
  ASSERT_EQ(d.refused.size(), 2u);
  EXPECT_NE(d.refused[0].find("model.n_embd"), std::string::npos) << d.refused[0];
  EXPECT_NE(d.refused[1].find("train.seed"), std::string::npos) << d.refused[1];
  ASSERT_EQ(d.changed.size(), 2u);
  EXPECT_NE(d.changed[0].find("train.steps"), std::string::npos);
  EXPECT_NE(d.changed[1].find("train.lr"), std::string::npos);
}

}  // namespace
}  // namespace kiln
