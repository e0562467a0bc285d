#!/usr/bin/env bash
# commwatch's agent against Debian's prometheus-node-exporter, side by side in one run, on the same tree: the
# H100 tree (the shared gpud capture plus the project's additions: 8 ConnectX-7 HCAs, one BlueField bond,
# 4 NICs), composed in a temporary directory.
#
#  1. node_exporter (infiniband + netclass collectors only, its own Go/process metrics off) scraped K times:
#     its process CPU time (utime + stime from /proc/PID/stat) over the K scrapes ÷ K = CPU per scrape.
#  2. The agent's sources reading every counter of the tree once (one fast-tier tick + one slow-tier tick),
#     from `cargo bench -p commwatch-agent --bench sources` (files kept open, pread).
#  3. The agent process at 1 Hz (fast, slow and batch periods 1 s) streaming to a real collector, and
#     node_exporter scraped once a second, side by side for the same seconds: each whole process's CPU per
#     second (utime + stime), in one window.
#  4. The agent process at the default rates (20 Hz fast, 1 Hz slow): CPU per second, against node_exporter's
#     per-scrape cost × 20 (scraped at 20 Hz).
#
#  With BASE_BIN (another revision's binary), steps 3 and 4 run that agent too, beside the first, in the same
#  windows: a before/after under the same load, split by thread.
#
# Usage: scripts/bench-node-exporter.sh [K scrapes (default 2000)] [agent seconds (default 20)]
set -euo pipefail
cd "$(dirname "$0")/.."
K=${1:-2000}
secs=${2:-20}
ne=${NODE_EXPORTER:-/usr/bin/prometheus-node-exporter}
[ -x "$ne" ] || { echo "node_exporter not found at $ne (apt-get install prometheus-node-exporter)" >&2; exit 1; }
# BIN: an agent binary built elsewhere (another revision, for a before/after in one run); else this tree's.
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
fi
bin=${BIN:-${CARGO_TARGET_DIR:-target}/release/commwatch}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
# The H100 tree: the shared gpud capture plus the project's additions (agent/tests/fixtures/README.md), the
# same tree the sources bench composes for itself.
tree=$work/h100
cargo run --quiet -p commwatch-testdata --bin compose-sysfs -- gpud_h100 "$tree"
clk=$(getconf CLK_TCK)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# CPU time of a whole process in ns, summed over its threads (schedstat: exact, where utime + stime count
# 10 ms ticks: too coarse for a process using a few ms a second).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
# Each thread's CPU time in ns, "tid name ns" per line (the agent names its threads: `cw-src-<source>` for each
# source, `commwatch-sampler`, the runtime's): where a process's CPU goes, by thread.
thread_ns() {
  for t in /proc/"$1"/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm" 2>/dev/null)" "$(awk '{print $1}' "$t/schedstat" 2>/dev/null)"
  done
}

echo "== node_exporter $("$ne" --version 2>&1 | head -1 | awk '{print $3}') on $tree"
nport=$(port)
"$ne" --path.sysfs="$tree" --collector.disable-defaults --collector.infiniband --collector.netclass \
  --web.disable-exporter-metrics --web.listen-address="127.0.0.1:$nport" 2>"$work/ne.log" &
nepid=$!
ready() { # port: waits up to 30 s for an answer on /metrics
  python3 - "$1" <<'PY'
import sys, time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=2).read(); break
    except Exception:
        time.sleep(0.1)
PY
}
ready "$nport"
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

# SOURCES_BENCH=0 leaves out the sources bench (step 2; a build of its own) and its per-read figures.
if [ "${SOURCES_BENCH:-1}" != 0 ]; then
  echo "== commwatch agent sources on the same tree (cargo bench -p commwatch-agent --bench sources)"
  FAST_TICKS=${FAST_TICKS:-20000} SLOW_TICKS=${SLOW_TICKS:-4000} \
    cargo bench --quiet -p commwatch-agent --bench sources 2>/dev/null | tee "$work/sources.txt"
else
  : >"$work/sources.txt"
fi

grpc=$(port); http=$(port)
"$bin" collector --grpc-listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" 2>"$work/collector.log" &
sleep 1
agent() { # name config-file [binary] -> starts an agent on the tree, its pid in $apid
  "${3:-$bin}" agent --collector "http://127.0.0.1:$grpc" --node "$1" --sysfs-root "$tree" --config "$2" \
    --http-listen 127.0.0.1:0 --steps-udp off --steps-socket off 2>"$work/agent-$1.log" &
  apid=$!
}

