// Pipeline schedules: for P ranks holding the stages of a model and m micro-batches per step,
// the order in which each rank runs its forwards and backwards. Each schedule is a policy, and
// the per-rank orders come from running it over unit-time operations (list scheduling), so
// every order is one the dependencies allow:
//   - gpipe: every forward, then every backward;
//   - one_f_one_b: PipeDream-Flush / Megatron-LM's default: rank r runs at most P - r forwards
//     ahead of its backwards, so the first rank holds at most P micro-batches' activations.
// Both idle (P-1)/m of their busy time. Model chunks (interleaving) and a split backward (zero
// bubble) are in the types and the simulation; their policies are not built yet: greedy rules
// missed the published bubbles, (P-1)/(v·m) and (P-1)(F+B-W) at 1F1B's memory.
// A micro-batch's activations are held from its forward until its last backward part.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

enum class PipeOp { Forward, Backward, BackwardInput, BackwardWeight };

struct PipeAction {
  PipeOp op;
  int micro = 0;
  int chunk = 0;  // the model chunk on this rank (interleaved), else 0
  bool operator==(const PipeAction&) const = default;
};

struct PipeSchedule {
  std::string name;
  int ranks = 1, micro = 1, chunks = 1;
  bool split_backward = false;                 // B and W apart (zero bubble)
  std::vector<std::vector<PipeAction>> order;  // per rank
};

// Operation times of one model chunk, in any unit; a backward without the split takes b + w.
struct PipeTimes {
  double f = 1, b = 1, w = 1;
};

PipeSchedule gpipe(int ranks, int micro);
PipeSchedule one_f_one_b(int ranks, int micro);
// `chunks` model chunks per rank; more than one needs `micro` a multiple of `ranks`.
PipeSchedule interleaved_1f1b(int ranks, int micro, int chunks);
PipeSchedule zero_bubble_h1(int ranks, int micro);
// By name: "gpipe" or "1f1b"; an error names the choices.
PipeSchedule pipeline_schedule(const std::string& name, int ranks, int micro);

struct PipeStats {
  double makespan = 0;    // one step, with the given times
  double bubble = 0;      // idle time over busy time, per rank, averaged: (makespan - busy) / busy
  int max_in_flight = 0;  // most micro-batches whose activations a rank held at once
  std::vector<int> in_flight;  // per rank
};

// Runs the per-rank orders with the given times (communication free), checking each operation
// waits for what it needs; an error names the first rank and action that can never run.
PipeStats simulate(const PipeSchedule& s, const PipeTimes& t = {});

}  // namespace kiln
