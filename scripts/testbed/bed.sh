#!/usr/bin/env bash
# The real-traffic test bed: N network namespaces as nodes, a real collective library (OpenMPI or
# torch.distributed with gloo) running a training-like loop over shaped veth links, one commwatch agent per node,
# one collector, and an evaluator that compares what commwatch says with the job's own log (the truth).
#
#   scripts/testbed/bed.sh setup [--torch]          compile the MPI job; create the torch venv (with --torch)
#   scripts/testbed/bed.sh list                     the scenarios
#   scripts/testbed/bed.sh run [options] SCENARIO.. run scenarios; each one's outputs under OUT/<lib>-<scenario>/
#   scripts/testbed/bed.sh cleanup [--force]        remove what ended runs left (namespaces, links, cgroups);
#                                                   runs still going are left alone (--force: and runs that
#                                                   name no owner, i.e. of an older bed)
#
# run options: --lib mpi|torch (default mpi), --nodes N (default 4), --out DIR (default
#   /tmp/commwatch-testbed/<time>), --markers (the job sends step markers; default off: steps are inferred),
#   --steps N (override every scenario's step count), --compute-ms MS (likewise its compute per step).
# Environment: COMMWATCH_BIN (default target/debug/commwatch), BED_CACHE (default ~/.cache/commwatch-testbed: the
#   compiled MPI job and the torch venv), BED_FABRIC_RATE (2gbit), BED_MGMT_RATE (200mbit), BED_PREFIX (the
#   run's prefix, cwb and up to 7 letters or digits; default random), BED_LINGER_S (8: seconds the collector
#   keeps running after the job, for its last steps and findings), BED_STRAGGLER_PCT (5: the straggler's CPU
#   share, % of one core), BED_LOSS_PCT (2: the loss scenario's drop rate each way, %), BED_LOSS_DIR (both:
#   `from` drops only what the node sends, `to` only what it receives), BED_FAST_PERIOD (50ms: the agents'
#   fast-tier period, the byte counters' sampling; a step needs several samples to be resolved), BED_SHAPER
#   (tbf: the links' shaper; htb shapes in a class under an htb root, whose own figures hold no rate).
#
# Topology (everything named with a per-run prefix `cwb<hex>`): a "switch" namespace with two bridges (fabric,
# management); each node namespace has `fab0` (10.10.0.k+1/24) and `mgmt0` (10.9.0.k+1/24) into them, shaped
# with tbf (BED_SHAPER) on both directions, and `ctl0` (10.200.X.k+10/24) to a bridge in the root namespace
# holding the collector's gRPC address 10.200.X.1 (its HTTP API listens on 127.0.0.1 only). No default route
# anywhere; nothing leaves the machine. Each node runs in its own pid, mount and UTS namespace (hostname nodeK),
# so its agent sees only its node's processes; inside, /sys shows the namespace's own net devices. The job's
# processes on a node sit in a per-node cgroup (cpu limit for the straggler). A trap removes everything on exit
# and on failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${BED_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/commwatch-testbed}
BIN=${COMMWATCH_BIN:-$REPO/target/debug/commwatch}
FAB_RATE=${BED_FABRIC_RATE:-2gbit}
MGMT_RATE=${BED_MGMT_RATE:-200mbit}
# The straggler's share of one CPU, %: well below what a rank gets on a busy 2-core machine (~20 %), so it bites.
STRAGGLER_PCT=${BED_STRAGGLER_PCT:-5}
# The loss scenario's drop rate, % of packets each way on the faulty node's fabric link.
LOSS_PCT=${BED_LOSS_PCT:-2}
# Which way the loss scenario drops: both, from (the node's sends) or to (what it receives).
LOSS_DIR=${BED_LOSS_DIR:-both}
FAST_PERIOD=${BED_FAST_PERIOD:-50ms}
SHAPER=${BED_SHAPER:-tbf}
PREFIX_GLOB=cwb
VENV=$CACHE/venv
MPI_PROG=$CACHE/allreduce_mpi

log() { printf '[bed %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------------- setup

setup_mpi() {
  command -v mpicc >/dev/null || die "mpicc not found (Debian: openmpi-bin libopenmpi-dev)"
  mkdir -p "$CACHE"
  if [ ! -x "$MPI_PROG" ] || [ "$HERE/allreduce_mpi.c" -nt "$MPI_PROG" ]; then
    mpicc -O2 -Wall -o "$MPI_PROG.tmp" "$HERE/allreduce_mpi.c" && mv "$MPI_PROG.tmp" "$MPI_PROG"
    log "compiled $MPI_PROG"
  fi
}

setup_torch() {
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, numpy' 2>/dev/null; then
    return 0
  fi
  log "creating $VENV with torch (a large download; log in $CACHE/pip.log)"
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
  # shellcheck disable=SC2086
  "$VENV/bin/pip" install -q ${BED_PIP_ARGS:-} torch numpy >"$CACHE/pip.log" 2>&1 \
    || die "pip install torch failed (see $CACHE/pip.log)"
  echo "rc=0" >>"$CACHE/pip.log"
}

check_tools() {
  local t
  for t in ip tc nsenter unshare python3; do
    command -v "$t" >/dev/null || die "$t not found (Debian: iproute2, util-linux)"
  done
  [[ $LOSS_PCT =~ ^([0-9]|[1-9][0-9])(\.[0-9]+)?$ ]] || die "BED_LOSS_PCT=$LOSS_PCT: a percentage below 100"
  case $LOSS_DIR in both | from | to) ;; *) die "BED_LOSS_DIR=$LOSS_DIR: both, from or to" ;; esac
  [[ $FAST_PERIOD =~ ^[1-9][0-9]*ms$ ]] || die "BED_FAST_PERIOD=$FAST_PERIOD: milliseconds, as 20ms"
  case $SHAPER in tbf | htb) ;; *) die "BED_SHAPER=$SHAPER: tbf or htb" ;; esac
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, tc, cgroups)"
  [ -x "$BIN" ] || die "commwatch binary not found at $BIN (set COMMWATCH_BIN)"
}

