#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>

#include "core/error.h"

namespace kiln {

namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// When each micro-batch's forward, backward (input part) and weight part ended, per virtual
// stage g = chunk * ranks + rank.
struct Done {
  int stages, micro;
  std::vector<double> f, b, w;
  Done(int s, int m) : stages(s), micro(m), f(s * m, kNever), b(s * m, kNever), w(s * m, kNever) {}
  double& at(std::vector<double>& v, int g, int mb) {
    return v[static_cast<size_t>(g) * micro + mb];
  }
};

struct Setup {
  int ranks, micro, chunks;
  bool split;
  PipeTimes t;
  int stages() const { return ranks * chunks; }
  int stage_of(int rank, int chunk) const { return chunk * ranks + rank; }
  double duration(PipeOp op) const {
    switch (op) {
      case PipeOp::Forward:
        return t.f;
      case PipeOp::Backward:
        return t.b + t.w;
      case PipeOp::BackwardInput:
        return t.b;
      case PipeOp::BackwardWeight:
        return t.w;
    }
    return 0;
  }
};

// When `a` on `rank` could start: the time its inputs are ready (kNever if not yet known).
double ready_time(const Setup& s, Done& d, int rank, const PipeAction& a) {
  const int g = s.stage_of(rank, a.chunk), S = s.stages();
  switch (a.op) {
    case PipeOp::Forward:
      return g == 0 ? 0.0 : d.at(d.f, g - 1, a.micro);
    case PipeOp::Backward:
    case PipeOp::BackwardInput: {
      const double own = d.at(d.f, g, a.micro);
      const double next = g == S - 1 ? 0.0 : d.at(d.b, g + 1, a.micro);
      return std::max(own, next);
    }
    case PipeOp::BackwardWeight:
      return d.at(d.b, g, a.micro);
  }
  return kNever;
}

void record(const Setup& s, Done& d, int rank, const PipeAction& a, double end) {
  const int g = s.stage_of(rank, a.chunk);
  switch (a.op) {
    case PipeOp::Forward:
      d.at(d.f, g, a.micro) = end;
      break;
    case PipeOp::Backward:
      d.at(d.b, g, a.micro) = end;
      d.at(d.w, g, a.micro) = end;
      break;
    case PipeOp::BackwardInput:
      d.at(d.b, g, a.micro) = end;
      break;
    case PipeOp::BackwardWeight:
      d.at(d.w, g, a.micro) = end;
      break;
  }
}

// Each rank's forwards and backwards in the order it takes them: micro-batches in order; with
// chunks, micro-batches in groups of `ranks`, each group through chunk 0, 1, ... forwards and
// through the chunks in reverse backwards (Megatron-LM's interleaving).
std::vector<PipeAction> forward_order(const Setup& s) {
  std::vector<PipeAction> out;
  for (int g0 = 0; g0 < s.micro; g0 += s.ranks)
    for (int c = 0; c < s.chunks; c++)
      for (int mb = g0; mb < std::min(s.micro, g0 + s.ranks); mb++)
        out.push_back({PipeOp::Forward, mb, c});
  return out;
}

std::vector<PipeAction> backward_order(const Setup& s) {
  std::vector<PipeAction> out;
  const PipeOp op = s.split ? PipeOp::BackwardInput : PipeOp::Backward;
  for (int g0 = 0; g0 < s.micro; g0 += s.ranks)
    for (int c = s.chunks - 1; c >= 0; c--)
      for (int mb = g0; mb < std::min(s.micro, g0 + s.ranks); mb++) out.push_back({op, mb, c});
  return out;
}

// A rank's progress while a schedule is made.
struct RankState {
  size_t next_f = 0, next_b = 0;
  std::deque<PipeAction> pending_w;  // input parts done, weight parts to run
  int held = 0;                      // micro-batch chunks whose activations are held
  int max_held = 0;
  double free_at = 0;
};
// What a rank runs next, given what is ready: a schedule's policy. Returns 0 (its next forward),
// 1 (its next backward), 2 (a waiting weight part) or -1 (wait).
using Policy = std::function<int(int rank, const RankState& st, bool f_ready, bool b_ready,
                                 bool f_left, bool w_ready)>;

// List scheduling: whenever a rank is free it runs what the policy picks among the operations
// whose inputs are ready; time advances to the next end of an operation.
PipeSchedule run_policy(const std::string& name, Setup s, const Policy& policy) {
  PipeSchedule out;
  out.name = name;
  out.ranks = s.ranks;
  out.micro = s.micro;
  out.chunks = s.chunks;
  out.split_backward = s.split;
  out.order.assign(s.ranks, {});
  Done d(s.stages(), s.micro);
  const auto fo = forward_order(s), bo = backward_order(s);
  std::vector<RankState> st(s.ranks);
  const size_t per_rank = fo.size() + bo.size() + (s.split ? bo.size() : 0);
  const size_t expected = per_rank * static_cast<size_t>(s.ranks);
  size_t placed = 0;
  double now = 0;
  while (placed < expected) {
    bool progressed = false;
    for (int r = 0; r < s.ranks; r++) {
      RankState& rs = st[r];
      if (rs.free_at > now) continue;
      const bool f_left = rs.next_f < fo.size();
      const bool f_ready = f_left && ready_time(s, d, r, fo[rs.next_f]) <= now;
      const bool b_ready = rs.next_b < bo.size() && ready_time(s, d, r, bo[rs.next_b]) <= now;
      const bool w_ready = !rs.pending_w.empty();
      const int pick = policy(r, rs, f_ready, b_ready, f_left, w_ready);
      if (pick < 0) continue;
      PipeAction a;
      if (pick == 0) {
        KILN_CHECK(f_ready);
        a = fo[rs.next_f++];
        rs.held++;
        rs.max_held = std::max(rs.max_held, rs.held);
      } else if (pick == 1) {
        KILN_CHECK(b_ready);
        a = bo[rs.next_b++];
        if (s.split)
          rs.pending_w.push_back({PipeOp::BackwardWeight, a.micro, a.chunk});
        else
          rs.held--;
      } else {
        KILN_CHECK(w_ready);
        a = rs.pending_w.front();
        rs.pending_w.pop_front();
        rs.held--;
      }
      const double end = now + s.duration(a.op);
      record(s, d, r, a, end);
      rs.free_at = end;
      out.order[r].push_back(a);
      placed++;
      progressed = true;
    }
    // The next moment something can change: a rank becomes free.
    double next = kNever;
    for (const auto& rs : st)
      if (rs.free_at > now) next = std::min(next, rs.free_at);
    if (next == kNever) {
      if (!progressed && placed < expected)
        fail("pipeline schedule {}: no rank can go on ({} of {} operations placed)", name, placed,
             expected);
      continue;
    }
    now = next;
  }
  return out;
}

void check_sizes(int ranks, int micro, int chunks) {
  if (ranks < 1) fail("a pipeline needs at least 1 stage, got {}", ranks);
  if (micro < 1) fail("a pipeline step needs at least 1 micro-batch, got {}", micro);
  if (chunks < 1) fail("parallel.virtual_stages must be at least 1, got {}", chunks);
}

// An empty schedule of the given shape, for the straight-line schedules to fill in.
PipeSchedule empty_schedule(const std::string& name, int ranks, int micro, int chunks, bool split) {
  PipeSchedule out;
  out.name = name;
  out.ranks = ranks;
  out.micro = micro;
  out.chunks = chunks;
  out.split_backward = split;
  out.order.assign(ranks, {});
  return out;
}

constexpr const char* kScheduleNames = "\"gpipe\", \"1f1b\", \"interleaved\" or \"zero_bubble\"";

// Refuses an unknown name, and model chunks for a schedule that has none.
void check_name(const std::string& name, int chunks) {
  if (name != "gpipe" && name != "1f1b" && name != "interleaved" && name != "zero_bubble")
    fail("parallel.schedule must be {}, got '{}'", kScheduleNames, name);
  if (name == "interleaved" && chunks < 2)
    fail(
        "parallel.schedule = \"interleaved\" needs parallel.virtual_stages >= 2 (model chunks "
        "per rank), got {}",
        chunks);
  if (name != "interleaved" && chunks != 1)
    fail(
        "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\"; \"{}\" runs one "
        "model chunk per rank",
        chunks, name);
}

}  // namespace

