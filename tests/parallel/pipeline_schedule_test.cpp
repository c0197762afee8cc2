// Pipeline schedules against their theory: every rank runs each micro-batch's forward and
// backward exactly once in an order the dependencies allow; GPipe and 1F1B idle (P-1)/m of the
// busy time; 1F1B holds at most P - r micro-batches on rank r, GPipe all m.
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "core/error.h"
#include "test_util.h"

namespace kiln {
namespace {

void expect_complete(const PipeSchedule& s) {
  SCOPED_TRACE(s.name + " P=" + std::to_string(s.ranks) + " m=" + std::to_string(s.micro));
  ASSERT_EQ(static_cast<int>(s.order.size()), s.ranks);
  for (int r = 0; r < s.ranks; r++) {
    std::set<std::tuple<int, int, int>> seen;
    for (const auto& a : s.order[r])
      EXPECT_TRUE(seen.insert({static_cast<int>(a.op), a.micro, a.chunk}).second)
          << "rank " << r << " runs an action twice";
    const size_t kinds = s.split_backward ? 3 : 2;
    EXPECT_EQ(seen.size(), kinds * s.micro * s.chunks) << "rank " << r;
  }
  EXPECT_NO_THROW(simulate(s));
}

TEST(PipelineSchedule, EveryScheduleRunsEachOperationOnceInAnOrderThatCanRun) {
  for (auto [P, m] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 4},
                      std::pair{3, 7}, std::pair{4, 2}}) {
    expect_complete(gpipe(P, m));
    expect_complete(one_f_one_b(P, m));
  }
}

TEST(PipelineSchedule, GpipeAndOneFOneBIdleAsTheoryAndHoldWhatTheySay) {
  const PipeTimes t{1, 1, 1};  // forward 1, backward 2
  for (auto [P, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 16}}) {
    SCOPED_TRACE("P=" + std::to_string(P) + " m=" + std::to_string(m));
    const double theory = double(P - 1) / m;
    PipeStats g = simulate(gpipe(P, m), t), f = simulate(one_f_one_b(P, m), t);
    EXPECT_DOUBLE_EQ(g.makespan, 3.0 * (m + P - 1));
    EXPECT_DOUBLE_EQ(f.makespan, 3.0 * (m + P - 1));
    EXPECT_NEAR(g.bubble, theory, 1e-12);
    EXPECT_NEAR(f.bubble, theory, 1e-12);
    EXPECT_EQ(g.in_flight[0], m);  // GPipe holds every micro-batch
    for (int r = 0; r < P; r++) EXPECT_EQ(f.in_flight[r], P - r) << "rank " << r;
  }
}

TEST(PipelineSchedule, AnOrderThatCannotRunAndBadSizesAreRefusedByName) {
  PipeSchedule bad = one_f_one_b(2, 2);
  std::swap(bad.order[1][0], bad.order[1][1]);  // the last stage's backward before its forward
  std::string e = kiln::testing::error_of([&] { simulate(bad); });
  EXPECT_NE(e.find("rank 1 waits forever"), std::string::npos) << e;
  e = kiln::testing::error_of([] { pipeline_schedule("pipedream", 2, 4); });
  EXPECT_NE(e.find("parallel.schedule must be"), std::string::npos) << e;
  e = kiln::testing::error_of([] { gpipe(0, 4); });
  EXPECT_NE(e.find("at least 1 stage"), std::string::npos) << e;
}

}  // namespace
}  // namespace kiln
