#!/usr/bin/env bash
# `kiln submit` against a real one-node Slurm that this test starts itself (munged, slurmctld and
# slurmd as root on localhost, private state under /tmp): a 2-task job trains to the end; a
# running job that gets Slurm's warning signal (USR1) checkpoints, exits for requeue, is
# requeued, and resumes from that checkpoint to the end; with --max-restarts, a job one of whose
# ranks is killed is requeued after the watchdog ends the other, resumes, and ends with the
# bits of an uninterrupted run. Exit 77 (skipped) only where Slurm cannot start: not root, or
# the packages missing (scripts/setup.sh installs them).
set -euo pipefail
KILN=$1
SRC=$2
ctl() { "$@"; }  # client commands reach the controller on localhost
# shellcheck source=tests/integration/slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_prerequisites

S=$(mktemp -d /tmp/kiln-slurm-XXXXXX)
NODE=$(hostname -s)
trap slurm_cleanup EXIT

# --- a private one-node cluster -------------------------------------------------------------
slurm_start_munged
PORT=$((17000 + RANDOM % 2000))
slurm_write_conf $PORT "$NODE(127.0.0.1)" \
  "NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=4 RealMemory=8192 State=UNKNOWN"
slurmctld -f "$SLURM_CONF" -c || die "slurmctld did not start"
slurmd -f "$SLURM_CONF" -N "$NODE" || die "slurmd did not start"
wait_for 60 all_idle || die "node $NODE never became idle"
echo "slurm up: node $NODE, controller port $PORT"

# --- 1. a 2-task job trains to the end -------------------------------------------------------
OUT1="$S/run 1"  # a space: kiln submit must quote it on its #SBATCH lines
J1=$(submit "$OUT1" 20)
[ -n "$J1" ] || die "kiln submit printed no job id"
completes "$J1" "$OUT1" 180
[ "$(last_step "$OUT1")" = 20 ] || die "job $J1 ended at step $(last_step "$OUT1"), not 20"
grep -q '"launcher":"slurm"' "$OUT1/metrics.jsonl" || die "the run did not see it was started by srun"
grep -q '"world":2' "$OUT1/metrics.jsonl" || die "the run was not 2 ranks"
grep -q "\"slurm_job_id\":\"$J1\"" "$OUT1/metrics.jsonl" || die "the run did not record job $J1"
echo "PASS: job $J1 trained 20 steps on 2 tasks"

# --- 2. kiln launch inside an allocation (mpirun started by a batch script) -------------------
OUT3=$S/run3
J3=$(sbatch --parsable -n 2 -o "$S/launch-%j.out" --wrap "$KILN launch -n 2 $SRC/configs/tiny.toml \
  --set train.steps=10 --set train.out_dir=$OUT3 --set train.val_every=0 --set train.sample_tokens=0 \
  --set data.train='$SRC/data/licenses/train_*.bin' --set data.val='$SRC/data/licenses/val_*.bin'")
wait_for 180 ended "$J3" && state_is "$J3" COMPLETED || {
  cat "$S"/launch-*.out
  die "kiln launch in job $J3 did not complete (state $(job_state "$J3"))"
}
[ "$(last_step "$OUT3")" = 10 ] || die "kiln launch in job $J3 ended at step $(last_step "$OUT3")"
grep -q '"world":2' "$OUT3/metrics.jsonl" || die "kiln launch in job $J3 did not run 2 ranks"
echo "PASS: job $J3 ran kiln launch -n 2 inside its allocation"

# --- 3. the warning signal: checkpoint, requeue, resume --------------------------------------
OUT2=$S/run2
STEPS=1500
J2=$(submit "$OUT2" $STEPS)
running() { [ "$(records "$OUT2" train)" -ge 5 ]; }
wait_for 180 running || die "job $J2 never reached step 5 (state $(job_state "$J2"))"
scancel --signal=USR1 --full "$J2"
stopped() { [ "$(records "$OUT2" stopped)" -ge 1 ]; }
wait_for 120 stopped || {
  cat "$OUT2"/slurm-*.out
  die "job $J2 wrote no checkpoint on USR1"
}
STOP_STEP=$(grep '"type":"stopped"' "$OUT2/metrics.jsonl" | sed 's/.*"step":\([0-9]*\).*/\1/')
[ "$STOP_STEP" -lt $STEPS ] || die "the job finished before the signal; make it longer"
CKPT=$(printf "%s/checkpoints/step_%08d" "$OUT2" "$STOP_STEP")
[ -f "$CKPT/trainer_state.json" ] || die "no checkpoint $CKPT after the stop"
echo "job $J2 stopped at step $STOP_STEP with checkpoint $CKPT"
requeued "$J2" "$OUT2"
[ "$(last_step "$OUT2")" = $STEPS ] || die "job $J2 ended at step $(last_step "$OUT2")"
grep '"type":"run_start"' "$OUT2/metrics.jsonl" | tail -1 | grep -q "\"resumed_from\":\"$CKPT\"" ||
  die "the requeued run did not resume from $CKPT"
grep '"type":"run_start"' "$OUT2/metrics.jsonl" | tail -1 | grep -q '"restarts":1' ||
  die "the requeued run did not count its restart"
grep -q "requeueing job $J2" "$OUT2/slurm-$J2.out" || die "the batch script did not requeue"
# No step was trained twice or skipped: the resumed run starts right after the checkpoint.
FIRST_AFTER=$(grep '"type":"train"' "$OUT2/metrics.jsonl" |
  awk -v s="$STOP_STEP" -F'"step":' '{split($2,a,","); if (a[1] == s + 1) print a[1]}' | head -1)
[ "$FIRST_AFTER" = $((STOP_STEP + 1)) ] || die "no step $((STOP_STEP + 1)) after the resume"
echo "PASS: job $J2 checkpointed at step $STOP_STEP on USR1, was requeued, resumed and finished"

# --- 4. a killed rank: the failed run is recorded, the job requeued, resumed, and ends with the
# bits of a run that was never interrupted ----------------------------------------------------
crash_args=(--set checkpoint.every=10 --set checkpoint.keep_last=2 --set train.watchdog_seconds=15)
REF4=$S/ref4
# Long enough that the kill lands well before the end (the tiny config trains ~100 steps/s).
CRASH_STEPS=1500
J5=$(submit "$REF4" $CRASH_STEPS "${crash_args[@]}")
completes "$J5" "$REF4" 300
OUT4=$S/run4
J4=$(submit "$OUT4" $CRASH_STEPS --max-restarts 1 "${crash_args[@]}")
kill_and_requeue "$OUT4" "$J4" 1 $CRASH_STEPS
grep -q '"type":"restart"' "$OUT4/metrics.jsonl" || die "no restart record in $OUT4/metrics.jsonl"
grep '"type":"restart"' "$OUT4/metrics.jsonl" | grep -q '"restarting":true' ||
  die "the restart record does not say the job was requeued"
[ "$(grep -c . "$OUT4/failed-nodes")" = 1 ] || die "failed-nodes should name one node once: $(cat "$OUT4/failed-nodes")"
FINAL=$(printf "checkpoints/step_%08d/model.safetensors" $CRASH_STEPS)
cmp -s "$REF4/$FINAL" "$OUT4/$FINAL" ||
  die "the requeued job's final weights differ from the uninterrupted job's"
"$KILN" report "$OUT4" -o "$S/report4.html" > /dev/null || die "kiln report failed on $OUT4"
grep -q "restart" "$S/report4.html" || die "kiln report does not show the restart"
echo "PASS: job $J4 lost a rank after step $KILL_STEP, was requeued, resumed and ended with the uninterrupted run's bits"
