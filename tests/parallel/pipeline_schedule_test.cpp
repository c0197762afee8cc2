// Pipeline schedules against their theory: every rank runs each micro-batch's forward and
// backward exactly once in an order the dependencies allow; GPipe and 1F1B idle (P-1)/m of the
// busy time; 1F1B holds at most P - r micro-batches on rank r, GPipe all m; interleaved 1F1B
// idles (P-1)/(v·m) and ZB-H1 (P-1)(F+B-W) over m(F+B+W), as pipeline_bubble_formula says.
#include "parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// One rank's order as text, "F0 B0 W0 ..." (".c" after the micro-batch for model chunk c).
std::string order_text(const PipeSchedule& s, int rank) {
  std::string out;
  for (const auto& a : s.order[rank]) {
    const char* op = a.op == PipeOp::Forward ? "F" : a.op == PipeOp::BackwardWeight ? "W" : "B";
    out += fmt::format("{}{}{}{}", out.empty() ? "" : " ", op, a.micro,
                       s.chunks > 1 ? fmt::format(".{}", a.chunk) : "");
  }
  return out;
}

TEST(PipelineSchedule, InterleavedRunsEachChunkOnceAndIdlesVTimesLessThanOneFOneB) {
  for (auto [P, m, v] : {std::tuple{1, 3, 2}, std::tuple{2, 2, 2}, std::tuple{2, 4, 2},
                         std::tuple{4, 4, 2}, std::tuple{4, 8, 4}, std::tuple{3, 6, 3}})
    expect_complete(interleaved_1f1b(P, m, v));
  const PipeTimes t{1, 1, 1};  // per chunk: forward 1, backward 2
  // Rank 0's warm-up is 2(P-1) + (v-1)P forwards, and the steady state's first forward comes
  // before its first backward: it holds (v+1)P - 1 micro-batch chunks at once.
  for (auto [P, m, v, held] :
       {std::tuple{2, 4, 2, 5}, std::tuple{4, 8, 2, 11}, std::tuple{4, 16, 2, 11},
        std::tuple{2, 8, 4, 9}, std::tuple{4, 8, 4, 19}}) {
    SCOPED_TRACE(fmt::format("P={} m={} v={}", P, m, v));
    PipeStats s = simulate(interleaved_1f1b(P, m, v), t);
    EXPECT_NEAR(s.bubble, double(P - 1) / (v * m), 1e-9);
    EXPECT_LT(s.bubble, simulate(one_f_one_b(P, m), t).bubble);
    EXPECT_EQ(s.in_flight[0], held);
    EXPECT_EQ(held, (v + 1) * P - 1);
  }
  // With m = P the warm-up is capped at every forward: rank 0 holds all v·m chunks.
  EXPECT_EQ(simulate(interleaved_1f1b(4, 4, 2), t).in_flight[0], 8);
}

TEST(PipelineSchedule, InterleavedFollowsMegatronsGroupsOfPMicroBatchesPerChunk) {
  // P = 2, m = 4, v = 2: forwards go 0,1 through chunk 0, then 0,1 through chunk 1, then 2,3;
  // backwards the same groups through the chunks in reverse. Rank 0 warms up with 2 + 2
  // forwards, rank 1 with 0 + 2.
  PipeSchedule s = interleaved_1f1b(2, 4, 2);
  EXPECT_EQ(order_text(s, 0),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(order_text(s, 1),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
}

TEST(PipelineSchedule, InterleavedWithOneChunkIsOneFOneB) {
  for (auto [P, m] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 4},
                      std::pair{3, 7}, std::pair{4, 2}}) {
    SCOPED_TRACE(fmt::format("P={} m={}", P, m));
    PipeSchedule i = interleaved_1f1b(P, m, 1), f = one_f_one_b(P, m);
    EXPECT_EQ(i.order, f.order);
    PipeStats si = simulate(i, {1, 1, 1}), sf = simulate(f, {1, 1, 1});
    EXPECT_DOUBLE_EQ(si.bubble, sf.bubble);
    EXPECT_EQ(si.in_flight, sf.in_flight);
  }
}

TEST(PipelineSchedule, InterleavedRefusesMicroBatchesNotAMultipleOfTheStages) {
  std::string e = kiln::testing::error_of([] { interleaved_1f1b(4, 6, 2); });
  for (const char* key : {"train.grad_accum", "parallel.pp", "parallel.virtual_stages"})
    EXPECT_NE(e.find(key), std::string::npos) << e;
  EXPECT_NO_THROW(interleaved_1f1b(4, 6, 1));  // one chunk is 1F1B: any m
}

