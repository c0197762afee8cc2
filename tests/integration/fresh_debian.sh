#!/usr/bin/env bash
# The README's first command on a fresh Debian machine. Builds a minimal Debian root
# (mmdebstrap --variant=apt: essential packages and apt, nothing else) from this machine's own
# apt sources, clones the repository's committed HEAD into it, and runs there the setup command
# of the README's "Two commands" block, then a shortened training run of the README's config.
# Fails, naming the step, if setup.sh misses a package a fresh machine does not have (as it
# once missed ocl-icd-opencl-dev: CI passed because its machine had the package already).
#
# Usage: fresh_debian.sh SOURCE_DIR. Exit 77 (skipped) only where it cannot run: not root (chroot
# and mount), mmdebstrap missing (scripts/setup.sh installs it), not a Debian host, or SOURCE_DIR
# not a git checkout. KILN_FRESH_DIR (default /var/tmp) holds the root (about 3 GB);
# KILN_FRESH_BUDGET (default 1500 s) bounds the whole test: past it every step is stopped and the
# root is removed by this script, before ctest's TIMEOUT would kill it without cleaning up.
set -euo pipefail
SRC=$(cd "$1" && pwd)
BUDGET=${KILN_FRESH_BUDGET:-1500}
PARENT=${KILN_FRESH_DIR:-/var/tmp}
NEED_GB=8
skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "chroot and mount need root"
command -v mmdebstrap > /dev/null || skip "mmdebstrap not installed (scripts/setup.sh installs it)"
command -v git > /dev/null || skip "git not installed: the test clones the committed HEAD"
git -C "$SRC" rev-parse --verify -q HEAD > /dev/null || skip "$SRC is not a git checkout"
. /etc/os-release
[ "${ID:-}" = debian ] && [ -n "${VERSION_CODENAME:-}" ] ||
  skip "not a Debian host: the root is built from this machine's Debian apt sources"
SUITE=$VERSION_CODENAME
START=$SECONDS

# --- the root and its removal on every exit path ----------------------------------------------
# Each run's files live in PARENT/kiln-fresh-debian.XXXXXX/{root,logs,owner}. A run killed
# without its trap (SIGKILL) leaves one behind: the next run removes those whose owner is dead.
mounts_under() {  # mount points at or below $1, deepest first
  awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r
}
remove_root() {  # remove_root DIR: stop its processes, unmount, delete; 1 if something stays
  local dir=$1 r=$1/root pid left
  [ -d "$dir" ] || return 0
  # Processes whose root is this chroot (a step interrupted half-way; npm, mpirun, a daemon).
  for sig in TERM KILL; do
    left=0
    for p in /proc/[0-9]*; do
      [ "$(readlink "$p/root" 2> /dev/null)" = "$r" ] || continue
      pid=${p#/proc/}
      kill -s $sig "$pid" 2> /dev/null && left=1
    done
    [ $left = 0 ] && break
    sleep 2
  done
  for m in $(mounts_under "$r"); do
    umount "$m" 2> /dev/null || umount -l "$m" 2> /dev/null || true
  done
  if [ -n "$(mounts_under "$r")" ]; then
    echo "fresh_debian: still mounted under $r (not removing it): $(mounts_under "$r" | tr '\n' ' ')" >&2
    return 1
  fi
  # --one-file-system: never follow into a mount that appeared after the check.
  rm -rf --one-file-system "$dir"
}
for old in "$PARENT"/kiln-fresh-debian.*; do
  [ -f "$old/owner" ] && ! kill -0 "$(cat "$old/owner")" 2> /dev/null || continue
  echo "fresh_debian: removing $old, left by a run that was killed"
  remove_root "$old" || true
done

mkdir -p "$PARENT"
avail_gb=$(($(df -Pk "$PARENT" | awk 'NR == 2 { print $4 }') / 1024 / 1024))
if [ "$avail_gb" -lt $NEED_GB ]; then
  echo "FAIL: $PARENT has $avail_gb GB free, the root needs $NEED_GB GB: free space or set KILN_FRESH_DIR"
  exit 1
fi
DIR=$(mktemp -d "$PARENT/kiln-fresh-debian.XXXXXX")
R=$DIR/root
LOGS=$DIR/logs
mkdir -p "$LOGS"
echo $$ > "$DIR/owner"
STEP="start"
STEP_PID=""
on_exit() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  if [ $rc != 0 ]; then
    echo "FAIL: step '$STEP' (exit $rc, $((SECONDS - START)) s into the test)"
    case $rc:$STEP in
      124:* | 137:*) echo "The test's budget of $BUDGET s (KILN_FRESH_BUDGET) ran out." ;;
      130:* | 143:*) echo "Interrupted." ;;
      *:setup) echo "The README's setup command failed on a fresh Debian: if a program, header or CMake" \
        "package is missing below, add its Debian package to PACKAGES in scripts/setup.sh." ;;
      *:train | *:train-result) echo "setup.sh succeeded but the README's training run did not work on a" \
        "fresh Debian: a run-time library or a data file setup.sh should provide is missing?" ;;
    esac
    [ -f "$LOGS/$STEP.log" ] && {
      echo "--- last lines of its output:"
      tail -60 "$LOGS/$STEP.log"
    }
  fi
  if [ -n "$STEP_PID" ]; then  # interrupted in a step: timeout passes the TERM on to it
    kill -TERM "$STEP_PID" 2> /dev/null
    wait "$STEP_PID" 2> /dev/null
  fi
  remove_root "$DIR" || rc=1
  exit $rc
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