# -------------------------------------------------------------------------------------------------- cleanup

# Removes everything named with prefix $1 (a glob such as cwb* or one run's prefix): processes in its
# namespaces, the namespaces, root-namespace links, cgroups, /etc/netns entries.
cleanup_prefix() {
  local p=$1 ns pid d
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    # shellcheck disable=SC2053
    [[ $ns == $p ]] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  sleep 0.2
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    # shellcheck disable=SC2053
    [[ $ns == $p ]] || continue
    ip netns del "$ns" 2>/dev/null || true
  done
  for d in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    # shellcheck disable=SC2053
    [[ $d == $p ]] && ip link del "$d" 2>/dev/null || true
  done
  for d in /etc/netns/$p; do [ -d "$d" ] && rm -rf "$d"; done
  local root
  for root in /sys/fs/cgroup /sys/fs/cgroup/unified /sys/fs/cgroup/cpu; do
    for d in "$root"/$p; do
      [ -d "$d" ] || continue
      local leaf
      for leaf in "$d"/*/; do
        [ -d "$leaf" ] || continue
        if [ -f "$leaf/cgroup.procs" ]; then
          for pid in $(cat "$leaf/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        fi
        rmdir "$leaf" 2>/dev/null || true
      done
      rmdir "$d" 2>/dev/null || true
    done
  done
}

# Prefixes of earlier runs found on the machine: namespaces (<prefix>-...), root bridges (<prefix>ctl), state
# directories; one per line.
known_prefixes() {
  {
    ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^\(cwb[0-9a-z]*\)-.*/\1/p'
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | sed -n 's/^\(cwb[0-9a-z]*\)ctl$/\1/p'
    ls /run/commwatch-testbed 2>/dev/null
  } | sort -u
}

# Removes what runs that are no longer running left: a run whose bed is alive (its pid in
# /run/commwatch-testbed/<prefix>/owner) is another bed at work and is left alone, and so is a run that names no
# owner (a bed of an older version may still be at work) unless $1 is --force.
cleanup_stale() {
  local p owner force=${1:-}
  for p in $(known_prefixes); do
    owner=$(cat "/run/commwatch-testbed/$p/owner" 2>/dev/null || true)
    if [ -n "$owner" ] && [ "$(cat "/proc/$owner/comm" 2>/dev/null)" = bed.sh ]; then
      log "$p belongs to a running bed (pid $owner): left alone"
      continue
    fi
    if [ -z "$owner" ] && [ "$force" != --force ]; then
      log "$p names no owner: left alone (cleanup --force removes it)"
      continue
    fi
    cleanup_prefix "$p*"
    rm -rf "/run/commwatch-testbed/$p"
    log "removed the leftovers of $p"
  done
}

# ------------------------------------------------------------------------------------------------- topology

# Globals of one run: P (prefix), N (nodes), RUN (state dir), CTL_NET (10.200.X), CG (cgroup dir), CGV.
node_ns() { echo "$P-node$1"; }
fab_addr() { echo "10.10.0.$(($1 + 1))"; }
# The management subnet sorts below the fabric's: gloo's pairs connect from the higher address to the lower
# one's listener, so a rank bound to its management address is connected to by its peers, over their
# management links (the seed's fault as the issue saw it), instead of connecting out itself over its fabric.
mgmt_addr() { echo "10.9.0.$(($1 + 1))"; }
ctl_addr() { echo "$CTL_NET.$(($1 + 10))"; }

pick_ctl_net() {
  local x used
  used=$(ip -4 -o addr show | awk '{print $4}')
  for _ in $(seq 1 50); do
    x=$((RANDOM % 200 + 20))
    if ! grep -q "^10\.200\.$x\." <<<"$used"; then CTL_NET=10.200.$x; return 0; fi
  done
  die "no free 10.200.X.0/24 for the control bridge"
}

shape() { # shape NS DEV RATE: SHAPER (tbf or htb) on DEV's egress (replaces what is there, or changes its rate)
  case $SHAPER in
    tbf) ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: tbf rate "$3" burst 256kb latency 50ms ;;
    htb)
      # The rate is a class's, not the root's: the root qdisc says only how much it queues and holds back.
      ip netns exec "$1" tc qdisc show dev "$2" | grep -q '^qdisc htb 1: root' \
        || ip netns exec "$1" tc qdisc replace dev "$2" root handle 1: htb default 1
      ip netns exec "$1" tc class replace dev "$2" parent 1: classid 1:1 htb rate "$3" ceil "$3" burst 256kb
      ;;
  esac
}

# Writes node k's /etc/netns hosts file: every node name at its fabric address, except the names listed in
# $2 (space separated), which resolve to their management address (the "route" variants of the seed's fault).
write_hosts() {
  local k=$1 mgmt_names=" ${2:-} " j name
  mkdir -p "/etc/netns/$(node_ns "$k")"
  {
    echo "127.0.0.1 localhost"
    for j in $(seq 0 $((N - 1))); do
      name=node$j
      if [[ $mgmt_names == *" $name "* ]]; then echo "$(mgmt_addr "$j") $name"; else echo "$(fab_addr "$j") $name"; fi
    done
  } >"/etc/netns/$(node_ns "$k")/hosts"
}

