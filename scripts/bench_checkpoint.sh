#!/bin/sh
# Step-time cost of checkpoints: CONFIG trained STEPS steps, one process, saving every EVERY
# steps with no save (only the last), synchronous saves and checkpoint.async = true, the three
# interleaved REPS times (a shared machine is noisy). Per run: the mean wall time per step from
# step 1 to STEPS-1 (metrics.jsonl's times, so the periodic saves are in it and the final one is
# not), the peak RSS, and what an async save copied. Prints one line per run, then medians.
#   scripts/bench_checkpoint.sh configs/small.toml 40 5 3
#   EXTRA="--set train.threads=1" scripts/bench_checkpoint.sh ...   # more --set for every run
set -eu
cfg=${1:-configs/small.toml} steps=${2:-40} every=${3:-5} reps=${4:-3}
kiln=${KILN:-./build/kiln}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in $(seq "$reps"); do
  for mode in none sync async; do
    case $mode in
      none) sets="--set checkpoint.every=0" ;;
      sync) sets="--set checkpoint.every=$every" ;;
      async) sets="--set checkpoint.every=$every --set checkpoint.async=true" ;;
    esac
    dir="$out/$mode-$rep"
    /usr/bin/time -f "%M" -o "$dir.rss" "$kiln" train "$cfg" --set train.steps="$steps" \
      --set train.val_every=0 --set train.sample_tokens=0 --set checkpoint.keep_last=2 \
      --set train.out_dir="$dir" $sets ${EXTRA:-} > "$dir.log" 2>&1
    python3 - "$mode" "$dir" <<'PY'
import json, re, sys
mode, d = sys.argv[1], sys.argv[2]
t = {}
for line in open(d + "/metrics.jsonl"):
    r = json.loads(line)
    if r["type"] == "train": t[r["step"]] = r["time"]
last = max(t)
per_step = (t[last - 1] - t[1]) / (last - 2)
rss = int(open(d + ".rss").read().split()[-1]) / 1024
m = re.findall(r"copied \(([\d.]+) MiB", open(d + ".log").read())
print(f"{mode:5s} {per_step * 1000:8.1f} ms/step  peak RSS {rss:7.1f} MiB  copy {m[0] if m else '-'} MiB")
PY
  done
done | tee "$out/all"
echo "medians:"
for mode in none sync async; do
  grep "^$mode " "$out/all" | awk '{print $2}' | sort -n | awk -v m="$mode" \
    '{a[NR]=$1} END {printf "%-5s %8.1f ms/step\n", m, a[int((NR+1)/2)]}'
done