PipeSchedule gpipe(int ranks, int micro) {
  check_sizes(ranks, micro, 1);
  Setup s{ranks, micro, 1, false, {}};
  return run_policy("gpipe", s, [](int, const RankState&, bool f, bool b, bool f_left, bool) {
    if (f) return 0;
    if (!f_left && b) return 1;  // backwards only once every forward has run
    return -1;
  });
}

PipeSchedule one_f_one_b(int ranks, int micro) {
  check_sizes(ranks, micro, 1);
  Setup s{ranks, micro, 1, false, {}};
  return run_policy("1f1b", s, [ranks](int r, const RankState& st, bool f, bool b, bool, bool) {
    if (b) return 1;
    if (f && st.held < ranks - r) return 0;  // at most P - r forwards ahead
    return -1;
  });
}

PipeSchedule interleaved_1f1b(int ranks, int micro, int chunks) {
  check_sizes(ranks, micro, chunks);
  if (chunks > 1 && micro % ranks != 0)
    fail(
        "the interleaved pipeline schedule runs micro-batches in groups of parallel.pp: "
        "train.grad_accum ({}) must be a multiple of parallel.pp ({}) when "
        "parallel.virtual_stages = {}",
        micro, ranks, chunks);
  const Setup s{ranks, micro, chunks, false, {}};
  const std::vector<PipeAction> fo = forward_order(s), bo = backward_order(s);
  const int total = micro * chunks;  // forwards (and backwards) per rank
  PipeSchedule out = empty_schedule("interleaved", ranks, micro, chunks, false);
  for (int r = 0; r < ranks; r++) {
    // Megatron-LM's warm-up: (v - 1) P forwards fill the later chunks on every rank, and
    // 2 (P - r - 1) more cover a gradient's round trip from the last stage. With one chunk it is
    // 1F1B's P - r - 1. (Megatron also runs every forward first when m == P, for its paired
    // sends and receives; the order needs no such rule and holds less on the later ranks.)
    int warmup = chunks == 1 ? ranks - r - 1 : (ranks - r - 1) * 2 + (chunks - 1) * ranks;
    warmup = std::min(warmup, total);
    std::vector<PipeAction>& o = out.order[r];
    int f = 0, b = 0;
    // Warm-up: forwards only.
    while (f < warmup) o.push_back(fo[f++]);
    // Steady state: one forward, one backward.
    while (f < total) {
      o.push_back(fo[f++]);
      o.push_back(bo[b++]);
    }
    // Cool-down: the backwards left.
    while (b < total) o.push_back(bo[b++]);
  }
  return out;
}