topo_up() {
  local sw=$P-sw k ns
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add brf type bridge
  ip -n "$sw" link add brm type bridge
  ip -n "$sw" link set brf up
  ip -n "$sw" link set brm up
  ip link add "${P}ctl" type bridge
  ip addr add "$CTL_NET.1/24" dev "${P}ctl"
  ip link set "${P}ctl" up
  for k in $(seq 0 $((N - 1))); do
    ns=$(node_ns "$k")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add fab0 netns "$ns" type veth peer name "f$k" netns "$sw"
    ip link add mgmt0 netns "$ns" type veth peer name "m$k" netns "$sw"
    ip link add "${P}c$k" type veth peer name ctl0 netns "$ns"
    ip -n "$sw" link set "f$k" master brf up
    ip -n "$sw" link set "m$k" master brm up
    ip link set "${P}c$k" master "${P}ctl" up
    ip -n "$ns" addr add "$(fab_addr "$k")/24" dev fab0
    ip -n "$ns" addr add "$(mgmt_addr "$k")/24" dev mgmt0
    ip -n "$ns" addr add "$(ctl_addr "$k")/24" dev ctl0
    ip -n "$ns" link set fab0 up
    ip -n "$ns" link set mgmt0 up
    ip -n "$ns" link set ctl0 up
    shape_node "$k" "$FAB_RATE" "$MGMT_RATE"
    write_hosts "$k"
  done
  cgroup_up
}

shape_node() { # shape_node K FABRATE MGMTRATE: both directions of node K's links
  shape "$(node_ns "$1")" fab0 "$2"
  shape "$P-sw" "f$1" "$2"
  shape "$(node_ns "$1")" mgmt0 "$3"
  shape "$P-sw" "m$1" "$3"
}

cgroup_up() {
  CG= CGV=
  if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    CGV=2 CG=/sys/fs/cgroup/$P
  elif grep -qw cpu /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null; then
    CGV=2 CG=/sys/fs/cgroup/unified/$P
  elif [ -d /sys/fs/cgroup/cpu ]; then
    CGV=1 CG=/sys/fs/cgroup/cpu/$P
  else
    log "no cgroup cpu controller: the straggler scenario cannot run"
    return 0
  fi
  mkdir -p "$CG"
  if [ "$CGV" = 2 ]; then
    echo +cpu >"$(dirname "$CG")/cgroup.subtree_control" 2>/dev/null || true
    echo +cpu >"$CG/cgroup.subtree_control" 2>/dev/null || true
  fi
  local k
  for k in $(seq 0 $((N - 1))); do mkdir -p "$CG/node$k"; done
  echo "$CG" >"$RUN/cgroup"
  echo "$CGV" >"$RUN/cgroup_version"
}

cpu_limit() { # cpu_limit K PERCENT|max: the cpu share of node K's job processes
  [ -n "$CG" ] || die "no cgroup cpu controller"
  local d=$CG/node$1
  if [ "$CGV" = 2 ]; then
    if [ "$2" = max ]; then echo "max 100000" >"$d/cpu.max"; else echo "$(($2 * 1000)) 100000" >"$d/cpu.max"; fi
  else
    echo 100000 >"$d/cpu.cfs_period_us"
    if [ "$2" = max ]; then echo -1 >"$d/cpu.cfs_quota_us"; else echo $(($2 * 1000)) >"$d/cpu.cfs_quota_us"; fi
  fi
}

# The commands that mount, inside a node's mount namespace, the cgroup hierarchy holding the cpu controller at
# /sys/fs/cgroup as a host shows it (`ip netns exec` mounts the namespace's own sysfs over /sys, without the
# cgroup file systems under it): the agent's `cgroup` source reads the job's CPU throttling there.
cgroup_mounts() {
  local ctl
  if [ "$CGV" = 2 ]; then
    echo "mount -t cgroup2 cgroup2 /sys/fs/cgroup"
  elif [ "$CGV" = 1 ]; then
    ctl=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $2; exit}' /proc/self/cgroup)
    [ -n "$ctl" ] || return 0
    echo "mount -t tmpfs cgroup /sys/fs/cgroup && mkdir -p /sys/fs/cgroup/$ctl && mount -t cgroup -o $ctl cgroup /sys/fs/cgroup/$ctl"
  fi
}

# Starts node k's init (pid 1 of its pid namespace, in its own mount and UTS namespaces) and records its pid
# as the root namespace sees it.
node_up() {
  local k=$1 upid child=
  ip netns exec "$(node_ns "$k")" unshare --pid --fork --mount-proc --uts -- \
    sh -c "hostname node$k; $(cgroup_mounts); exec sleep infinity" 2>>"$RUN/node$k.init.log" &
  upid=$!
  disown "$upid" # ended by node_down (SIGKILL), never waited for
  # The init is unshare's child once it runs `sleep` (other short-lived children may come and go before).
  local c
  for _ in $(seq 1 200); do
    for c in $(cat "/proc/$upid/task/$upid/children" 2>/dev/null); do
      [ "$(cat "/proc/$c/comm" 2>/dev/null)" = sleep ] && child=$c
    done
    [ -n "$child" ] && break
    sleep 0.05
  done
  [ -n "$child" ] || die "node$k's init did not start"
  echo "$child" >"$RUN/node$k.pid"
  echo "$upid" >"$RUN/node$k.unshare"
}

