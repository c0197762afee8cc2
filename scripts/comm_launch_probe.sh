#!/usr/bin/env bash
# Issue 15, item 8: is the shared-memory engine's speed decided per launch? Runs LAUNCHES
# consecutive launches of `kiln bench comm` (default: a 2-rank fp32 all-reduce, 16-64 MiB) and
# prints, per launch and size, the engine's and MPI's GB/s and their ratio, then the engine's
# start-up decisions (window and staging placement, the tuner's choices) as it reported them
# with KILN_SHM_DEBUG=1. Every launch holds /tmp/kiln-cpu.lock (the machine is shared).
#
#   scripts/comm_launch_probe.sh [KILN_BINARY] [LAUNCHES] [extra bench args...]
#   scripts/comm_launch_probe.sh build/kiln 10 --op allreduce -n 2 --min 16M --max 64M
set -euo pipefail
kiln=${1:-build/kiln}
launches=${2:-10}
shift $(($# < 2 ? $# : 2))
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--op allreduce -n 2 --min 16M --max 64M)
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
printf '# %s %s, %s launches, %s\n' "$kiln" "${args[*]}" "$launches" "$(lscpu | sed -n 's/^Model name: *//p')"
printf '%-7s %-9s %10s %11s %10s %8s %10s\n' launch time size kiln_GB/s mpi_GB/s ratio mem_GB/s
for i in $(seq 1 "$launches"); do
  t=$(date +%H:%M:%S)
  KILN_SHM_DEBUG=1 flock /tmp/kiln-cpu.lock "$kiln" bench comm "${args[@]}" --json \
    >"$log/$i.json" 2>"$log/$i.err"
  # mem_GB/s: the launch's own memory rate (every rank adding one 64 MiB array into another at
  # once), to tell a slow engine from slow memory.
  jq -r --arg i "$i" --arg t "$t" '.memory_gbs as $m | .rows[] |
      [$i, $t, (.bytes / 1048576 | tostring) + "M", (.kiln.algbw_gbs * 100 | round / 100),
       (.mpi.algbw_gbs * 100 | round / 100), (.mpi.time_us / .kiln.time_us * 100 | round / 100),
       ($m * 100 | round / 100)]
      | @tsv' "$log/$i.json" |
    awk -F'\t' '{ printf "%-7s %-9s %10s %11.2f %10.2f %7.2fx %10.2f\n", $1, $2, $3, $4, $5, $6, $7 }'
  # The engine's decisions (rank-prefixed lines), once per distinct line.
  grep -h 'shm:' "$log/$i.err" | sort -u | sed 's/^/        /' || true
done