TEST(PipelineSchedule, ZeroBubbleH1HoldsBackWeightPartsIntoTheCoolDown) {
  for (auto [P, m] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 4},
                      std::pair{3, 7}, std::pair{4, 2}, std::pair{8, 16}})
    expect_complete(zero_bubble_h1(P, m));
  // Warm-up P - r - 1 forwards, r rounds of F, B with the W held back, steady F, B, W (the
  // oldest W waiting), cool-down B, W, and the r W's held back last.
  PipeSchedule s = zero_bubble_h1(4, 8);
  EXPECT_TRUE(s.split_backward);
  EXPECT_EQ(order_text(s, 0),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
  EXPECT_EQ(order_text(s, 1),
            "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
  EXPECT_EQ(order_text(s, 3),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
}

// ZB-H1 at F = B = W = 1: idle P - 1 per rank, the paper's (P-1)(F+B-W), a third of 1F1B's
// (P-1)(F+B+W). (F+B-2W, zero here, is ZB-H2's, which holds up to 2P - 1 micro-batches.) Its
// memory is 1F1B's peak, P micro-batches, on every rank rather than P - r on rank r: with at
// most one on the last rank its F, B and W of each micro-batch run one after another, and the
// idle is at least (P-1)(F+B), twice what ZB-H1 reaches.
TEST(PipelineSchedule, ZeroBubbleH1IdlesAThirdOfOneFOneBAtOneFOneBsPeakMemory) {
  const PipeTimes t{1, 1, 1};
  for (auto [P, m] : {std::pair{2, 4}, std::pair{4, 4}, std::pair{4, 8}, std::pair{4, 16},
                      std::pair{3, 7}, std::pair{8, 16}}) {
    SCOPED_TRACE(fmt::format("P={} m={}", P, m));
    PipeStats z = simulate(zero_bubble_h1(P, m), t), f = simulate(one_f_one_b(P, m), t);
    EXPECT_DOUBLE_EQ(z.makespan, 3.0 * m + (P - 1));
    EXPECT_NEAR(z.bubble, double(P - 1) / (3 * m), 1e-9);
    EXPECT_NEAR(f.bubble, 3 * z.bubble, 1e-9);  // 1F1B here runs B and W as one backward of 2
    EXPECT_EQ(z.max_in_flight, f.max_in_flight);
    for (int r = 0; r < P; r++) EXPECT_EQ(z.in_flight[r], P) << "rank " << r;
  }
  // Fewer micro-batches than stages: every rank holds them all and still idles less than 1F1B.
  PipeStats z = simulate(zero_bubble_h1(4, 2), t), f = simulate(one_f_one_b(4, 2), t);
  EXPECT_EQ(z.max_in_flight, 2);
  EXPECT_LT(z.bubble, f.bubble);
}

TEST(PipelineSchedule, BubbleFormulaMatchesTheSimulationWhereTheScheduleReachesIt) {
  for (PipeTimes t :
       {PipeTimes{1, 1, 1}, PipeTimes{1, 2, 1}, PipeTimes{2, 1, 0.5}, PipeTimes{2, 2, 1}}) {
    for (auto [P, m] : {std::pair{2, 4}, std::pair{4, 8}, std::pair{4, 16}, std::pair{3, 6}}) {
      SCOPED_TRACE(fmt::format("t=({},{},{}) P={} m={}", t.f, t.b, t.w, P, m));
      for (const char* name : {"gpipe", "1f1b", "zero_bubble"})
        EXPECT_NEAR(simulate(pipeline_schedule(name, P, m), t).bubble,
                    pipeline_bubble_formula(name, P, m, 1, t), 1e-9)
            << name;
      for (int v : {2, 3, 4})
        EXPECT_NEAR(simulate(interleaved_1f1b(P, m, v), t).bubble,
                    pipeline_bubble_formula("interleaved", P, m, v, t), 1e-9)
            << "v=" << v;
    }
  }
  // ZB-H1's formula needs W <= F (and m >= P). With a longer W the simulation idles
  // (P-1)(F+B-min(F,W)) = (P-1) B: above the formula, still well below 1F1B.
  for (PipeTimes t : {PipeTimes{1, 1, 2}, PipeTimes{1, 2, 2}, PipeTimes{1, 1, 3}}) {
    SCOPED_TRACE(fmt::format("t=({},{},{})", t.f, t.b, t.w));
    const int P = 4, m = 8;
    const double sim = simulate(zero_bubble_h1(P, m), t).bubble;
    EXPECT_NEAR(sim, (P - 1) * t.b / (m * (t.f + t.b + t.w)), 1e-9);
    EXPECT_GT(sim, pipeline_bubble_formula("zero_bubble", P, m, 1, t));
    EXPECT_LT(sim, simulate(one_f_one_b(P, m), t).bubble / 2);
  }
  EXPECT_EQ(pipeline_bubble_formula("zero_bubble", 4, 8, 1, {1, 1, 3}), 0.0);  // clamped
}

TEST(PipelineSchedule, ScheduleByNameRefusesModelChunksWhereTheyDoNotFit) {
  EXPECT_EQ(pipeline_schedule("gpipe", 2, 4).name, "gpipe");
  EXPECT_EQ(pipeline_schedule("1f1b", 2, 4).name, "1f1b");
  EXPECT_EQ(pipeline_schedule("zero_bubble", 2, 4).name, "zero_bubble");
  PipeSchedule i = pipeline_schedule("interleaved", 2, 4, 3);
  EXPECT_EQ(i.name, "interleaved");
  EXPECT_EQ(i.chunks, 3);
  std::string e = kiln::testing::error_of([] { pipeline_schedule("interleaved", 2, 4); });
  EXPECT_NE(e.find("parallel.virtual_stages"), std::string::npos) << e;
  for (const char* name : {"gpipe", "1f1b", "zero_bubble"}) {
    e = kiln::testing::error_of([&] { pipeline_schedule(name, 2, 4, 2); });
    EXPECT_NE(e.find("parallel.virtual_stages"), std::string::npos) << name << ": " << e;
  }
  e = kiln::testing::error_of([] { pipeline_schedule("interleaved", 2, 5, 2); });
  EXPECT_NE(e.find("train.grad_accum"), std::string::npos) << e;
  for (auto f : {+[] { pipeline_schedule("zb", 2, 4); },
                 +[] { pipeline_bubble_formula("zb", 2, 4, 1, {}); }}) {
    e = kiln::testing::error_of(f);
    EXPECT_EQ(e.rfind("parallel.schedule must be", 0), 0u) << e;
    for (const char* name : {"\"gpipe\"", "\"1f1b\"", "\"interleaved\"", "\"zero_bubble\""})
      EXPECT_NE(e.find(name), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace kiln