echo "== at 1 Hz for ${secs}s: the agent (fast, slow and batch periods 1 s) and node_exporter scraped once a second"
printf 'fast_period = "1s"\nslow_period = "1s"\nbatch_period = "1s"\n' >"$work/agent-1hz.toml"
agent h100-1hz "$work/agent-1hz.toml"
a1hz=$apid
b1hz=
if [ -n "${BASE_BIN:-}" ]; then
  agent h100-1hz-base "$work/agent-1hz.toml" "$BASE_BIN"
  b1hz=$apid
fi
"$ne" --path.sysfs="$tree" --collector.disable-defaults --collector.infiniband --collector.netclass \
  --web.disable-exporter-metrics --web.listen-address="127.0.0.1:$nport" 2>>"$work/ne.log" &
ne1hz=$!
ready "$nport"
sleep 3 # start-up and first discovery excluded
python3 - "$nport" "$secs" >/dev/null <<'PY' &
import sys, time, urllib.request
url, secs = f"http://127.0.0.1:{sys.argv[1]}/metrics", int(sys.argv[2])
t = time.monotonic()
for i in range(secs + 2):
    try:
        urllib.request.urlopen(url, timeout=10).read()
    except OSError:
        break  # node_exporter stopped at the window's end
    t += 1.0
    time.sleep(max(0.0, t - time.monotonic()))
PY
scraper=$!
sleep 0.5
h0=$(cpu_ns "$a1hz"); e0=$(cpu_ns "$ne1hz"); thread_ns "$a1hz" >"$work/threads0"
[ -z "$b1hz" ] || thread_ns "$b1hz" >"$work/base-threads0"
sleep "$secs"
h1=$(cpu_ns "$a1hz"); e1=$(cpu_ns "$ne1hz"); thread_ns "$a1hz" >"$work/threads1"
[ -z "$b1hz" ] || thread_ns "$b1hz" >"$work/base-threads1"
kill "$a1hz" "$ne1hz" $b1hz 2>/dev/null; wait "$scraper" 2>/dev/null || true
wait "$a1hz" "$ne1hz" $b1hz 2>/dev/null || true

echo "== commwatch agent process at the default rates for ${secs}s"
printf '' >"$work/agent-default.toml"
agent h100 "$work/agent-default.toml"
a20=$apid
b20=
if [ -n "${BASE_BIN:-}" ]; then
  agent h100-base "$work/agent-default.toml" "$BASE_BIN"
  b20=$apid
fi
sleep 3 # start-up and first discovery excluded
a0=$(cpu_ns "$a20"); thread_ns "$a20" >"$work/threads20-0"
if [ -n "$b20" ]; then
  ba0=$(cpu_ns "$b20"); thread_ns "$b20" >"$work/base-threads20-0"
fi
sleep "$secs"
a1=$(cpu_ns "$a20"); thread_ns "$a20" >"$work/threads20-1"
if [ -n "$b20" ]; then
  ba1=$(cpu_ns "$b20"); thread_ns "$b20" >"$work/base-threads20-1"
fi
kill "$a20" $b20 2>/dev/null; wait "$a20" $b20 2>/dev/null || true

python3 - "$n0" "$n1" "$K" "$clk" "$ne_series" "$ne_bytes" "$a0" "$a1" "$secs" "$work/sources.txt" \
  "$h0" "$h1" "$e0" "$e1" <<'PY'
import sys
n0, n1, k, clk, ne_series, ne_bytes, a0, a1, secs = map(float, sys.argv[1:10])
h0, h1, e0, e1 = map(float, sys.argv[11:15])
held = {}
for line in open(sys.argv[10]):
    f = line.split()
    if f and f[0] in ("fast", "slow"):
        # tier files ticks | held wall µs held cpu µs | ...
        held[f[0]] = (int(f[1]), float(f[6]))
