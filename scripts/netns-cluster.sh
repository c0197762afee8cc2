#!/usr/bin/env bash
# A simulated cluster on one Linux machine, for multi-node tests of kiln: N "hosts", each a
# network namespace with its own address and (per process, through `unshare --uts`) its own
# hostname, joined by veth pairs on a bridge that lives in a namespace of its own. OpenMPI starts
# its daemons on the other hosts through a small rsh agent (`ip netns exec`) instead of ssh, so
# ranks use shared memory inside a host and TCP between hosts, and MPI_COMM_TYPE_SHARED finds
# the hosts by itself. Needs root and iproute2; nothing is created in the root namespace except
# /run/netns/kilnsim* and the state directory.
#
#   scripts/netns-cluster.sh up N            create (or resize to) N hosts: kilnsim0..N-1
#   scripts/netns-cluster.sh shape RATE [BURST]   tbf on every host's egress (e.g. 1gbit 256kbit)
#   scripts/netns-cluster.sh shape off
#   scripts/netns-cluster.sh status
#   scripts/netns-cluster.sh exec I -- CMD...     run CMD on host I
#   scripts/netns-cluster.sh run -- MPIRUN-ARGS  mpirun from host 0 over the hosts (2 slots each
#                                                unless --hostfile is given)
#   scripts/netns-cluster.sh down            kill what runs in the hosts, delete everything
#
# Pitfalls this script handles (seen on a 2-core Debian 12 VM with OpenMPI 4.1.4): every host
# needs its own hostname or OpenMPI's shared-memory segments collide and ranks crash; every
# daemon thinks it owns all cores, so binding is off (--bind-to none); oversubscription is
# invisible to each daemon, so idle ranks must yield (mpi_yield_when_idle); mpirun must run
# inside host 0 so the daemons can call back over the bridge. This kernel may lack netem, so
# links can be slowed (tbf) but not delayed.
set -euo pipefail

PREFIX=${KILNSIM_PREFIX:-kilnsim}  # another prefix gives an independent cluster
BRIDGE_NS=${PREFIX}br
BRIDGE=${PREFIX}br0
NET=10.77.0
STATE=/tmp/${PREFIX}-cluster
SLOTS=${KILNSIM_SLOTS:-2}

die() {
  echo "netns-cluster: $*" >&2
  exit 1
}

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null || die "needs iproute2 (ip)"
  command -v unshare >/dev/null || die "needs unshare (util-linux)"
}

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" | sort -V || true; }
count() { hosts | wc -l; }

write_state() {
  mkdir -p "$STATE"
  # OpenMPI calls the agent like ssh: agent <host> <command words...>.
  cat >"$STATE/agent.sh" <<'EOF'
#!/bin/sh
h=$1
shift
exec ip netns exec "$h" unshare --uts sh -c 'hostname "$0"; export KILNSIM_HOST="$0"; exec sh -c "$*"' "$h" "$@"
EOF
  chmod +x "$STATE/agent.sh"
  : >"$STATE/hostfile"
  : >"$STATE/hosts"
  local i=0
  for h in $(hosts); do
    echo "$h slots=$SLOTS" >>"$STATE/hostfile"
    echo "$NET.$((i + 1)) $h" >>"$STATE/hosts"
    i=$((i + 1))
  done
}

add_host() {
  local i=$1 h=${PREFIX}$1
  ip netns add "$h"
  ip link add "${h}h" type veth peer name "${h}b"
  ip link set "${h}h" netns "$h"
  ip link set "${h}b" netns "$BRIDGE_NS"
  ip -n "$BRIDGE_NS" link set "${h}b" master "$BRIDGE" up
  ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  ip -n "$h" addr add "$NET.$((i + 1))/24" dev "${h}h"
  ip -n "$h" link set "${h}h" up
  ip -n "$h" link set lo up
}

