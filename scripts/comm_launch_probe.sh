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
printf '%-7s %-9s %10s %11s %10s %8s %10s %10s %9s %8s\n' launch time size kiln_GB/s mpi_GB/s ratio mem_GB/s barrier_us others_s stolen_s
for i in $(seq 1 "$launches"); do
  t=$(date +%H:%M:%S)
  # Inside the lock: the machine's CPU ticks (/proc/stat) around the launch and the launch's own
  # CPU time, so that a launch during which other processes ran (or the host stole time) shows.
  KILN_SHM_DEBUG=1 flock /tmp/kiln-cpu.lock bash -c '
    read -r _ u n s idle io irq sirq steal _ < /proc/stat
    /usr/bin/time -f "%U %S" -o "$1.cpu" "${@:2}" >"$1.json" 2>"$1.err"
    read -r _ u2 n2 s2 idle2 io2 irq2 sirq2 steal2 _ < /proc/stat
    echo $(( (u2 + n2 + s2 + irq2 + sirq2) - (u + n + s + irq + sirq) )) $((steal2 - steal)) >"$1.ticks"
  ' _ "$log/$i" "$kiln" bench comm "${args[@]}" --json
  read -r busy steal <"$log/$i.ticks"
  read -r cu cs <"$log/$i.cpu"
  # Ticks are 1/100 s: the machine's busy time less the launch's own is what others ran.
  others=$(awk -v b="$busy" -v u="$cu" -v s="$cs" 'BEGIN { o = b / 100 - u - s; printf "%.2f", o < 0 ? 0 : o }')
  stolen=$(awk -v t="$steal" 'BEGIN { printf "%.2f", t / 100 }')
  # mem_GB/s: the launch's own memory rate (every rank adding one 64 MiB array into another at
  # once), to tell a slow engine from slow memory.
  jq -r --arg i "$i" --arg t "$t" --arg o "$others" --arg st "$stolen" '.memory_gbs as $m | .barrier_us as $b | .rows[] |
      [$i, $t, (.bytes / 1048576 | tostring) + "M", (.kiln.algbw_gbs * 100 | round / 100),
       (.mpi.algbw_gbs * 100 | round / 100), (.mpi.time_us / .kiln.time_us * 100 | round / 100),
       ($m * 100 | round / 100), ($b * 1000 | round / 1000), $o, $st]
      | @tsv' "$log/$i.json" |
    awk -F'\t' '{ printf "%-7s %-9s %10s %11.2f %10.2f %7.2fx %10.2f %10.3f %9s %8s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 }'
  # The engine's decisions (rank-prefixed lines), once per distinct line.
  grep -h 'shm:' "$log/$i.err" | sort -u | sed 's/^/        /' || true
done
