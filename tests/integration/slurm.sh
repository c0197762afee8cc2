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
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "starting slurmd and munged needs root"
for p in munged slurmctld slurmd sbatch scontrol scancel squeue; do
  command -v $p > /dev/null || skip "$p not installed (apt-get install slurmctld slurmd slurm-client munge)"
done

S=$(mktemp -d /tmp/kiln-slurm-XXXXXX)
NODE=$(hostname -s)
cleanup() {
  set +e
  if [ -f "$S/etc/slurm.conf" ]; then
    export SLURM_CONF=$S/etc/slurm.conf
    scancel --quiet --user=root 2> /dev/null
  fi
  for d in slurmd slurmctld munged; do
    [ -f "$S/run/$d.pid" ] && kill "$(cat "$S/run/$d.pid")" 2> /dev/null
  done
  sleep 1
  # Steps left behind by slurmd: only those of this test's state directory.
  for pid in $(pgrep slurmstepd); do
    ls -l /proc/$pid/fd 2> /dev/null | grep -q "$S" && kill -9 "$pid" 2> /dev/null
  done
  for d in slurmd slurmctld munged; do
    [ -f "$S/run/$d.pid" ] && kill -9 "$(cat "$S/run/$d.pid")" 2> /dev/null
  done
  rm -rf "$S"
}
trap cleanup EXIT

wait_for() {  # wait_for SECONDS CMD...: retries CMD every 0.3 s
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.3
  done
}
die() {
  echo "FAIL: $*"
  for f in "$S"/log/*.log; do
    echo "--- $f"
    tail -20 "$f"
  done
  exit 1
}

# --- a private one-node cluster -------------------------------------------------------------
mkdir -p "$S"/{etc,munge,sock,spool/ctld,spool/d,run,log}
# munged wants its socket reachable by all and its key private.
chmod 755 "$S" "$S/sock"
chmod 700 "$S/munge"
dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$S/munge/munge.key"
munged --socket="$S/sock/munge.socket" --key-file="$S/munge/munge.key" \
  --log-file="$S/log/munged.log" --pid-file="$S/run/munged.pid" --seed-file="$S/munge/seed" \
  --num-threads=2 || die "munged did not start"
PORT=$((17000 + RANDOM % 2000))
cat > "$S/etc/slurm.conf" << CONF
ClusterName=kilntest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
AuthInfo=socket=$S/sock/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/spool/ctld
SlurmdSpoolDir=$S/spool/d
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,batch_sched_delay=0,sched_min_interval=0
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=600
InactiveLimit=0
Waittime=0
MessageTimeout=10
SlurmdTimeout=300
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=4 RealMemory=8192 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
export SLURM_CONF=$S/etc/slurm.conf
slurmctld -f "$SLURM_CONF" -c || die "slurmctld did not start"
slurmd -f "$SLURM_CONF" -N "$NODE" || die "slurmd did not start"
idle() { [ "$(sinfo -h -n "$NODE" -o %T 2> /dev/null)" = idle ]; }
wait_for 60 idle || die "node $NODE never became idle"
echo "slurm up: node $NODE, controller port $PORT"

job_state() { scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
state_is() { [ "$(job_state "$1")" = "$2" ]; }
ended() { case "$(job_state "$1")" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; *) return 1 ;; esac; }
submit() {  # submit OUT_DIR STEPS [ARGS...]: prints the job id
  local out dir=$1 steps=$2
  shift 2
  out=$("$KILN" submit "$SRC/configs/tiny.toml" --ntasks-per-node 2 -J "kiln-test" "$@" \
    --set train.steps="$steps" --set train.out_dir="$dir" --set train.val_every=0 \
    --set train.sample_tokens=0 --set train.log_every=1000000 \
    --set data.train="$SRC/data/licenses/train_*.bin" --set data.val="$SRC/data/licenses/val_*.bin")
  echo "$out" >&2
  echo "$out" | sed -n 's/^submitted job \([0-9]*\).*/\1/p'
}
records() {
  local n
  n=$(grep -c "\"type\":\"$2\"" "$1/metrics.jsonl" 2> /dev/null)
  echo "${n:-0}"
}
last_step() { grep '"type":"train"' "$1/metrics.jsonl" 2> /dev/null | tail -1 | sed 's/.*"step":\([0-9]*\).*/\1/'; }
# requeued JOB OUT_DIR: waits for the job to be requeued (pending), starts it at once (Slurm
# holds a requeued job back for ~2 minutes) once its first run is cleaned up (starting it before
# gets it killed: "Job credential revoked"), and waits for it to complete.
requeued() {
  local job=$1 out=$2
  is_pending() { state_is "$job" PENDING; }
  wait_for 180 is_pending || {
    cat "$out"/slurm-*.out
    die "job $job was not requeued (state $(job_state "$job"))"
  }
  wait_for 120 idle || die "node $NODE did not become idle after the requeue"
  sleep 1
  scontrol update JobId="$job" StartTime=now
  wait_for 300 ended "$job" && state_is "$job" COMPLETED || {
    cat "$out"/slurm-*.out
    die "requeued job $job did not complete (state $(job_state "$job"))"
  }
}

