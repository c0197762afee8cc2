#!/usr/bin/env bash
# The measured pipeline bubble against the schedule's formula: kiln train with parallel.pp = P
# stages (one process each, one thread each) and m micro-batches per step, for each schedule.
# A rank's bubble is the share of the step it did not compute (1 - its forward + backward +
# optimizer time / the step time, from metrics.jsonl), the median over the steps after the
# first; the table gives the stages' mean and the schedule's formula with equal stages, as a
# share of the step: b / (1 + b) for the idle-over-busy b of pipeline_bubble_formula
# (src/parallel/pipeline_schedule.h): (P-1)/m for GPipe and 1F1B, (P-1)/(v m) interleaved,
# (P-1)/(3 m) for zero bubble with forward, input-gradient and weight-gradient parts equal.
#
#   bench/pipeline_bubble.sh [kiln] [config]        (defaults: build/kiln, an 8-layer byte model)
#   PIPE_P="2 4" PIPE_M="4 8 16" PIPE_SCHEDULES="1f1b gpipe zero_bubble interleaved" PIPE_V=2
#   PIPE_STEPS=6 (environment)
#
# With more stages than cores the ranks share cores, and a rank waiting for its neighbour gives
# its core to another: the bubble then measures the wait, not idle hardware (say so with the
# figures).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kiln=${1:-$here/build/kiln}
config=${2:-$here/configs/tiny.toml}
P_LIST=${PIPE_P:-"2 4"}
M_LIST=${PIPE_M:-"4 8 16"}
SCHEDULES=${PIPE_SCHEDULES:-"1f1b gpipe zero_bubble interleaved"}
V=${PIPE_V:-2}
STEPS=${PIPE_STEPS:-6}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Eight equal layers of 256 channels over a byte vocabulary: the stages are nearly equal, and the
# matmuls large enough that a step is compute, not messages.
model=(--set model.n_layer=8 --set model.n_embd=256 --set model.n_head=4 --set model.block_size=128
  --set train.seq_len=128 --set train.batch_size=4 --set train.steps="$STEPS"
  --set train.val_every=0 --set train.sample_tokens=0 --set checkpoint.every=0
  --set hardware.peak_gflops=100 --set train.threads=1)
echo "$(lscpu | sed -n 's/^Model name: *//p') | $(nproc) cores | $kiln"
printf "%-16s %3s %4s %10s %14s %14s %12s\n" schedule P m "step ms" "bubble/stage" "mean bubble" "formula"
for P in $P_LIST; do
  for m in $M_LIST; do
    for s in $SCHEDULES; do
      d=$out/p$P-m$m-$s
      v=1
      [ "$s" = interleaved ] && v=$V
      "$here/tests/mpirun.sh" -n "$P" -x OMP_NUM_THREADS=1 "$kiln" train "$config" "${model[@]}" \
        --set train.out_dir="$d" --set parallel.pp="$P" --set parallel.schedule="$s" \
        --set parallel.virtual_stages="$v" \
        --set train.grad_accum="$m" > "$d.log" 2>&1 || { echo "failed: see $d.log"; cat "$d.log"; exit 1; }
      python3 - "$d/metrics.jsonl" "$P" "$m" "$s" "$v" <<'EOF'
import json, statistics, sys
path, P, m, s, v = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
recs = [json.loads(l) for l in open(path)]
train = [r for r in recs if r.get("type") == "train"][1:]  # the first step warms up
step = statistics.median(r["step_ms"] for r in train)
per_rank = [statistics.median(1 - r["rank_compute_ms"][k] / r["step_ms"] for r in train)
            for k in range(P)]
b = (P - 1) / m / (v if s == "interleaved" else 3 if s == "zero_bubble" else 1)
formula = b / (1 + b)  # the idle share of a step
name = f"{s} v={v}" if s == "interleaved" else s
print(f"{name:<16} {P:>3} {m:>4} {step:>10.1f} {' '.join(f'{b:.2f}' for b in per_rank):>14} "
      f"{sum(per_rank) / P:>14.3f} {formula:>12.3f}")
EOF
    done
  done
done