PipeSchedule zero_bubble_h1(int ranks, int micro) {
  check_sizes(ranks, micro, 1);
  PipeSchedule out = empty_schedule("zero_bubble", ranks, micro, 1, true);
  auto F = [](int mb) { return PipeAction{PipeOp::Forward, mb, 0}; };
  auto B = [](int mb) { return PipeAction{PipeOp::BackwardInput, mb, 0}; };
  auto W = [](int mb) { return PipeAction{PipeOp::BackwardWeight, mb, 0}; };
  for (int r = 0; r < ranks; r++) {
    std::vector<PipeAction>& o = out.order[r];
    int f = 0, b = 0, w = 0;
    // Warm-up: 1F1B's P - r - 1 forwards.
    while (f < std::min(ranks - r - 1, micro)) o.push_back(F(f++));
    // Steady state, first r rounds: F, B with the W held back. Rank r's backwards then start
    // as soon as the last stage's gradient arrives, and these r W's fill the cool-down, where
    // 1F1B idles waiting for the gradients of the later stages.
    for (int i = 0; i < r && f < micro; i++) {
      o.push_back(F(f++));
      o.push_back(B(b++));
    }
    // Steady state: F, B, W; each W is for the oldest micro-batch whose B is done.
    while (f < micro) {
      o.push_back(F(f++));
      o.push_back(B(b++));
      o.push_back(W(w++));
    }
    // Cool-down: B, W.
    while (b < micro) {
      o.push_back(B(b++));
      o.push_back(W(w++));
    }
    // The W's held back.
    while (w < micro) o.push_back(W(w++));
  }
  return out;
}