node_down() {
  local k=$1 pid
  for f in "$RUN/node$k.unshare" "$RUN/node$k.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

# node_exec [--job] K CMD...: runs CMD inside node K (its net, pid, mount and UTS namespaces); with --job, in
# node K's job cgroup. Used as mpirun's rsh agent through $RUN/rsh (host name nodeK).
node_exec() {
  local job=0
  if [ "$1" = --job ]; then job=1; shift; fi
  local k=$1; shift
  [ -f "$RUN/node$k.pid" ] || die "node$k is not up"
  if [ "$job" = 1 ] && [ -f "$RUN/cgroup" ]; then echo $BASHPID >"$(cat "$RUN/cgroup")/node$k/cgroup.procs"; fi
  exec nsenter -t "$(cat "$RUN/node$k.pid")" -n -p -m -u -- "$@"
}

# ---------------------------------------------------------------------------------------------- components

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_collector() {
  GRPC_PORT=$(free_port)
  HTTP_PORT=$(free_port)
  "$BIN" collector --grpc-listen "$CTL_NET.1:$GRPC_PORT" --http-listen "127.0.0.1:$HTTP_PORT" --allow-plaintext \
    >"$SOUT/collector.log" 2>&1 &
  COLLECTOR_PID=$!
  API=http://127.0.0.1:$HTTP_PORT
  python3 "$HERE/evaluate.py" wait --url "$API" --nodes 0 --timeout 30 || die "collector did not start"
}

# A tc rate (2gbit, 200mbit, 500kbit) as the agent's [netdev.capacities] takes it (2Gbit/s, ...).
capacity_of() {
  case "$1" in
    *gbit) echo "${1%gbit}Gbit/s" ;;
    *mbit) echo "${1%mbit}Mbit/s" ;;
    *kbit) echo "${1%kbit}kbit/s" ;;
    *) die "rate $1: use tc's kbit, mbit or gbit" ;;
  esac
}

write_agent_config() { # write_agent_config K
  cat >"$RUN/agent-node$1.toml" <<EOF
# The bed's agent: only the two training links are read (veths are virtual and skipped unless included);
# ctl0, the control link to the collector, is not read at all. A veth reports 10 Gb/s whatever tc shapes it
# to: the capacities are the shaped rates.
steps_socket = "$RUN/steps-node$1.sock"
fast_period = "$FAST_PERIOD"
[netdev]
include = ["fab0", "mgmt0"]
fabric = ["fab0"]
management = ["mgmt0"]
[netdev.capacities]
fab0 = "$(capacity_of "$FAB_RATE")"
mgmt0 = "$(capacity_of "$MGMT_RATE")"
EOF
}

start_agents() {
  local k
  for k in $(seq 0 $((N - 1))); do
    write_agent_config "$k"
    (node_exec "$k" "$BIN" agent --collector "http://$CTL_NET.1:$GRPC_PORT" --node "node$k" \
      --config "$RUN/agent-node$k.toml" --allow-plaintext >"$SOUT/agent-node$k.log" 2>&1) &
    disown $! # ends with its node
  done
  python3 "$HERE/evaluate.py" wait --url "$API" --nodes "$N" --timeout 60 || die "agents did not register"
}

# ------------------------------------------------------------------------------------------------ scenarios

SCENARIOS="healthy healthy-short healthy-long healthy-overlap mgmt-one mgmt-all mgmt-one-env mgmt-all-env
mgmt-one-route mgmt-all-route ratecut loss straggler twojobs rerun-slow"

list_scenarios() {
  cat <<'EOF'
healthy          16 MiB all-reduce, ~0.4 s compute, 20 steps
healthy-short    8 MiB, ~0.2 s compute, 30 steps
healthy-long     48 MiB, ~1.2 s compute, 12 steps
healthy-overlap  16 MiB in 4 buckets all-reduced asynchronously during the backward compute (DDP-like)
mgmt-one         node1's rank on mgmt0 (mpi: its btl_tcp_if_include; torch: GLOO_SOCKET_IFNAME alone)
mgmt-all         every rank on mgmt0 (likewise)
mgmt-one-env     torch: node1 with GLOO_SOCKET_IFNAME=mgmt0 and NCCL_SOCKET_IFNAME=mgmt0 (which commwatch reads)
mgmt-all-env     torch: every rank likewise
mgmt-one-route   torch: no variable; node1's host name resolves to its management address, gloo picks mgmt0
mgmt-all-route   torch: every node's name resolves to its management address
ratecut          node2's fabric link cut to 1/4 of its rate (tc) from step 6 for 10 steps
loss             2 % packet loss (BED_LOSS_PCT) on node2's fabric link, both directions, from step 6 for 10
                 steps (netem; iptables in the switch's bridge where the kernel has no netem)
straggler        node3's job CPU-limited to 5 % of a core (cgroup; BED_STRAGGLER_PCT) from step 6 for 10 steps
twojobs          two jobs at once: A on node0,node1 (16 MiB, 0.4 s), B on node2,node3 (8 MiB, 0.8 s)
rerun-slow       the same job twice in one collector, 12 steps each: healthy, then with node1 on mgmt0 (as
                 mgmt-one): a job of the same shape running slower than its own earlier run
EOF
}

# Sets the scenario's parameters: STEPS BYTES COMPUTE_MS BUCKETS FAULT FAULT_NODES FAULT_AT FAULT_LEN IFACE_MODE
scenario_params() {
  STEPS=20 BYTES=$((16 << 20)) COMPUTE_MS=400 BUCKETS=1 FAULT=none FAULT_NODES= FAULT_AT=0 FAULT_LEN=0
  IFACE_MODE=fabric
  case $1 in
    healthy) ;;
    healthy-short) STEPS=30 BYTES=$((8 << 20)) COMPUTE_MS=200 ;;
    healthy-long) STEPS=12 BYTES=$((48 << 20)) COMPUTE_MS=1200 ;;
    healthy-overlap) BUCKETS=4 COMPUTE_MS=600 ;;
    mgmt-one | mgmt-one-env | mgmt-one-route) FAULT=management FAULT_NODES=node1 IFACE_MODE=${1#mgmt-one} ;;
    mgmt-all | mgmt-all-env | mgmt-all-route)
      FAULT=management FAULT_NODES=$(seq -s' ' -f 'node%g' 0 $((N - 1))) IFACE_MODE=${1#mgmt-all} ;;
    ratecut) STEPS=24 FAULT=ratecut FAULT_NODES=node2 FAULT_AT=6 FAULT_LEN=10 ;;
    loss) STEPS=24 FAULT=loss FAULT_NODES=node2 FAULT_AT=6 FAULT_LEN=10 ;;
    straggler) STEPS=24 FAULT=straggler FAULT_NODES=node3 FAULT_AT=6 FAULT_LEN=10 ;;
    twojobs) ;;
    rerun-slow) STEPS=12 FAULT=management FAULT_NODES=node1 IFACE_MODE=plain ;;
    *) die "unknown scenario $1 (see: bed.sh list)" ;;
  esac
  IFACE_MODE=${IFACE_MODE#-}
  [ -n "$IFACE_MODE" ] || IFACE_MODE=plain
  if [ "$FAULT" = management ] && [ "$LIB" = mpi ] && [ "$IFACE_MODE" != plain ]; then
    die "$1 is a torch scenario (mpi has mgmt-one and mgmt-all)"
  fi
  [ -z "$STEPS_OVERRIDE" ] || STEPS=$STEPS_OVERRIDE
  [ -z "$COMPUTE_OVERRIDE" ] || COMPUTE_MS=$COMPUTE_OVERRIDE
  if [ -n "$FAULT_NODES" ]; then
    local n
    for n in $FAULT_NODES; do [ "${n#node}" -lt "$N" ] || die "$1 needs node ${n#node} (--nodes $N)"; done
  fi
  if [ "$1" = twojobs ] && [ "$N" -lt 4 ]; then die "twojobs needs 4 nodes"; fi
  return 0
}

