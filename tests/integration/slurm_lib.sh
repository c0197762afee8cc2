# Shared by the Slurm integration tests (slurm.sh: one node; slurm_multinode.sh: simulated hosts):
# a private Slurm under a state directory $S (munged, slurmctld, one slurmd per node, all as
# root), the helpers that wait for jobs, and `kiln submit` with the test's data. A test sets
# KILN, SRC and S, defines `ctl` (how a client command reaches the controller: directly, or
# inside a host's network namespace) and sources this file.
# shellcheck shell=bash

skip() {
  echo "SKIPPED: $*"
  exit 77
}
slurm_prerequisites() {
  [ "$(id -u)" = 0 ] || skip "starting slurmd and munged needs root"
  for p in munged slurmctld slurmd sbatch scontrol scancel squeue; do
    command -v $p > /dev/null || skip "$p not installed (apt-get install slurmctld slurmd slurm-client munge)"
  done
}

slurm_cleanup() {
  set +e
  if [ -f "$S/etc/slurm.conf" ]; then
    export SLURM_CONF=$S/etc/slurm.conf
    ctl scancel --quiet --user=root 2> /dev/null
  fi
  for f in "$S"/run/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2> /dev/null; done
  sleep 1
  # Steps left behind by slurmd: only those of this test's state directory.
  for pid in $(pgrep slurmstepd); do
    ls -l /proc/$pid/fd 2> /dev/null | grep -q "$S" && kill -9 "$pid" 2> /dev/null
  done
  for f in "$S"/run/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2> /dev/null; done
  rm -rf "$S"
}

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

# munged with its socket under $S, reachable by all, its key private.
slurm_start_munged() {
  mkdir -p "$S"/{etc,munge,sock,spool/ctld,run,log,tmp}
  chmod 755 "$S" "$S/sock"
  chmod 700 "$S/munge"
  dd if=/dev/urandom of="$S/munge/munge.key" bs=1024 count=1 status=none
  chmod 600 "$S/munge/munge.key"
  munged --socket="$S/sock/munge.socket" --key-file="$S/munge/munge.key" \
    --log-file="$S/log/munged.log" --pid-file="$S/run/munged.pid" --seed-file="$S/munge/seed" \
    --num-threads=2 || die "munged did not start"
}

# slurm_write_conf PORT CONTROLLER NODE_LINES: slurm.conf with the controller CONTROLLER
# ("name(address)"), the given NodeName lines and one partition of all of them. Each node keeps
# its spool, pid file and log apart (%n), and jobs' temporary files under $S/tmp (TmpFS).
slurm_write_conf() {
  local port=$1 controller=$2 nodes=$3 names
  names=$(echo "$nodes" | sed -n 's/^NodeName=\([^ ]*\).*/\1/p' | paste -sd, -)
  cat > "$S/etc/slurm.conf" << CONF
ClusterName=kilntest
SlurmctldHost=$controller
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$S/sock/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
TmpFS=$S/tmp
StateSaveLocation=$S/spool/ctld
SlurmdSpoolDir=$S/spool/d-%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
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
$nodes
PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  export SLURM_CONF=$S/etc/slurm.conf
}

all_idle() { ! ctl sinfo -h -o %T 2> /dev/null | grep -qv '^idle$' && [ -n "$(ctl sinfo -h -o %T 2> /dev/null)" ]; }
job_state() { ctl scontrol show job "$1" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
state_is() { [ "$(job_state "$1")" = "$2" ]; }
ended() { case "$(job_state "$1")" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;; *) return 1 ;; esac; }
# submit OUT_DIR STEPS [ARGS...]: `kiln submit` of the tiny config on the licenses data (2 tasks
# per node unless ARGS say otherwise); prints the job id.
submit() {
  local out dir=$1 steps=$2
  shift 2
  out=$(ctl "$KILN" submit "$SRC/configs/tiny.toml" --ntasks-per-node 2 -J "kiln-test" "$@" \
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
  wait_for 120 all_idle || die "the nodes did not become idle after the requeue"
  sleep 1
  ctl scontrol update JobId="$job" StartTime=now
  wait_for 300 ended "$job" && state_is "$job" COMPLETED || {
    cat "$out"/slurm-*.out
    die "requeued job $job did not complete (state $(job_state "$job"))"
  }
}
# completes JOB OUT SECONDS: waits for the job to complete; else shows its log and fails.
completes() {
  local job=$1 out=$2
  wait_for "$3" ended "$job" && state_is "$job" COMPLETED || {
    cat "$out"/slurm-*.out
    die "job $job did not complete (state $(job_state "$job"))"
  }
}
# kill_and_requeue OUT JOB RANK STEPS: once the run in OUT has written two checkpoints, SIGKILLs
# rank RANK's process, then waits for the batch script to requeue the job (--max-restarts 1)
# and for it to train to STEPS. Sets KILL_STEP to the last step before the kill.
kill_and_requeue() {
  local out=$1 job=$2 rank=$3 steps=$4
  past2() { [ "$(records "$out" checkpoint)" -ge 2 ] && [ -f "$out/pids/rank-$rank.pid" ]; }
  wait_for 300 past2 || die "job $job never wrote two checkpoints (state $(job_state "$job"))"
  KILL_STEP=$(last_step "$out")
  kill -9 "$(cat "$out/pids/rank-$rank.pid")" || die "rank $rank of job $job was gone before the kill"
  echo "killed rank $rank of job $job after step $KILL_STEP"
  [ "${KILL_STEP:-0}" -lt $((steps - 50)) ] || die "job $job was nearly done at the kill; make it longer"
  requeued "$job" "$out"
  [ "$(last_step "$out")" = "$steps" ] || die "job $job ended at step $(last_step "$out")"
  grep -q "requeueing job $job (restart 1 of 1)" "$out/slurm-$job.out" ||
    die "the batch script did not requeue after the crash"
}
