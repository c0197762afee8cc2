// Time of one optimizer step.
//
// Kernels: every matmul costs its fixed cost + max(FLOPs / (peak · matmul_efficiency),
// bytes / (bandwidth · mem_bw_efficiency)) — a roofline with a fixed cost per kernel; every
// element-wise kernel (norms, residual adds, dropout, activation, softmax, rotary, loss) costs
// overhead + bytes / bandwidth (from the last-level cache when the device has one measured and
// the kernel's data fits in it). Backward runs two matmuls per forward matmul and reads and
// writes twice the bytes of each element-wise kernel.
//
// Per micro-batch and stage: the stage's layers forward, backward and recomputed (full: every
// layer's forward again; selective: the attention core's), tensor-parallel collectives on the
// intra-node link (two all-reduces forward, two backward, two more when recomputing fully; with
// sequence parallelism each is a reduce-scatter plus an all-gather of the same bytes; never
// overlapped with compute), pipeline sends of the boundary activation and its gradient (split
// over tp ranks, per virtual stage), the LM head and loss on the last stage.
//
// Per step: with m micro-batches, p stages and v virtual stages,
//   pipeline  = m · t_slowest + (p − 1)/v · t_mean      (bubble fraction (p−1)/(v·m + p − 1)
//                                                      for equal stages: Narayanan et al. 2021)
//   + data-parallel/ZeRO collectives not hidden behind backward (or the next forward)
//   + the optimizer (memory-bound: reads and writes of state per parameter)
//   + the compute that ran beside hidden data-parallel/ZeRO collectives × the device's
//     overlap_slowdown (their kernels hold SMs and memory bandwidth while in flight).
#pragma once
#include "plan/hardware.h"
#include "plan/job.h"
#include "plan/layout.h"
#include "plan/model_spec.h"

namespace kiln::plan {

struct TimeBreakdown {      // seconds per step
  int critical_stage = 0;   // the slowest stage
  double compute = 0;       // m × the slowest stage's matmuls and element-wise kernels
  double recompute = 0;     //   of which recomputation
  double tp_comm = 0;       // m × its tensor-parallel collectives
  double cp_comm = 0;       // m × its context-parallel key/value passes not hidden by attention
  double pp_p2p = 0;        // m × its pipeline sends and receives
  double zero_exposed = 0;  // m × its per-micro-batch ZeRO-2/3 traffic not hidden by compute
  double bubble = 0;        // (p − 1)/v × the mean stage's micro-batch time
  double dp_comm = 0;       // once-per-step data-parallel traffic, all of it
  double dp_exposed = 0;    //   the part not hidden behind compute
  double optimizer = 0;
  double contention = 0;  // compute slowed by the hidden NCCL collectives beside it (dp, ZeRO, tp)
  double step = 0;        // the sum of the exposed parts
};

// One matmul C(M,N) = A(M,K)·B(K,N) on `d` in `dt`, as step_time counts it: the device's
// matmul fixed cost plus the longer of its FLOPs at the sustained rate and its bytes at the
// sustained bandwidth. For bf16, fp16 and fp32 (an fp8 job's linear layers run at the fp8 rate,
// which this does not give).
double matmul_seconds(const DeviceSpec& d, Dtype dt, double M, double N, double K);

TimeBreakdown step_time(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j, const Layout& l,
                        int64_t micro_batches);

}  // namespace kiln::plan
