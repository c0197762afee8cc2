#!/usr/bin/env bash
# `kiln submit` on a real two-node Slurm that this test starts itself: two simulated hosts
# (scripts/netns-cluster.sh: network namespaces on a bridge, each with its own address and
# hostname), one slurmd on each, slurmctld on the first, munged shared. A job of 2 nodes × 2
# tasks trains with ranks on both hosts (the hierarchical backend: shared memory inside a host,
# TCP between them); the same job with --max-restarts 1, one of whose ranks on the second host is
# killed, is requeued, resumes from its newest checkpoint and ends with the bits of the
# uninterrupted job; with --min-nodes 1, a job whose second host fails twice is requeued without
# it and goes on with half the ranks and twice the accumulation, its losses those of the
# uninterrupted job. Exit 77 (skipped) where it cannot run: not root, Slurm or iproute2 missing,
# or no network namespaces.
set -euo pipefail
KILN=$1
SRC=$2
HOSTS=(kslurm0 kslurm1)
export KILNSIM_PREFIX=kslurm  # a cluster of its own, apart from the MPI multi-node test's
NETNS=$SRC/scripts/netns-cluster.sh
# Client commands (sbatch, scontrol, kiln submit) run where the controller's address is reachable.
ctl() { nsenter --net=/run/netns/${HOSTS[0]} "$@"; }
# shellcheck source=tests/integration/slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_prerequisites
for p in ip unshare nsenter; do
  command -v $p > /dev/null || skip "$p not installed (iproute2, util-linux)"
done