remaining() { echo $((BUDGET - (SECONDS - START))); }
run_step() {  # run_step NAME CMD...: output, each line stamped, to logs/NAME.log; stops at the budget
  STEP=$1
  shift
  local left t0=$SECONDS rc
  left=$(remaining)
  [ "$left" -gt 0 ] || {
    echo "the test's budget of $BUDGET s ran out before this step" > "$LOGS/$STEP.log"
    return 124
  }
  # timeout signals the whole process group: apt, cmake and the compilers stop too. It runs in
  # the background so that a signal to this script is handled at once (on_exit stops the step).
  rm -f "$LOGS/fifo" && mkfifo "$LOGS/fifo"
  stamp < "$LOGS/fifo" > "$LOGS/$STEP.log" &
  STAMP_PID=$!
  timeout --kill-after=10 "$left" "$@" > "$LOGS/fifo" 2>&1 &
  STEP_PID=$!
  rc=0
  wait "$STEP_PID" || rc=$?
  wait "$STAMP_PID" || true
  STEP_PID=""
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "(stopped: the test's budget of $BUDGET s ran out)" >> "$LOGS/$STEP.log"
  fi
  echo "step $STEP: $((SECONDS - t0)) s (exit $rc)"
  return "$rc"
}
stamp() {  # prefixes each line with the seconds since the test started
  local line
  while IFS= read -r line; do printf '%4d| %s\n' $((SECONDS - START)) "$line"; done
}
# A command in the root (IN_ROOT... 'CMD'), with the environment of a fresh login plus this
# machine's proxies, if any: nothing else from the host's shell leaks in.
IN_ROOT=(chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  HOME=/root LANG=C.UTF-8 TERM=dumb)
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && IN_ROOT+=("$v=${!v}")
done
IN_ROOT+=(/bin/bash -c)

# --- 1. a minimal Debian root from this machine's apt sources -----------------------------------
# Only sources signed by Debian's archive keys: a third-party repository configured here (and
# its key) is not on a fresh Debian machine. apt.conf.d comes along for proxies and snapshot
# mirrors (Check-Valid-Until).
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && grep -q -E '^[[:space:]]*(deb[[:space:]]|Types:)' "$f" || continue
  grep -o -i -E 'signed-by[:=][[:space:]]*[^] ]+' "$f" | grep -v -q 'debian-archive-keyring' && continue
  sources+=("$f")
done
aptopts=()
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && [[ $(basename "$f") =~ ^[A-Za-z0-9_-]+(\.conf)?$ ]] && aptopts+=("--aptopt=$f")
done
run_step mmdebstrap mmdebstrap --variant=apt "${aptopts[@]}" "$SUITE" "$R" "${sources[@]}"

# Package scripts start their services (slurmd, slurmctld, munge, prometheus) with
# invoke-rc.d / deb-systemd-invoke. A real fresh machine runs systemd and they would start
# there; in a chroot they would run as stray daemons inside the root and keep it busy. As
# Debian's own build chroots do (sbuild, debootstrap images), a policy-rc.d refuses every start:
# the packages still install and configure completely, and neither setup.sh nor training uses
# those services (the Slurm and Prometheus tests start their own).
printf '#!/bin/sh\n# kiln fresh_debian test: no service starts in this chroot\nexit 101\n' \
  > "$R/usr/sbin/policy-rc.d"
