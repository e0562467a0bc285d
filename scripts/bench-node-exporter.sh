#!/usr/bin/env bash
# commwatch's agent against Debian's prometheus-node-exporter, side by side in one run, on the same tree: the
# H100 tree (the shared gpud capture plus the project's additions: 8 ConnectX-7 HCAs, one BlueField bond,
# 4 NICs), composed in a temporary directory.
#
#  1. node_exporter (infiniband + netclass collectors only, its own Go/process metrics off) scraped K times:
#     its process CPU time (utime + stime from /proc/PID/stat) over the K scrapes ÷ K = CPU per scrape.
#  2. The agent's sources reading every counter of the tree once (one fast-tier tick + one slow-tier tick),
#     from `cargo bench -p commwatch-agent --bench sources` (files kept open, pread).
#  3. The agent process itself at the default rates (20 Hz fast, 1 Hz slow) streaming to a real collector:
#     CPU per second, and the same for node_exporter scraped at 1 Hz and at 20 Hz (its per-scrape cost × rate).
#
# Usage: scripts/bench-node-exporter.sh [K scrapes (default 2000)] [agent seconds (default 20)]
set -euo pipefail
cd "$(dirname "$0")/.."
K=${1:-2000}
secs=${2:-20}
ne=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
[ -x "$ne" ] || { echo "node_exporter not found at $ne (apt-get install prometheus-node-exporter)" >&2; exit 1; }
cargo build --release --quiet
bin=target/release/commwatch
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
# The H100 tree: the shared gpud capture plus the project's additions (agent/tests/fixtures/README.md), the
# same tree the sources bench composes for itself.
tree=$work/h100
cargo run --quiet -p commwatch-testdata --bin compose-sysfs -- gpud_h100 "$tree"
clk=$(getconf CLK_TCK)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }

echo "== node_exporter $("$ne" --version 2>&1 | head -1 | awk '{print $3}') on $tree"
nport=$(port)
"$ne" --path.sysfs="$tree" --collector.disable-defaults --collector.infiniband --collector.netclass \
  --web.disable-exporter-metrics --web.listen-address="127.0.0.1:$nport" 2>"$work/ne.log" &
nepid=$!
python3 - "$nport" <<'PY'
import sys, time, urllib.request
for _ in range(100):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read(); break
    except Exception:
        time.sleep(0.1)
PY
scrape() { # port count -> prints "series bytes"
  python3 - "$1" "$2" <<'PY'
import sys, urllib.request
url, n = f"http://127.0.0.1:{sys.argv[1]}/metrics", int(sys.argv[2])
for _ in range(n):
    body = urllib.request.urlopen(url, timeout=10).read()
series = sum(1 for l in body.decode().splitlines() if l and not l.startswith("#"))
print(series, len(body))
PY
}
scrape "$nport" 50 >/dev/null # warm-up
n0=$(cpu_ticks "$nepid")
read -r ne_series ne_bytes < <(scrape "$nport" "$K")
n1=$(cpu_ticks "$nepid")
kill "$nepid"; wait "$nepid" 2>/dev/null || true

echo "== commwatch agent sources on the same tree (cargo bench -p commwatch-agent --bench sources)"
FAST_TICKS=${FAST_TICKS:-20000} SLOW_TICKS=${SLOW_TICKS:-4000} \
  cargo bench --quiet -p commwatch-agent --bench sources 2>/dev/null | tee "$work/sources.txt"

echo "== commwatch agent process at the default rates for ${secs}s"
grpc=$(port); http=$(port)
"$bin" collector --grpc-listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" 2>"$work/collector.log" &
sleep 1
"$bin" agent --collector "http://127.0.0.1:$grpc" --node h100 --sysfs-root "$tree" \
  --http-listen 127.0.0.1:0 --steps-udp off --steps-socket off 2>"$work/agent.log" &
apid=$!
sleep 3 # start-up and first discovery excluded
a0=$(cpu_ticks "$apid")
sleep "$secs"
a1=$(cpu_ticks "$apid")

python3 - "$n0" "$n1" "$K" "$clk" "$ne_series" "$ne_bytes" "$a0" "$a1" "$secs" "$work/sources.txt" <<'PY'
import sys
n0, n1, k, clk, ne_series, ne_bytes, a0, a1, secs = map(float, sys.argv[1:10])
held = {}
for line in open(sys.argv[10]):
    f = line.split()
    if f and f[0] in ("fast", "slow"):
        # tier files ticks | held wall µs held cpu µs | ...
        held[f[0]] = (int(f[1]), float(f[6]))
ne_scrape = (n1 - n0) / clk / k
files = held["fast"][0] + held["slow"][0]
agent_read = (held["fast"][1] + held["slow"][1]) * 1e-6
agent_cpu_s = (a1 - a0) / clk / secs
print()
print(f"node_exporter: {ne_scrape*1e6:9.1f} µs CPU per scrape ({k:.0f} scrapes, {ne_series:.0f} series, {ne_bytes/1024:.1f} KiB)")
print(f"agent sources: {agent_read*1e6:9.1f} µs CPU per full read of all counters ({files} files: fast {held['fast'][1]:.1f} + slow {held['slow'][1]:.1f} µs)")
print(f"ratio        : {ne_scrape/agent_read:9.1f}x cheaper per full read (goal >= 10x)")
print(f"per series   : node_exporter {ne_scrape/ne_series*1e6:.2f} µs, agent {agent_read/files*1e6:.2f} µs ({ne_scrape/ne_series/(agent_read/files):.1f}x)")
print(f"agent process: {agent_cpu_s*1e3:9.2f} ms CPU per second at 20 Hz fast / 1 Hz slow, shipping included")
print(f"node_exporter: {ne_scrape*1e3:9.2f} ms CPU per second scraped at 1 Hz, {ne_scrape*20e3:.1f} ms/s at 20 Hz")
PY
