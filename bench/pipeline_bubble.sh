#!/usr/bin/env bash
# The measured pipeline bubble against the schedule's formula: kiln train with parallel.pp = P
# stages (one process each, one thread each) and m micro-batches per step, for each schedule.
# A rank's bubble is the share of the step it did not compute (1 - its forward + backward +
# optimizer time / the step time, from metrics.jsonl), the median over the steps after the
# first; the table gives the stages' mean and the formula with equal stages.
#
#   bench/pipeline_bubble.sh [kiln] [config]        (defaults: build/kiln, an 8-layer byte model)
#   PIPE_P="2 4" PIPE_M="4 8 16" PIPE_SCHEDULES="1f1b gpipe" PIPE_STEPS=6 (environment)
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
SCHEDULES=${PIPE_SCHEDULES:-"1f1b gpipe"}
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
printf "%-9s %3s %4s %10s %14s %14s %12s\n" schedule P m "step ms" "bubble/stage" "mean bubble" "formula"
for P in $P_LIST; do
  for m in $M_LIST; do
    for s in $SCHEDULES; do
      d=$out/p$P-m$m-$s
      "$here/tests/mpirun.sh" -n "$P" -x OMP_NUM_THREADS=1 "$kiln" train "$config" "${model[@]}" \
        --set train.out_dir="$d" --set parallel.pp="$P" --set parallel.schedule="$s" \
        --set train.grad_accum="$m" > "$d.log" 2>&1 || { echo "failed: see $d.log"; cat "$d.log"; exit 1; }
      python3 - "$d/metrics.jsonl" "$P" "$m" "$s" <<'EOF'
import json, statistics, sys
path, P, m, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
recs = [json.loads(l) for l in open(path)]
train = [r for r in recs if r.get("type") == "train"][1:]  # the first step warms up
step = statistics.median(r["step_ms"] for r in train)
per_rank = [statistics.median(1 - r["rank_compute_ms"][k] / r["step_ms"] for r in train)
            for k in range(P)]
formula = (P - 1) / (m + P - 1)  # idle share of the step with equal stages (GPipe and 1F1B)
print(f"{s:<9} {P:>3} {m:>4} {step:>10.1f} {' '.join(f'{b:.2f}' for b in per_rank):>14} "
      f"{sum(per_rank) / P:>14.3f} {formula:>12.3f}")
EOF
    done
  done
done