S=$(mktemp -d /tmp/kiln-slurm-mn-XXXXXX)
cleanup() {
  slurm_cleanup
  "$NETNS" down > /dev/null 2>&1 || true
}
trap cleanup EXIT
"$NETNS" up ${#HOSTS[@]} > /dev/null 2>&1 || skip "cannot create network namespaces here"

# --- a private two-node cluster --------------------------------------------------------------
slurm_start_munged
PORT=$((19000 + RANDOM % 2000))
nodes=""
for i in "${!HOSTS[@]}"; do
  nodes+="NodeName=${HOSTS[$i]} NodeAddr=10.77.0.$((i + 1)) NodeHostname=${HOSTS[$i]} CPUs=2 RealMemory=4096 State=UNKNOWN"$'\n'
done
slurm_write_conf $PORT "${HOSTS[0]}(10.77.0.1)" "$nodes"
# Each daemon in its host's network namespace under the host's name. `ip netns exec` would
# remount /sys (slurmd needs the cgroup mounts), so nsenter enters the network namespace only.
# Jobs' temporary files (PMIx's per-step directories) are per host: slurmd gets its own mount
# namespace with $S/tmp-HOST over $S/tmp.
on_host() {  # on_host HOST CMD...
  local h=$1
  shift
  mkdir -p "$S/tmp-$h"
  nsenter --net=/run/netns/$h unshare --uts --mount sh -c \
    'mount --bind "$1/tmp-$0" "$1/tmp" && hostname "$0" && shift && exec "$@"' "$h" "$S" "$@"
}
on_host "${HOSTS[0]}" slurmctld -f "$SLURM_CONF" -c || die "slurmctld did not start"
for h in "${HOSTS[@]}"; do
  on_host "$h" slurmd -f "$SLURM_CONF" -N "$h" || die "slurmd on $h did not start"
done
wait_for 60 all_idle || die "the nodes never became idle: $(ctl sinfo -N 2>&1)"
echo "slurm up: nodes ${HOSTS[*]}, controller ${HOSTS[0]} port $PORT"

# --- an uninterrupted 2-node job, and the same job with a rank killed on the second node -----
crash_args=(--nodes 2 --set checkpoint.every=10 --set checkpoint.keep_last=2
  --set train.watchdog_seconds=15)
STEPS=600
REF=$S/ref
JR=$(submit "$REF" $STEPS "${crash_args[@]}")
[ -n "$JR" ] || die "kiln submit printed no job id"
completes "$JR" "$REF" 600
ctl scontrol show job "$JR" | grep -q "NodeList=kslurm\[0-1\]" ||
  die "job $JR did not run on both nodes: $(ctl scontrol show job "$JR" | grep -o 'NodeList=[^ ]*')"
grep -q '"world":4' "$REF/metrics.jsonl" || die "the run was not 4 ranks"
[ "$(last_step "$REF")" = $STEPS ] || die "job $JR ended at step $(last_step "$REF")"
echo "PASS: job $JR trained $STEPS steps on 4 ranks over 2 nodes"

OUT=$S/run
JK=$(submit "$OUT" $STEPS --max-restarts 1 "${crash_args[@]}")
# Rank 3 is the second task on the second node (srun's block distribution).
kill_and_requeue "$OUT" "$JK" 3 $STEPS
grep '"type":"restart"' "$OUT/metrics.jsonl" | grep -q '"restarting":true' ||
  die "no restart record saying the job was requeued"
FINAL=$(printf "checkpoints/step_%08d/model.safetensors" $STEPS)
cmp -s "$REF/$FINAL" "$OUT/$FINAL" ||
  die "the requeued job's final weights differ from the uninterrupted job's"
echo "PASS: job $JK lost rank 3 on ${HOSTS[1]} after step $KILL_STEP, was requeued, resumed and ended with the uninterrupted job's bits"

# --- elastic shrink: the second node fails twice, is excluded, and the job goes on alone -------
OUT3=$S/shrink
J3=$(submit "$OUT3" $STEPS --max-restarts 2 --min-nodes 1 "${crash_args[@]}")
checkpoints_past() { [ "$(records "$OUT3" checkpoint)" -ge "$1" ] && [ -f "$OUT3/pids/rank-3.pid" ]; }
restart_now() {  # the job requeued: start it at once once the nodes are free
  is_pending() { state_is "$J3" PENDING; }
  wait_for 180 is_pending || die "job $J3 was not requeued (state $(job_state "$J3"))"
  wait_for 120 all_idle || die "the nodes did not become idle after the requeue"
  sleep 1
  ctl scontrol update JobId="$J3" StartTime=now
}
wait_for 300 checkpoints_past 2 || die "job $J3 never wrote two checkpoints"
first=$(cat "$OUT3/pids/rank-3.pid")
kill -9 "$first"
echo "killed rank 3 (on ${HOSTS[1]}) of job $J3 after step $(last_step "$OUT3")"
restart_now
again() { checkpoints_past 4 && [ "$(cat "$OUT3/pids/rank-3.pid")" != "$first" ]; }
wait_for 300 again || die "job $J3 did not run on both nodes again after its first restart"
kill -9 "$(cat "$OUT3/pids/rank-3.pid")"
echo "killed rank 3 (on ${HOSTS[1]}) of job $J3 again after step $(last_step "$OUT3")"
restart_now
completes "$J3" "$OUT3" 600
grep -q "leaving out node(s) ${HOSTS[1]}, named in two failures" "$OUT3/slurm-$J3.out" || {
  cat "$OUT3/slurm-$J3.out" "$OUT3/failed-nodes"
  die "${HOSTS[1]} was not excluded"
}
grep -q "on 1 of 2 nodes: 2 data-parallel replicas, train.grad_accum 2" "$OUT3/slurm-$J3.out" || {
  cat "$OUT3/slurm-$J3.out"
  die "the job did not go on with 2 replicas and grad_accum 2"
}
grep '"type":"run_start"' "$OUT3/metrics.jsonl" | tail -1 | grep -q '"world":2' ||
  die "the last run was not 2 ranks"
[ "$(last_step "$OUT3")" = $STEPS ] || die "job $J3 ended at step $(last_step "$OUT3")"
# The same global batch after the shrink: every step's loss that of the uninterrupted job.
losses() {  # "step loss" per train record (keys are in alphabetical order)
  grep '"type":"train"' "$1/metrics.jsonl" | awk '{
    match($0, /"step":[0-9]+/); s = substr($0, RSTART + 7, RLENGTH - 7)
    match($0, /"loss":[^,]+/); print s, substr($0, RSTART + 7, RLENGTH - 7) }' | sort -n -u -k1,1
}
compared=$(join <(losses "$REF") <(losses "$OUT3") | wc -l)
[ "$compared" = $STEPS ] || die "compared $compared steps' losses, not $STEPS"
worst=$(join <(losses "$REF") <(losses "$OUT3") |
  awk '{d = ($2 - $3) / $2; if (d < 0) d = -d; if (d > w) w = d} END {printf "%.3g", w + 0}')
awk -v w="$worst" 'BEGIN {exit !(w <= 1e-5)}' ||
  die "after the shrink a step's loss differs from the uninterrupted job's by $worst (relative)"
echo "PASS: job $J3 lost ${HOSTS[1]} twice, went on with 2 ranks and grad_accum 2; losses within $worst of the uninterrupted job's"