PipeSchedule pipeline_schedule(const std::string& name, int ranks, int micro, int chunks) {
  check_name(name, chunks);
  if (name == "gpipe") return gpipe(ranks, micro);
  if (name == "1f1b") return one_f_one_b(ranks, micro);
  if (name == "interleaved") return interleaved_1f1b(ranks, micro, chunks);
  return zero_bubble_h1(ranks, micro);
}

double pipeline_bubble_formula(const std::string& name, int ranks, int micro, int chunks,
                               const PipeTimes& t) {
  check_name(name, chunks);
  check_sizes(ranks, micro, chunks);
  const double P = ranks, m = micro, v = chunks;
  // Idle (P - 1) (F + B + W) against busy m (F + B + W) per rank, chunks dividing the idle.
  if (name != "zero_bubble") return (P - 1) / (v * m);
  // ZB-H1, the paper's Table 2: a B waits for the next stage's B only, not its W, and the W's
  // held back fill the cool-down: idle (P - 1)(F + B - W) against 1F1B's (P - 1)(F + B + W).
  // The schedule reaches it for m >= P and W <= F; simulate finds (P - 1)(F + B - min(F, W)).
  return std::max(0.0, (P - 1) * (t.f + t.b - t.w) / (m * (t.f + t.b + t.w)));
}

PipeStats simulate(const PipeSchedule& sch, const PipeTimes& t) {
  Setup s{sch.ranks, sch.micro, sch.chunks, sch.split_backward, t};
  Done d(s.stages(), s.micro);
  std::vector<size_t> next(s.ranks, 0);
  std::vector<double> free_at(s.ranks, 0.0), busy(s.ranks, 0.0);
  std::vector<int> held(s.ranks, 0);
  PipeStats out;
  out.in_flight.assign(s.ranks, 0);
  size_t left = 0;
  for (const auto& o : sch.order) left += o.size();
  while (left > 0) {
    // The rank whose next action can start earliest runs it.
    int best = -1;
    double best_start = kNever;
    for (int r = 0; r < s.ranks; r++) {
      if (next[r] >= sch.order[r].size()) continue;
      const double start = std::max(free_at[r], ready_time(s, d, r, sch.order[r][next[r]]));
      if (start < best_start) {
        best_start = start;
        best = r;
      }
    }
    if (best < 0) {
      std::string stuck;
      for (int r = 0; r < s.ranks; r++)
        if (next[r] < sch.order[r].size()) {
          const PipeAction& a = sch.order[r][next[r]];
          stuck += fmt::format("{}rank {} waits forever at action {} (micro-batch {}, chunk {})",
                               stuck.empty() ? "" : "; ", r, next[r], a.micro, a.chunk);
        }
      fail("pipeline schedule {}: {}", sch.name, stuck);
    }
    const PipeAction& a = sch.order[best][next[best]++];
    const double end = best_start + s.duration(a.op);
    record(s, d, best, a, end);
    free_at[best] = end;
    busy[best] += s.duration(a.op);
    if (a.op == PipeOp::Forward) held[best]++;
    if (a.op == PipeOp::Backward || a.op == PipeOp::BackwardWeight) held[best]--;
    out.in_flight[best] = std::max(out.in_flight[best], held[best]);
    left--;
  }
  for (double f : free_at) out.makespan = std::max(out.makespan, f);
  double bubble = 0;
  for (int r = 0; r < s.ranks; r++) bubble += (out.makespan - busy[r]) / busy[r];
  out.bubble = bubble / s.ranks;
  for (int v : out.in_flight) out.max_in_flight = std::max(out.max_in_flight, v);
  return out;
}

}  // namespace kiln