# Per-node environment and host names for the management fault. Writes $RUN/nodeK.env (sourced by rank-env.sh
# on the node before the job's program starts) and the hosts files.
prepare_iface() {
  local k name mgmt_names=
  for k in $(seq 0 $((N - 1))); do
    name=node$k
    : >"$RUN/$name.env"
    if [[ " $FAULT_NODES " == *" $name "* ]] && [ "$FAULT" = management ]; then
      case $LIB:$IFACE_MODE in
        mpi:plain) echo "export OMPI_MCA_btl_tcp_if_include=mgmt0" >>"$RUN/$name.env" ;;
        torch:plain) echo "export GLOO_SOCKET_IFNAME=mgmt0" >>"$RUN/$name.env" ;;
        torch:env) printf 'export GLOO_SOCKET_IFNAME=mgmt0\nexport NCCL_SOCKET_IFNAME=mgmt0\n' >>"$RUN/$name.env" ;;
        torch:route) mgmt_names="$mgmt_names $name" ;;
      esac
    elif [ "$LIB" = mpi ]; then
      echo "export OMPI_MCA_btl_tcp_if_include=fab0" >>"$RUN/$name.env"
    elif [ "$IFACE_MODE" != route ]; then
      echo "export GLOO_SOCKET_IFNAME=fab0" >>"$RUN/$name.env"
      [ "$IFACE_MODE" != env ] || echo "export NCCL_SOCKET_IFNAME=fab0" >>"$RUN/$name.env"
    fi
  done
  for k in $(seq 0 $((N - 1))); do
    # Only a node's own name matters to gloo's choice; every hosts file says the same.
    write_hosts "$k" "$mgmt_names"
  done
}

# launch_job JOBNAME "K K ..." BYTES COMPUTE_MS BUCKETS: starts the job in the background; adds its processes
# to JOB_PIDS and its name, id and nodes to jobs.jsonl.
launch_job() {
  local name=$1 nodes=$2 bytes=$3 compute=$4 buckets=$5 first k hosts= r=0 n
  local truth=$SOUT/truth/$name
  JOB_INDEX=$((JOB_INDEX + 1))
  mkdir -p "$SOUT/truth"
  n=$(wc -w <<<"$nodes")
  first=${nodes%% *}
  local args=(--bytes "$bytes" --compute-ms "$compute" --steps "$STEPS" --buckets "$buckets" --truth "$truth")
  [ "$MARKERS" = 0 ] || args+=(--markers)
  if [ "$LIB" = mpi ]; then
    for k in $nodes; do hosts="$hosts,node$k:1"; done
    # mpirun runs in the first node's network namespace only: its rsh agent must see the root namespace's
    # processes and cgroups to start every node's orted inside that node (host names resolve nowhere here, so
    # every node, the first one included, is started through the agent).
    (exec nsenter --net="/run/netns/$(node_ns "$first")" mpirun --allow-run-as-root -np "$n" --host "${hosts#,}" \
      --mca plm rsh --mca plm_rsh_agent "$RUN/rsh" --mca plm_rsh_no_tree_spawn 1 \
      --mca btl tcp,self --mca oob_tcp_if_include fab0 --mca btl_tcp_if_include fab0 --mca mpi_yield_when_idle 1 \
      -x COMMWATCH_JOB="$P-$SCEN-$name" \
      "$RUN/rank-env.sh" "$MPI_PROG" "${args[@]}" --job "$P-$SCEN-$name" \
      >"$SOUT/job-$name.log" 2>&1) &
    JOB_PIDS="$JOB_PIDS $!"
    echo "{\"name\":\"$name\",\"id\":\"$P-$SCEN-$name\",\"nodes\":\"$nodes\"}" >>"$SOUT/jobs.jsonl"
  else
    local port=$((29500 + JOB_INDEX))
    for k in $nodes; do
      (node_exec --job "$k" env RANK=$r WORLD_SIZE="$n" MASTER_ADDR="$(fab_addr "$first")" MASTER_PORT=$port \
        COMMWATCH_STEPS_SOCKET="$RUN/steps-node$k.sock" PYTHONPATH="$REPO/clients/python" \
        "$RUN/rank-env.sh" "$VENV/bin/python" "$HERE/train_torch.py" "${args[@]}" \
        >"$SOUT/job-$name-rank$r.log" 2>&1) &
      JOB_PIDS="$JOB_PIDS $!"
      r=$((r + 1))
    done
    echo "{\"name\":\"$name\",\"id\":\"$(fab_addr "$first"):$port\",\"nodes\":\"$nodes\"}" >>"$SOUT/jobs.jsonl"
  fi
}

