// Pipeline schedules: for P ranks holding the stages of a model and m micro-batches per step,
// the order in which each rank runs its forwards (F) and backwards (B, or with the backward
// split, its input part B and weight part W):
//   - gpipe: every forward, then every backward; rank r holds all m micro-batches;
//   - one_f_one_b: PipeDream-Flush / Megatron-LM's default: rank r runs at most P - r forwards
//     ahead of its backwards, so the first rank holds at most P micro-batches' activations.
//     Both idle (P-1)/m of their busy time, and both come from a policy run over unit-time
//     operations (list scheduling), so every order is one the dependencies allow;
//   - interleaved_1f1b: Megatron-LM's interleaved 1F1B (Narayanan et al. 2021): rank r holds v
//     model chunks, virtual stages c·P + r, and runs warm-up forwards, steady 1F1B and
//     cool-down backwards over micro-batches in groups of P. Idles (P-1)/(v·m); rank 0 holds
//     up to min(v·m, (v+1)P - 1) micro-batch chunks (each 1/v of its layers);
//   - zero_bubble_h1: ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B with the
//     backward split, rank r holding back its first r W's to fill the cool-down. Idles
//     (P-1)(F+B-W) against 1F1B's (P-1)(F+B+W); every rank holds at most P micro-batches,
//     1F1B's peak (its first rank).
// The straight-line schedules are written as their papers give them: warm-up, steady state and
// cool-down. A micro-batch's activations are held from its forward until its last backward part.
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
// By name: "gpipe", "1f1b", "interleaved" (chunks >= 2) or "zero_bubble"; an error names the
// choices and the setting at fault.
PipeSchedule pipeline_schedule(const std::string& name, int ranks, int micro, int chunks = 1);
// The schedule's idle over busy time per rank in theory, with the given operation times: what
// simulate() finds for m >= P (zero_bubble: and W <= F; a longer W idles more).
double pipeline_bubble_formula(const std::string& name, int ranks, int micro, int chunks,
                               const PipeTimes& t);

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
