#!/usr/bin/env bash
# `kiln submit` on a real two-node Slurm that this test starts itself: two simulated hosts
# (scripts/netns-cluster.sh: network namespaces on a bridge, each with its own address and
# hostname), one slurmd on each, slurmctld on the first, munged shared. A job of 2 nodes × 2
# tasks trains with ranks on both hosts (the hierarchical backend: shared memory inside a host,
# TCP between them); the same job with --max-restarts 1, one of whose ranks on the second host is
# killed, is requeued, resumes from its newest checkpoint and ends with the bits of the
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
wait_for 600 ended "$JR" && state_is "$JR" COMPLETED || {
  cat "$REF"/slurm-*.out
  die "reference job $JR did not complete (state $(job_state "$JR"))"
}
ctl scontrol show job "$JR" | grep -q "NodeList=kslurm\[0-1\]" ||
  die "job $JR did not run on both nodes: $(ctl scontrol show job "$JR" | grep -o 'NodeList=[^ ]*')"
grep -q '"world":4' "$REF/metrics.jsonl" || die "the run was not 4 ranks"
[ "$(last_step "$REF")" = $STEPS ] || die "job $JR ended at step $(last_step "$REF")"
echo "PASS: job $JR trained $STEPS steps on 4 ranks over 2 nodes"

OUT=$S/run
JK=$(submit "$OUT" $STEPS --max-restarts 1 "${crash_args[@]}")
past20() { [ "$(records "$OUT" checkpoint)" -ge 2 ] && [ -f "$OUT/pids/rank-3.pid" ]; }
wait_for 300 past20 || die "job $JK never wrote two checkpoints (state $(job_state "$JK"))"
KILL_STEP=$(last_step "$OUT")
# Rank 3 is the second task on the second node (srun's block distribution).
kill -9 "$(cat "$OUT/pids/rank-3.pid")" || die "rank 3 of job $JK was gone before the kill"
echo "killed rank 3 (on ${HOSTS[1]}) of job $JK after step $KILL_STEP"
[ "${KILL_STEP:-0}" -lt $((STEPS - 50)) ] || die "job $JK was nearly done at the kill; make it longer"
requeued "$JK" "$OUT"
[ "$(last_step "$OUT")" = $STEPS ] || die "job $JK ended at step $(last_step "$OUT")"
grep -q "requeueing job $JK (restart 1 of 1)" "$OUT/slurm-$JK.out" ||
  die "the batch script did not requeue after the crash"
grep '"type":"restart"' "$OUT/metrics.jsonl" | grep -q '"restarting":true' ||
  die "no restart record saying the job was requeued"
FINAL=$(printf "checkpoints/step_%08d/model.safetensors" $STEPS)
cmp -s "$REF/$FINAL" "$OUT/$FINAL" ||
  die "the requeued job's final weights differ from the uninterrupted job's"
echo "PASS: job $JK lost a rank on ${HOSTS[1]} after step $KILL_STEP, was requeued, resumed and ended with the uninterrupted job's bits"
