#!/usr/bin/env bash
# How soon a new training process is known, end to end: a real agent (default rates: 1 s slow period, 10 s
# discovery period) on this machine's real /proc, streaming to a real collector on loopback; a process with a
# training job's environment (`COMMWATCH_JOB`, `RANK`, `WORLD_SIZE`) is started at a random moment (uniform over
# a discovery period after the last change), and the collector's `GET /api/v1/jobs` is polled every 10 ms until
# the job is listed (then until it is gone, after the process is killed). Prints each run's delays and their
# median and maximum.
#
# Usage: scripts/bench-job-discovery.sh [runs (default 10)]
#   BIN: an agent binary built elsewhere (another revision, for a before/after); else this tree's release build.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
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
mkdir -p "$work/sys" # no hardware: only the processes source has anything to find
"$bin" agent --collector "http://127.0.0.1:$grpc" --node disc --sysfs-root "$work/sys" \
  --http-listen 127.0.0.1:0 --steps-udp off --steps-socket off 2>"$work/agent.log" &
sleep 3

python3 - "$http" "$runs" <<'PY'
import json, os, random, statistics, subprocess, sys, time, urllib.request
port, runs = sys.argv[1], int(sys.argv[2])
url = f"http://127.0.0.1:{port}/api/v1/jobs"

def listed(job):
    try:
        body = json.load(urllib.request.urlopen(url, timeout=2))
    except OSError:
        return False
    jobs = body.get("jobs", body) if isinstance(body, dict) else body
    return any(isinstance(j, dict) and j.get("id") == job for j in jobs)

def wait(job, present, limit=30.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if listed(job) == present:
            return time.monotonic() - t0
        time.sleep(0.01)
    return float("inf")

known, gone = [], []
for i in range(runs):
    # A random phase against the agent's slow ticks and discoveries (10 s apart by default): started just
    # after one, a process waits the longest.
    time.sleep(random.uniform(0.0, 10.0))
    job = f"discovery-{os.getpid()}-{i}"
    env = dict(os.environ, COMMWATCH_JOB=job, RANK="0", WORLD_SIZE="1")
    p = subprocess.Popen(["sleep", "120"], env=env)
    k = wait(job, True)
    p.kill(); p.wait()
    g = wait(job, False)
    known.append(k); gone.append(g)
    print(f"run {i}: known after {k:.2f} s, gone {g:.2f} s after it ended", flush=True)
print(f"known: median {statistics.median(known):.2f} s, max {max(known):.2f} s; "
      f"gone: median {statistics.median(gone):.2f} s, max {max(gone):.2f} s ({runs} runs)")
PY