del_host() {
  local h=$1
  for pid in $(ip netns pids "$h" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
  ip netns del "$h" 2>/dev/null || true  # takes its veth pair with it
}

cmd_up() {
  local n=${1:-2}
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: N from 1 to 200"
  need_root
  if ! ip netns list | grep -qE "^${BRIDGE_NS}( |$)"; then
    ip netns add "$BRIDGE_NS"
    ip -n "$BRIDGE_NS" link add "$BRIDGE" type bridge
    ip -n "$BRIDGE_NS" link set "$BRIDGE" up
  fi
  for ((i = 0; i < n; i++)); do
    ip netns list | grep -qE "^${PREFIX}${i}( |$)" || add_host "$i"
  done
  for h in $(hosts); do
    [ "${h#"$PREFIX"}" -ge "$n" ] && del_host "$h"
  done
  write_state
  if command -v ping >/dev/null && [ "$n" -ge 2 ]; then
    ip netns exec "${PREFIX}0" ping -c1 -W2 "$NET.2" >/dev/null || die "host 1 does not answer"
  fi
  cat "$STATE/hosts"
}

cmd_shape() {
  need_root
  local rate=${1:-} burst=${2:-256kbit}
  [ -n "$rate" ] || die "shape RATE [BURST] | shape off"
  for h in $(hosts); do
    if [ "$rate" = off ]; then
      ip netns exec "$h" tc qdisc del dev "${h}h" root 2>/dev/null || true
    else
      ip netns exec "$h" tc qdisc replace dev "${h}h" root tbf rate "$rate" burst "$burst" \
        latency 400ms
    fi
  done
}

cmd_status() {
  local n
  n=$(count)
  echo "$n host(s)"
  for h in $(hosts); do
    echo "$h: $(ip -n "$h" -4 -o addr show dev "${h}h" 2>/dev/null | awk '{print $4}')" \
      "$(ip netns exec "$h" tc qdisc show dev "${h}h" 2>/dev/null | grep -o 'tbf.*rate [^ ]*' || true)"
  done
}

cmd_exec() {
  local i=${1:-}
  shift || true
  [ "${1:-}" = "--" ] && shift
  [ -n "$i" ] && [ $# -gt 0 ] || die "exec I -- CMD..."
  exec ip netns exec "${PREFIX}$i" unshare --uts sh -c 'hostname "$0"; export KILNSIM_HOST="$0"; exec "$@"' "${PREFIX}$i" "$@"
}

cmd_run() {
  [ "${1:-}" = "--" ] && shift
  [ "$(count)" -ge 1 ] || die "no hosts: run '$0 up N' first"
  write_state
  local hostfile=(--hostfile "$STATE/hostfile")
  for a in "$@"; do [ "$a" = --hostfile ] || [ "$a" = -hostfile ] && hostfile=(); done
  ip netns exec "${PREFIX}0" unshare --uts sh -c 'hostname "$0"; export KILNSIM_HOST="$0"; exec "$@"' "${PREFIX}0" \
    mpirun --allow-run-as-root --oversubscribe "${hostfile[@]}" \
    --mca plm_rsh_agent "$STATE/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl self,vader,tcp \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    --mca mpi_yield_when_idle 1 --bind-to none "$@"
}

cmd_down() {
  need_root
  for h in $(hosts); do del_host "$h"; done
  ip netns del "$BRIDGE_NS" 2>/dev/null || true
  rm -rf "$STATE" /tmp/ompi.${PREFIX}* /dev/shm/vader_segment.${PREFIX}* 2>/dev/null || true
}

sub=${1:-}
shift || true
case "$sub" in
  up) cmd_up "$@" ;;
  shape) cmd_shape "$@" ;;
  status) cmd_status ;;
  exec) cmd_exec "$@" ;;
  run) cmd_run "$@" ;;
  down) cmd_down ;;
  *) die "usage: $0 up N | shape RATE [BURST] | shape off | status | exec I -- CMD | run -- ARGS | down" ;;
esac
