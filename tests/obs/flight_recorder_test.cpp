// The flight recorder's ring, and the recording wrapper that feeds it for any backend.
#include "obs/flight_recorder.h"
#include "train/comm_observer.h"

#include <gtest/gtest.h>

#include "comm/recording_communicator.h"

namespace kiln {
namespace {

TEST(FlightRecorder, KeepsTheLastNEventsInOrderAndFindsThePendingOne) {
  FlightRecorder fr(4);
  std::vector<uint64_t> ids;
  for (int i = 1; i <= 6; i++) ids.push_back(fr.issued("world", i, "op " + std::to_string(i)));
  for (int i = 0; i < 6; i++) {
    fr.started(ids[i]);
    if (i != 4) fr.finished(ids[i], false);  // op 5 never finishes
  }
  auto ev = fr.events();
  ASSERT_EQ(ev.size(), 4u);  // ops 3..6
  EXPECT_EQ(ev.front().seq, 3u);
  EXPECT_EQ(ev.back().seq, 6u);
  auto p = fr.oldest_pending();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->seq, 5u);
  EXPECT_EQ(fr.last_finished("world")->seq, 6u);
  EXPECT_FALSE(fr.last_finished("other").has_value());
  auto j = fr.to_json();
  EXPECT_EQ(j[2]["state"], "running");
  EXPECT_EQ(j[3]["state"], "done");
  // Names longer than the fixed fields are cut, not overflowed.
  auto id = fr.issued(std::string(100, 'c'), 1, std::string(200, 'o'), true);
  fr.finished(id, false);
  EXPECT_EQ(std::string(fr.events().back().comm), std::string(31, 'c'));
  EXPECT_EQ(std::string(fr.events().back().op), std::string(63, 'o'));
}

TEST(FlightRecorder, RecordingCommunicatorNumbersOperationsPerCommunicator) {
  observe_communicators();
  auto c = with_flight_recorder(make_self_communicator(), "test-comm");
  float x[3] = {1, 2, 3};
  c->all_reduce(x, 3, DType::F32);
  c->barrier();
  auto child = c->split(7, 0);
  child->all_reduce(x, 1, DType::F32);
  auto& fr = FlightRecorder::instance();
  auto last = fr.last_finished("test-comm");
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->seq, 2u);
  EXPECT_EQ(last->describe(), "barrier");
  auto sub = fr.last_finished("test-comm/7");
  ASSERT_TRUE(sub.has_value());
  EXPECT_EQ(sub->seq, 1u);
  EXPECT_EQ(sub->describe(), "all_reduce of 1 elements");
  EXPECT_EQ(x[0], 1.0f);  // one rank: the sum is the value
}

}  // namespace
}  // namespace kiln
