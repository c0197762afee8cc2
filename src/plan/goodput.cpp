#include "plan/goodput.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kiln::plan {

Goodput expected_goodput(const GoodputInputs& in, bool refuse_stalled) {
  auto check = [](double v, const char* what) {
    if (!std::isfinite(v) || v < 0) fail("goodput: {} must be 0 or more, got {}", what, v);
  };
  check(in.solve_hours, "the run's hours");
  check(in.failures_per_gpu_hour, "--failures-per-gpu-hour");
  check(in.checkpoint_seconds, "the checkpoint time");
  check(in.restart_seconds, "--restart-minutes");
  if (in.devices < 1) fail("goodput: the cluster has no devices");
  Goodput g;
  const double Ts = in.solve_hours, delta = in.checkpoint_seconds / 3600.0,
               R = in.restart_seconds / 3600.0;
  const double rate = static_cast<double>(in.devices) * in.failures_per_gpu_hour;
  if (rate <= 0 || Ts <= 0) {  // no failures: one checkpoint at the end is all it takes
    g.mtbf_hours = rate > 0 ? 1.0 / rate : INFINITY;
    g.interval_hours = Ts;
    g.checkpoint_hours = delta;
    g.wall_hours = Ts + delta;
    g.goodput = g.wall_hours > 0 ? Ts / g.wall_hours : 1.0;
    return g;
  }
  const double M = 1.0 / rate;
  g.mtbf_hours = M;
  // Daly's optimum (his eq. 37, first terms), never longer than the run itself and at least a
  // checkpoint's own duration; when a checkpoint takes half the MTBF or more, checkpointing at
  // every MTBF is his answer.
  double tau = delta < 0.5 * M ? std::sqrt(2.0 * delta * M) - delta : M;
  if (delta == 0) tau = std::min(Ts, M * 1e-3);  // free checkpoints: checkpoint very often
  tau = std::min(std::max(tau, 1e-9), Ts);
  g.interval_hours = tau;
  // Daly's expected wall-clock time with restarts (eq. 13).
  g.wall_hours = M * std::exp(R / M) * std::expm1((tau + delta) / M) * Ts / tau;
  g.expected_failures = g.wall_hours / M;
  g.checkpoint_hours = Ts / tau * delta;
  g.goodput = Ts / g.wall_hours;
  // Below 1% useful time the expected figures stop meaning anything (and soon overflow): the
  // job fails faster than it restarts and checkpoints. Say so rather than print them.
  if (refuse_stalled && g.stalled()) fail("goodput: {}", stalled_reason(in));
  return g;
}

bool Goodput::stalled() const {
  return !(goodput >= kMinGoodput);
}

std::string stalled_reason(const GoodputInputs& in) {
  const double rate = static_cast<double>(in.devices) * in.failures_per_gpu_hour;
  return fmt::format(
      "the job fails every {:.3g} minutes on average ({} devices at {:g} interruptions per "
      "device-hour: --failures-per-gpu-hour, and pre-emptions on spot), restarts take {:.3g} "
      "minutes (--restart-minutes, --spot-restart-minutes) and a checkpoint {:.3g} s "
      "(--ckpt-write-gbs, --storage-gbs): under {:g}% of the time would train, and the run would "
      "not finish; check those figures or plan fewer devices",
      rate > 0 ? 60 / rate : INFINITY, in.devices, in.failures_per_gpu_hour,
      in.restart_seconds / 60, in.checkpoint_seconds, 100 * kMinGoodput);
}

RunGoodput run_goodput(const ModelSpec& m, const ClusterSpec& c, const JobSpec& j,
                       const Estimate& e, bool refuse_stalled) {
  RunGoodput r;
  const double params = static_cast<double>(count_params(m).total);
  r.checkpoint_bytes = params * (j.dtype == Dtype::fp32 ? 12.0 : 14.0);
  // A machine without a network (a calibrated CPU) writes at the storage's rate.
  const double per_node = j.ckpt_write_gbs > 0 ? j.ckpt_write_gbs
                          : c.nic_gbps > 0     ? c.nic_gbps / 8
                                               : INFINITY;
  r.write_gbs = std::min(per_node * c.nodes, j.storage_gbs);
  r.checkpoint_seconds = r.checkpoint_bytes / (r.write_gbs * 1e9);
  GoodputInputs in;
  in.solve_hours = e.days * 24.0;
  in.devices = c.total_gpus();
  in.failures_per_gpu_hour = j.failures_per_gpu_hour;
  in.checkpoint_seconds = r.checkpoint_seconds;
  in.restart_seconds = j.restart_minutes * 60.0;
  r.in = in;
  r.g = expected_goodput(in, refuse_stalled);
  return r;
}

}  // namespace kiln::plan