# --- 1. a 2-task job trains to the end -------------------------------------------------------
OUT1="$S/run 1"  # a space: kiln submit must quote it on its #SBATCH lines
J1=$(submit "$OUT1" 20)
[ -n "$J1" ] || die "kiln submit printed no job id"
wait_for 180 ended "$J1" && state_is "$J1" COMPLETED || {
  scontrol show job "$J1"
  cat "$OUT1"/slurm-*.out
  die "job $J1 did not complete (state $(job_state "$J1"))"
}
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
wait_for 300 ended "$J5" && state_is "$J5" COMPLETED || die "reference job $J5 did not complete"
OUT4=$S/run4
J4=$(submit "$OUT4" $CRASH_STEPS --max-restarts 1 "${crash_args[@]}")
past20() { [ "$(records "$OUT4" checkpoint)" -ge 2 ] && [ -f "$OUT4/pids/rank-1.pid" ]; }
wait_for 180 past20 || die "job $J4 never wrote two checkpoints (state $(job_state "$J4"))"
KILL_STEP=$(last_step "$OUT4")
kill -9 "$(cat "$OUT4/pids/rank-1.pid")" || die "rank 1 of job $J4 was gone before the kill"
echo "killed rank 1 of job $J4 after step $KILL_STEP"
[ "${KILL_STEP:-0}" -lt $((CRASH_STEPS - 100)) ] || die "job $J4 was nearly done at the kill; make it longer"
requeued "$J4" "$OUT4"
[ "$(last_step "$OUT4")" = $CRASH_STEPS ] || die "job $J4 ended at step $(last_step "$OUT4")"
grep -q '"type":"restart"' "$OUT4/metrics.jsonl" || die "no restart record in $OUT4/metrics.jsonl"
grep '"type":"restart"' "$OUT4/metrics.jsonl" | grep -q '"restarting":true' ||
  die "the restart record does not say the job was requeued"
grep -q "requeueing job $J4 (restart 1 of 1)" "$OUT4/slurm-$J4.out" || die "the batch script did not requeue after the crash"
[ "$(grep -c . "$OUT4/failed-nodes")" = 1 ] || die "failed-nodes should name one node once: $(cat "$OUT4/failed-nodes")"
FINAL=$(printf "checkpoints/step_%08d/model.safetensors" $CRASH_STEPS)
cmp -s "$REF4/$FINAL" "$OUT4/$FINAL" ||
  die "the requeued job's final weights differ from the uninterrupted job's"
"$KILN" report "$OUT4" -o "$S/report4.html" > /dev/null || die "kiln report failed on $OUT4"
grep -q "restart" "$S/report4.html" || die "kiln report does not show the restart"
echo "PASS: job $J4 lost a rank after step $KILL_STEP, was requeued, resumed and ended with the uninterrupted run's bits"
