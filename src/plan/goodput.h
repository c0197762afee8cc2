// Goodput: what failures cost a run. A large job is interrupted; each interruption loses the
// work since the last checkpoint and the time to restart, and checkpoints themselves take time.
// From a failure rate per device-hour, the time to write a checkpoint and the time to restart,
// the checkpoint interval that maximises useful work (Young 1974; Daly 2006) and the expected
// wall-clock time, GPU-hours and cost with failures, next to the failure-free figures.
//
// Sources (docs/planner.md, "Goodput"):
// - Failure rate: Llama 3's pre-training saw 419 unexpected interruptions in a 54-day snapshot
//   on 16,384 H100s (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.4):
//   419 / (54 × 24 × 16,384) = 1.97e-5 per GPU-hour, a job MTBF of about 3 hours at that size.
// - Interval: Young, "A first order approximation to the optimum checkpoint interval", CACM
//   17(9), 1974: τ = sqrt(2·δ·M); Daly, "A higher order estimate of the optimum checkpoint
//   interval for restart dumps", FGCS 22(3), 2006: τ = sqrt(2·δ·M) − δ for δ < M/2, and the
//   expected wall-clock T = M·e^(R/M)·(e^((τ+δ)/M) − 1)·Ts/τ for solve time Ts.
#pragma once
#include <cstdint>
#include <string>

#include "plan/hardware.h"
#include "plan/job.h"
#include "plan/planner.h"

namespace kiln::plan {

struct GoodputInputs {
  double solve_hours = 0;            // Ts: the failure-free wall-clock time of the run
  int64_t devices = 0;               // N
  double failures_per_gpu_hour = 0;  // λ: the job fails at N·λ per hour
  double checkpoint_seconds = 0;     // δ: writing one checkpoint (training stops meanwhile)
  double restart_seconds = 0;        // R: from a failure to training again (detect, reschedule,
                                     // load the checkpoint)
};

struct Goodput {
  double mtbf_hours = 0;         // M = 1 / (N·λ)
  bool stalled() const;          // under kMinGoodput of the time would train: no finite run
  double interval_hours = 0;     // τ: compute between checkpoints (Daly's optimum)
  double wall_hours = 0;         // expected, with checkpoints, failures and restarts
  double expected_failures = 0;  // wall_hours / M
  double checkpoint_hours = 0;   // time spent writing checkpoints: (Ts/τ)·δ
  double goodput = 0;            // Ts / wall_hours, in (0, 1]
};

// Throws kiln::Error when an input is impossible (negative, or not finite), or, with
// refuse_stalled, when less than kMinGoodput of the wall-clock time would train (the job fails
// faster than it recovers; the figures are then returned as computed, possibly infinite).
constexpr double kMinGoodput = 0.01;
Goodput expected_goodput(const GoodputInputs& in, bool refuse_stalled = true);
// Why a stalled run does not finish, naming the figures and the flags that set them.
std::string stalled_reason(const GoodputInputs& in);

// A checkpoint of the whole training state (weights, plus fp32 master weights in bf16, plus
// AdamW's two moments: 14 bytes per parameter in bf16, 12 in fp32), every node writing its share
// at once: at the job's per-node bandwidth (--ckpt-write-gbs, else one NIC's line rate), capped
// by the storage's aggregate (--storage-gbs; Llama 3's Tectonic sustained 2 TB/s, Dubey et al.
// 2024, section 3.3.1). Its seconds, and the goodput of the run `e` with the job's failure and
// restart figures. Training stops while it writes (an asynchronous save would hide most of it).
struct RunGoodput {
  double checkpoint_bytes = 0, checkpoint_seconds = 0, write_gbs = 0;  // write_gbs: in all
  GoodputInputs in;
  Goodput g;
};
RunGoodput run_goodput(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                       const Estimate& e, bool refuse_stalled = true);

}  // namespace kiln::plan
