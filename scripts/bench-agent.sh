#!/usr/bin/env bash
# Measures the agent's resident memory and CPU at the default rates (20 Hz fast, 1 Hz slow) on
#  1. the H100 fixture tree (8 ConnectX-7 HCAs, one BlueField bond, 4 NICs; static counters), and
#  2. one node of the simulated cluster (8 HCAs + IPoIB + eth0, counters moving),
# streaming to a real collector on loopback. Prints one line per case.
# Usage: scripts/bench-agent.sh [seconds]   (default 30; BIN=<binary>: another build's, else this tree's)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/commwatch}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=$(port); http=$(port)
"$bin" collector --grpc-listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" 2>"$work/collector.log" &
sleep 1

clk=$(getconf CLK_TCK)
measure() { # name sysfs-root
  local name=$1 root=$2
  "$bin" agent --collector "http://127.0.0.1:$grpc" --node "$name" --sysfs-root "$root" \
    --http-listen 127.0.0.1:0 --steps-udp off --steps-socket off 2>"$work/$name.log" &
  local pid=$!
  sleep 3 # start-up and first discovery excluded
  local t0; t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  sleep "$secs"
  local t1; t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  local rss; rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  local hwm; hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$name" "$t0" "$t1" "$clk" "$secs" "$rss" "$hwm" <<'PY'
import sys
name, t0, t1, clk, secs, rss, hwm = sys.argv[1], *map(float, sys.argv[2:])
cpu = (t1 - t0) / clk
print(f"{name:<14} cpu {cpu/secs*100:6.2f}% of a core ({cpu*1000/secs:6.1f} ms/s)   rss {rss/1024:6.1f} MiB   peak {hwm/1024:6.1f} MiB")
PY
}

# The H100 tree: the shared gpud capture plus the project's additions (agent/tests/fixtures/README.md).
cargo run --quiet -p commwatch-testdata --bin compose-sysfs -- gpud_h100 "$work/h100"
measure fixture-h100 "$work/h100"
# A moving simulated node: the demo's trees, written by the simulator in the background.
"$bin" demo --nodes 1 --gpus-per-node 8 --scenario healthy --dir "$work/sim" \
  --grpc-listen "127.0.0.1:$(port)" --http-listen "127.0.0.1:$(port)" --duration $((secs + 10))s >/dev/null 2>&1 &
sleep 2
measure sim-node "$work/sim/node-00"