ne_scrape = (n1 - n0) / clk / k
agent_cpu_s = (a1 - a0) / 1e9 / secs
print()
print(f"node_exporter: {ne_scrape*1e6:9.1f} µs CPU per scrape ({k:.0f} scrapes, {ne_series:.0f} series, {ne_bytes/1024:.1f} KiB)")
if held:
    files = held["fast"][0] + held["slow"][0]
    agent_read = (held["fast"][1] + held["slow"][1]) * 1e-6
    print(f"agent sources: {agent_read*1e6:9.1f} µs CPU per full read of all counters ({files} files: fast {held['fast'][1]:.1f} + slow {held['slow'][1]:.1f} µs)")
    print(f"ratio        : {ne_scrape/agent_read:9.1f}x cheaper per full read (goal >= 10x)")
    print(f"per series   : node_exporter {ne_scrape/ne_series*1e6:.2f} µs, agent {agent_read/files*1e6:.2f} µs ({ne_scrape/ne_series/(agent_read/files):.1f}x)")
print(f"agent process: {agent_cpu_s*1e3:9.2f} ms CPU per second at 20 Hz fast / 1 Hz slow, shipping included")
print(f"node_exporter: {ne_scrape*1e3:9.2f} ms CPU per second scraped at 1 Hz, {ne_scrape*20e3:.1f} ms/s at 20 Hz")
print(f"ratio at 20 Hz: node_exporter {ne_scrape*20e3:.1f} / agent {agent_cpu_s*1e3:.2f} ms/s = {ne_scrape*20/agent_cpu_s:.1f}x (goal >= 10x)")
agent_1hz, ne_1hz = (h1 - h0) / 1e9 / secs, (e1 - e0) / 1e9 / secs
print(f"at 1 Hz, same {secs:.0f} s, whole processes: agent {agent_1hz*1e3:.2f} ms/s, node_exporter scraped once a second {ne_1hz*1e3:.2f} ms/s: agent/node_exporter {agent_1hz/max(ne_1hz,1e-9):.2f} (goal <= 0.5)")
PY
# The 1 Hz agent's CPU by thread, same window (threads that ended or began in it are left out); BASE_BIN's too.
by_thread() { # label threads0 threads1 [node_exporter ns0 ns1 (default: the 1 Hz window's)]
python3 - "$1" "$2" "$3" "$secs" "${4:-$e0}" "${5:-$e1}" <<'PY'
import sys
from collections import defaultdict
def load(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) == 3 and f[2].isdigit():
            out[f[0]] = (f[1], int(f[2]))
    return out
label, t0, t1, secs = sys.argv[1], load(sys.argv[2]), load(sys.argv[3]), float(sys.argv[4])
ne = (float(sys.argv[6]) - float(sys.argv[5])) / 1e9 / secs
by_name = defaultdict(float)
for tid, (name, ns) in t1.items():
    if tid in t0:
        by_name[name] += (ns - t0[tid][1]) / 1e9 / secs
total = sum(by_name.values()) or 1e-12
print(f"{label} at 1 Hz: {total*1e3:.2f} ms/s over its threads, {total/max(ne,1e-9):.2f} of node_exporter's; by thread:",
      ", ".join(f"{n} {v*1e3:.3f} ms/s ({v/total:.0%})" for n, v in sorted(by_name.items(), key=lambda kv: -kv[1])))
PY
}
by_thread agent "$work/threads0" "$work/threads1"
[ -z "$b1hz" ] || by_thread "base agent ($BASE_BIN)" "$work/base-threads0" "$work/base-threads1"
# At 20 Hz: the "of node_exporter's" share is against node_exporter's per-scrape cost × 20 (step 1).
ne20=$(python3 -c "print(int(($n1 - $n0) / $clk / $K * 20 * $secs * 1e9))")
sed 's/ at 1 Hz:/ at 20 Hz:/' <(by_thread agent "$work/threads20-0" "$work/threads20-1" 0 "$ne20")
if [ -n "$b20" ]; then
  sed 's/ at 1 Hz:/ at 20 Hz:/' <(by_thread "base agent ($BASE_BIN)" "$work/base-threads20-0" "$work/base-threads20-1" 0 "$ne20")
  python3 -c "
a, b, ne = ($a1 - $a0) / 1e9 / $secs, ($ba1 - $ba0) / 1e9 / $secs, $ne20 / 1e9 / $secs
print(f'at 20 Hz, same {$secs} s: agent {a*1e3:.2f} ms/s ({ne/a:.1f}x less than node_exporter x 20), base agent {b*1e3:.2f} ms/s ({ne/b:.1f}x)')"
fi