write_run_helpers() {
  cat >"$RUN/rsh" <<EOF
#!/usr/bin/env bash
# mpirun's rsh agent: \$1 is a host name nodeK; the rest is the command, run as a remote shell would.
host=\$1; shift
exec env BED_RUN="$RUN" BED_NODES="$N" "$HERE/bed.sh" node-exec --job "\${host#node}" sh -c "\$*"
EOF
  cat >"$RUN/rank-env.sh" <<EOF
#!/bin/sh
# Runs on a node: this node's job environment (the fault's interface choice), then the program.
[ -f "$RUN/\$(hostname).env" ] && . "$RUN/\$(hostname).env"
exec "\$@"
EOF
  chmod +x "$RUN/rsh" "$RUN/rank-env.sh"
}

now_ns() { date +%s%N; }

truth_lines() { # lines in rank 0's truth file of the first job
  local f
  f=$(ls "$SOUT"/truth/*-rank0.jsonl 2>/dev/null | head -1)
  [ -n "$f" ] && wc -l <"$f" || echo 0
}

apply_fault() { # apply_fault on|off
  local n k
  for n in $FAULT_NODES; do
    k=${n#node}
    case $FAULT:$1 in
      ratecut:on) shape_node "$k" "$(rate_quarter "$FAB_RATE")" "$MGMT_RATE" ;;
      ratecut:off) shape_node "$k" "$FAB_RATE" "$MGMT_RATE" ;;
      loss:on) loss_on "$k" ;;
      loss:off) loss_off "$k" ;;
      straggler:on) cpu_limit "$k" "$STRAGGLER_PCT" ;;
      straggler:off) cpu_limit "$k" max ;;
    esac
  done
}

# How the loss scenario drops packets (LOSS_METHOD): netem on both ends of the node's fabric link where the
# kernel has it; else iptables' statistic match in the switch namespace, on the bridge's forwarding path
# (br_netfilter) matched by the node's bridge port, both ways. Both drop on the wire. Not the node's own
# OUTPUT chain: a packet dropped there is a local send error, which TCP sends again as new data without
# counting a retransmission (measured: 0 RetransSegs on the lossy node, its peer 2.4 %), so the lossy node's
# own counters would look clean.
pick_loss_method() {
  if ip netns exec "$P-sw" tc qdisc add dev lo root handle 1: netem loss 0% 2>/dev/null; then
    ip netns exec "$P-sw" tc qdisc del dev lo root 2>/dev/null || true
    LOSS_METHOD=netem
  elif command -v iptables >/dev/null; then
    LOSS_METHOD=iptables
    log "loss: this kernel has no netem; packets are dropped by iptables (statistic match) in the switch's bridge"
  else
    die "the loss scenario needs netem (CONFIG_NET_SCH_NETEM) or iptables (Debian: iptables)"
  fi
}

# The iptables rules of node K's loss, both ways: "-m physdev --physdev-in fK ..." then "--physdev-out".
loss_rule() { # loss_rule K in|out
  local prob
  prob=$(awk -v p="$LOSS_PCT" 'BEGIN { printf "%.4f", p / 100 }')
  if [ "$2" = in ]; then
    echo "FORWARD -m physdev --physdev-in f$1 -m statistic --mode random --probability $prob -j DROP"
  else
    echo "FORWARD -m physdev --physdev-out f$1 --physdev-is-bridged -m statistic --mode random --probability $prob -j DROP"
  fi
}

loss_on() { # loss_on K: LOSS_PCT % of packets dropped on node K's fabric link, the ways LOSS_DIR says
  local from=1 to=1
  [ "$LOSS_DIR" = to ] && from=0
  [ "$LOSS_DIR" = from ] && to=0
  if [ "$LOSS_METHOD" = netem ]; then
    [ $from = 1 ] && ip netns exec "$(node_ns "$1")" tc qdisc add dev fab0 parent 1:1 handle 10: netem loss "$LOSS_PCT%"
    [ $to = 1 ] && ip netns exec "$P-sw" tc qdisc add dev "f$1" parent 1:1 handle 10: netem loss "$LOSS_PCT%"
    return 0
  fi
  ip netns exec "$P-sw" sysctl -qw net.bridge.bridge-nf-call-iptables=1
  # shellcheck disable=SC2046
  [ $from = 0 ] || ip netns exec "$P-sw" iptables -w -A $(loss_rule "$1" in)
  # shellcheck disable=SC2046
  [ $to = 0 ] || ip netns exec "$P-sw" iptables -w -A $(loss_rule "$1" out)
}

# loss_off K: removes node K's loss (absent already: nothing); with iptables, first sets LOSS_DROPPED to the
# packets its rules dropped, as JSON ({"from_node": N, "to_node": N}).
loss_off() {
  if [ "$LOSS_METHOD" = netem ]; then
    ip netns exec "$(node_ns "$1")" tc qdisc del dev fab0 parent 1:1 handle 10: 2>/dev/null || true
    ip netns exec "$P-sw" tc qdisc del dev "f$1" parent 1:1 handle 10: 2>/dev/null || true
    return
  fi
  LOSS_DROPPED=$(ip netns exec "$P-sw" iptables -w -L FORWARD -v -n -x 2>/dev/null | awk -v d="f$1" '
    $3 == "DROP" && / statistic / { for (i = 1; i < NF; i++) {
      if ($i == "--physdev-in" && $(i + 1) == d) from += $1
      if ($i == "--physdev-out" && $(i + 1) == d) to += $1 } }
    END { printf "{\"from_node\": %d, \"to_node\": %d}", from, to }')
  # shellcheck disable=SC2046
  ip netns exec "$P-sw" iptables -w -D $(loss_rule "$1" in) 2>/dev/null || true
  # shellcheck disable=SC2046
  ip netns exec "$P-sw" iptables -w -D $(loss_rule "$1" out) 2>/dev/null || true
}

rate_quarter() { # 2gbit -> 500mbit
  python3 -c 'import re,sys; m=re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1]); \
u={"":1,"k":1e3,"m":1e6,"g":1e9}[m.group(2)]; print("%dkbit" % (float(m.group(1))*u/4/1e3))' "$1"
}

# Runs in the background during a mid-run fault: on at step FAULT_AT of rank 0, off FAULT_LEN steps later.
fault_controller() {
  while [ "$(truth_lines)" -lt "$FAULT_AT" ]; do sleep 0.1; done
  apply_fault on
  fault_event start "$FAULT_AT"
  if [ "$FAULT" = loss ]; then
    log "fault loss on $FAULT_NODES: $LOSS_PCT % each way ($LOSS_METHOD)"
  else
    log "fault $FAULT on $FAULT_NODES"
  fi
  while [ "$(truth_lines)" -lt $((FAULT_AT + FAULT_LEN)) ]; do sleep 0.1; done
  apply_fault off
  fault_event end $((FAULT_AT + FAULT_LEN))
  log "fault $FAULT cleared"
}

# Waits for the jobs of JOB_PIDS, each at most the scenario's deadline; 1 when one failed or timed out.
wait_jobs() {
  local p rc=0 deadline=$(($(date +%s) + STEPS * 20 + 90))
  for p in $JOB_PIDS; do
    while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
    if kill -0 "$p" 2>/dev/null; then log "job timed out"; rc=1; break; fi
    wait "$p" || { log "job process $p failed (see $SOUT/job-*.log)"; rc=1; }
  done
  JOB_PIDS=
  return "$rc"
}

# fault_event start|end STEP: the fault's edge in faults.jsonl; the loss scenario adds how packets were dropped
# (method, loss_pct) and, at its end with iptables, how many (dropped_packets).
fault_event() {
  local extra=
  if [ "$FAULT" = loss ]; then
    extra=",\"method\":\"$LOSS_METHOD\",\"loss_pct\":$LOSS_PCT,\"loss_dir\":\"$LOSS_DIR\""
    [ "$1" != end ] || [ -z "${LOSS_DROPPED:-}" ] || extra="$extra,\"dropped_packets\":$LOSS_DROPPED"
  fi
  echo "{\"fault\":\"$FAULT\",\"nodes\":\"$FAULT_NODES\",\"event\":\"$1\",\"time_ns\":$(now_ns),\"step\":$2$extra}" \
    >>"$SOUT/faults.jsonl"
}

run_scenario() {
  SCEN=$1
  scenario_params "$SCEN"
  SOUT=$OUT/$LIB-$SCEN
  rm -rf "$SOUT"
  mkdir -p "$SOUT"
  log "scenario $LIB:$SCEN ($STEPS steps) -> $SOUT"
  local k
  for k in $(seq 0 $((N - 1))); do node_up "$k"; done
  prepare_iface
  start_collector
  start_agents
  cat >"$SOUT/scenario.json" <<EOF
{"lib":"$LIB","scenario":"$SCEN","prefix":"$P","nodes":$N,"steps":$STEPS,"bytes":$BYTES,"compute_ms":$COMPUTE_MS,
 "buckets":$BUCKETS,"fault":"$FAULT","fault_nodes":"$FAULT_NODES","fault_at":$FAULT_AT,"fault_len":$FAULT_LEN,
 "iface_mode":"$IFACE_MODE","markers":$MARKERS,"fabric_rate":"$FAB_RATE","mgmt_rate":"$MGMT_RATE","fast_period":"$FAST_PERIOD","shaper":"$SHAPER",
 "commwatch":"$("$BIN" --version 2>/dev/null | head -1)","api":"$API"}
EOF
  python3 "$HERE/evaluate.py" poll --url "$API" --nodes "$N" --out "$SOUT" --interval 2 &
  POLL_PID=$!
  JOB_PIDS= JOB_INDEX=0
  : >"$SOUT/jobs.jsonl"
  if [ "$SCEN" = twojobs ]; then
    launch_job a "0 1" $((16 << 20)) 400 1
    launch_job b "2 3" $((8 << 20)) 800 1
  elif [ "$SCEN" = rerun-slow ]; then
    # The same job twice, one collector: healthy, then with the seed's fault on node1 (several times slower).
    FAULT=none prepare_iface
    launch_job a "$(seq -s' ' 0 $((N - 1)))" "$BYTES" "$COMPUTE_MS" "$BUCKETS"
    wait_jobs || { log "the first run failed"; }
    prepare_iface
    fault_event start 0
    launch_job b "$(seq -s' ' 0 $((N - 1)))" "$BYTES" "$COMPUTE_MS" "$BUCKETS"
  else
    launch_job main "$(seq -s' ' 0 $((N - 1)))" "$BYTES" "$COMPUTE_MS" "$BUCKETS"
  fi
  local rc=0
  FAULT_PID=
  if [ "$FAULT_AT" -gt 0 ]; then fault_controller & FAULT_PID=$!; fi
  wait_jobs || rc=1
  [ "$SCEN" != rerun-slow ] || fault_event end "$STEPS"
  [ -z "$FAULT_PID" ] || { kill "$FAULT_PID" 2>/dev/null || true; wait "$FAULT_PID" 2>/dev/null || true; }
  FAULT_PID=
  [ "$FAULT_AT" -eq 0 ] || apply_fault off 2>/dev/null || true
  # Let the collector's step engine and rules catch up with the last steps, then take the final snapshots.
  sleep "${BED_LINGER_S:-8}"
  kill -TERM "$POLL_PID" 2>/dev/null || true
  wait "$POLL_PID" 2>/dev/null || true
  for k in $(seq 0 $((N - 1))); do node_down "$k"; done
  kill -TERM "$COLLECTOR_PID" 2>/dev/null || true
  wait "$COLLECTOR_PID" 2>/dev/null || true
  echo "$rc" >"$SOUT/bed_rc"
  python3 "$HERE/evaluate.py" report --out "$SOUT" | tee "$SOUT/report.txt" || log "evaluator failed"
  return "$rc"
}

on_exit() {
  local rc=$?
  set +e
  [ -z "${FAULT_PID:-}" ] || kill "$FAULT_PID" 2>/dev/null
  [ -z "${POLL_PID:-}" ] || kill -TERM "$POLL_PID" 2>/dev/null
  [ -z "${COLLECTOR_PID:-}" ] || kill -TERM "$COLLECTOR_PID" 2>/dev/null
  if [ -n "${P:-}" ]; then
    local k
    for k in $(seq 0 $((N - 1))); do node_down "$k" 2>/dev/null; done
    cleanup_prefix "$P*"
    [ -z "${RUN:-}" ] || rm -rf "$RUN"
    log "cleaned up $P"
  fi
  exit "$rc"
}

cmd_run() {
  LIB=mpi N=4 OUT= MARKERS=0 STEPS_OVERRIDE= COMPUTE_OVERRIDE=
  local scen=()
  while [ $# -gt 0 ]; do
    case $1 in
      --lib) LIB=$2; shift 2 ;;
      --nodes) N=$2; shift 2 ;;
      --out) OUT=$2; shift 2 ;;
      --markers) MARKERS=1; shift ;;
      --steps) STEPS_OVERRIDE=$2; shift 2 ;;
      --compute-ms) COMPUTE_OVERRIDE=$2; shift 2 ;;
      -*) die "unknown option $1" ;;
      *) scen+=("$1"); shift ;;
    esac
  done
  [ ${#scen[@]} -gt 0 ] || die "no scenario (see: bed.sh list)"
  local s
  for s in "${scen[@]}"; do
    [[ " $(echo $SCENARIOS) " == *" $s "* ]] || die "unknown scenario $s (see: bed.sh list)"
  done
  [[ $LIB == mpi || $LIB == torch ]] || die "--lib mpi|torch"
  [[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 2 ] && [ "$N" -le 32 ] || die "--nodes 2..32"
  check_tools
  if [ "$LIB" = mpi ]; then setup_mpi; else setup_torch; fi
  OUT=${OUT:-/tmp/commwatch-testbed/$(date -u +%Y%m%dT%H%M%SZ)}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  P=${BED_PREFIX:-$PREFIX_GLOB$(printf '%04x' $((RANDOM % 65536)))}
  # Interface names are at most 15 characters: the prefix plus "ctl" or "c<k>" must fit.
  [[ $P =~ ^cwb[0-9a-z]{1,7}$ ]] || die "BED_PREFIX must be cwb and 1 to 7 lower-case letters or digits"
  RUN=/run/commwatch-testbed/$P
  [ ! -e "$RUN" ] || die "$RUN exists: prefix $P is in use"
  mkdir -p "$RUN"
  echo $$ >"$RUN/owner"
  trap on_exit EXIT
  trap 'exit 130' INT TERM
  pick_ctl_net
  log "run $P: $N nodes, control net $CTL_NET.0/24, outputs in $OUT"
  topo_up
  write_run_helpers
  LOSS_METHOD=
  [[ " ${scen[*]} " != *" loss "* ]] || pick_loss_method
  local s rc=0
  for s in "${scen[@]}"; do
    run_scenario "$s" || rc=1
  done
  python3 "$HERE/evaluate.py" summary "$OUT" | tee "$OUT/summary.txt" || true
  return "$rc"
}

main() {
case ${1:-} in
  setup)
    shift
    setup_mpi
    command -v iptables >/dev/null \
      || log "warning: no iptables: the loss scenario needs it where the kernel has no netem (Debian: iptables)"
    [ "${1:-}" != --torch ] || setup_torch ;;
  list) list_scenarios ;;
  run) shift; cmd_run "$@" ;;
  cleanup) cleanup_stale "${2:-}" ;;
  node-exec)
    # Internal (mpirun's rsh agent): BED_RUN names the run's state directory.
    shift
    RUN=${BED_RUN:?}
    node_exec "$@" ;;
  *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
}

# Sourcing the script (for a test of its functions) defines them without running anything.
# `exit` in the same command: bash reads a script as it runs, so nothing after this line is ever read (an
# edit of the file during a run cannot change what the run does next).
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
  exit $?
fi