chmod 755 "$R/usr/sbin/policy-rc.d"
# Installing fast, installing the same: dpkg without an fsync per file (force-unsafe-io, as
# Debian's build chroots and container images run it; the root is removed after the test), and
# the .deb files this machine's apt has already downloaded, hard-linked into the root's cache.
# apt takes a cached file when its name (package, version, architecture) and size are the ones
# the fresh root's own index asks for, and Debian's archive never publishes two files under one
# version, so what is installed is what a fresh machine installs; every other package is
# downloaded. Only a speed-up: nothing is linked when the cache is on another file system, and
# an apt configuration that empties the cache on update (a container image's docker-clean, which
# the --aptopt copies above bring along) leaves it to the downloads.
echo force-unsafe-io > "$R/etc/dpkg/dpkg.cfg.d/kiln-fresh-unsafe-io"
if compgen -G "/var/cache/apt/archives/*.deb" > /dev/null; then
  cp -l /var/cache/apt/archives/*.deb "$R/var/cache/apt/archives/" 2> /dev/null ||
    echo "note: this machine's .deb cache was not linked into the root (another file system?):" \
      "every package is downloaded"
fi
# What the chroot cannot bring itself: name resolution (resolv.conf, hosts) and the CA
# certificates added locally on this machine (e.g. a TLS-inspecting proxy's) - they are only
# trusted once setup.sh installs ca-certificates, whose postinst adds them, exactly as on a
# fresh machine behind the same proxy.
cp -L /etc/resolv.conf "$R/etc/resolv.conf"
cp /etc/hosts "$R/etc/hosts"
if compgen -G "/usr/local/share/ca-certificates/*" > /dev/null; then
  mkdir -p "$R/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$R/usr/local/share/ca-certificates/"
fi
# /proc, /sys, /dev (with /dev/shm and /dev/pts: MPI's shared memory); rslave so that
# unmounting here never propagates back to this machine's mounts.
mount -t proc proc "$R/proc"
mount --rbind /sys "$R/sys" && mount --make-rslave "$R/sys"
mount --rbind /dev "$R/dev" && mount --make-rslave "$R/dev"

# --- 2. the committed HEAD, as a clean clone (CI runs on one) -----------------------------------
HEAD=$(git -C "$SRC" rev-parse HEAD)
[ -z "$(git -C "$SRC" status --porcelain --untracked-files=no)" ] ||
  echo "note: $SRC has uncommitted changes; this test runs the committed HEAD $HEAD only"
run_step clone bash -c "git init -q '$R/root/kiln' && git -C '$R/root/kiln' fetch -q '$SRC' HEAD &&
  git -C '$R/root/kiln' checkout -q --detach FETCH_HEAD"
[ "$(git -C "$R/root/kiln" rev-parse HEAD)" = "$HEAD" ] || {
  echo "the clone is at $(git -C "$R/root/kiln" rev-parse HEAD), not HEAD $HEAD" > "$LOGS/clone.log"
  false
}

# --- 3. the README's first command --------------------------------------------------------------
# The first line of the README's "Two commands" block that runs setup.sh, comment removed:
# `./scripts/setup.sh && ./build/kiln train configs/small.toml`.
STEP=readme
FIRST=$(awk '/^## Two commands/ { s = 1 } s && /^```/ { if (b) exit; b = 1; next } b' "$R/root/kiln/README.md" |
  grep -m1 'setup\.sh' | sed 's/[[:space:]]*#.*$//')
SETUP_CMD=${FIRST%% && *}
TRAIN_CMD=${FIRST#* && }
if [ -z "$FIRST" ] || [ "$SETUP_CMD" = "$FIRST" ] || [[ ! $TRAIN_CMD =~ ^\./build/kiln\ train\  ]]; then
  echo "the README's \"Two commands\" block no longer starts with 'SETUP && ./build/kiln train CONFIG'" \
    "(found: '$FIRST'): update this test to follow it" | tee "$LOGS/readme.log"
  exit 1
fi
echo "README: $FIRST"
run_step setup "${IN_ROOT[@]}" "cd /root/kiln && $SETUP_CMD"
# Where setup.sh's time went: apt until CMake's first line, the build until ninja's last line,
# then the vocabulary, the corpora and tokenizing.
phase_split() {
  awk -F'|' -v s="$1" 'NR == 1 { a = $1 } /\| -- / && !c { c = $1 } /\| \[[0-9]+\/[0-9]+\] / { n = $1 }
    END { if (c && n) printf "setup.sh: apt %d s, CMake and build %d s, data %d s\n", c - a, n - c, s - n }' "$LOGS/setup.log"
}
phase_split $((SECONDS - START))

# --- 4. training, shortened ---------------------------------------------------------------------
# The README's training command on its own config and the data setup.sh prepared, stopped after
# 10 steps with one validation and sample: that is what can be missing on a fresh machine
# (libraries at run time, the tokenizer files, the dataset). The README's 300 steps take 4
# minutes and would check nothing more.
STEPS=10
run_step train "${IN_ROOT[@]}" "cd /root/kiln && $TRAIN_CMD --set train.steps=$STEPS --set train.val_every=$STEPS \
  --set train.val_batches=2 --set train.log_every=5 --set train.out_dir=runs/fresh-debian"
STEP=train-result
M=$R/root/kiln/runs/fresh-debian/metrics.jsonl
{
  [ -f "$M" ] || { echo "no $M after the training run"; exit 1; }
  grep '"type":"train"' "$M" | tail -1 | grep -q "\"step\":${STEPS}[,}]" ||
    { echo "the run's last train record is not step $STEPS"; exit 1; }
  grep '"type":"val"' "$M" | grep -q -E '"val_loss":[0-9]' || { echo "no finite validation loss in $M"; exit 1; }
  grep -q '"type":"sample"' "$M" || { echo "no generated sample in $M"; exit 1; }
} > "$LOGS/$STEP.log" 2>&1 || exit 1
echo "PASS: on a fresh Debian $SUITE root, '$SETUP_CMD' installed and built kiln, and '$TRAIN_CMD' trained" \
  "$STEPS steps ($((SECONDS - START)) s in all)"
