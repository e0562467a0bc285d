#!/usr/bin/env bash
# gpu-check.sh: the nvml source on a machine with NVIDIA GPUs, for real.
#
# 1. Builds the agent (release) and runs `commwatch agent --once` twice.
# 2. Checks the NVML values are sane: GPU count matches nvidia-smi, every NVLink link has a GPU UUID, link states
#    are up/down, capacities are positive, NVLink byte counters do not go backwards between the two runs.
# 3. Measures the agent's cost on a GPU workload: a fixed PyTorch matrix-multiply loop timed without the agent
#    and with it sampling at the default fast period (50 ms) and at 5x and 20x that rate; prints a table
#    (rate, slowdown %, NVML call latency p50 from the agent's own /metrics).
#
# Takes a few minutes. Needs: nvidia-smi (the driver, hence NVML), python3 with torch (CUDA), curl, and the agent:
# COMMWATCH_BIN=PATH (an x86-64 binary built elsewhere, for a machine without cargo), else cargo builds it here.
# Exits 2 with what is missing, before anything runs, on a machine without them.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${COMMWATCH_BIN:-target/release/commwatch}

missing() { echo "gpu-check: $*" >&2; exit 2; }
command -v nvidia-smi >/dev/null || missing "nvidia-smi not found: this check needs an NVIDIA GPU and its driver (NVML)"
nvidia-smi -L >/dev/null 2>&1 || missing "nvidia-smi finds no GPU (or no driver/NVML): $(nvidia-smi -L 2>&1 | head -1)"
command -v python3 >/dev/null || missing "python3 not found"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || missing "python3 has no torch with CUDA (import torch; torch.cuda.is_available() is false or fails)"
command -v curl >/dev/null || missing "curl not found"
if [[ -z "${COMMWATCH_BIN:-}" ]]; then
    command -v cargo >/dev/null || missing "cargo not found: build the agent elsewhere and set COMMWATCH_BIN"
fi
WORK=$(mktemp -d)
AGENT_PID=""
cleanup() {
    if [[ -n "$AGENT_PID" ]]; then kill "$AGENT_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== build"
if [[ -z "${COMMWATCH_BIN:-}" ]]; then cargo build --release --bin commwatch >/dev/null; fi
[[ -x "$BIN" ]] || missing "no agent binary at $BIN"

echo "== agent --once (twice)"
"$BIN" agent --once --node gpu-check --steps-udp off --steps-socket off >"$WORK/once1.json" 2>"$WORK/once1.log"
sleep 1
"$BIN" agent --once --node gpu-check --steps-udp off --steps-socket off >"$WORK/once2.json" 2>"$WORK/once2.log"

GPUS=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)
echo "nvidia-smi sees $GPUS GPU(s)"

python3 - "$WORK/once1.json" "$WORK/once2.json" "$GPUS" <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2])); gpus = int(sys.argv[3])
nv = [l for l in b["links"] if l["class"] == "nvlink"]
names = [s["name"] for s in b["sources"]]
assert "nvml" in names, f"nvml source missing: {names}"
seen = {s["labels"].get("gpu") for s in b["samples"] if s["metric"] == "gpu_utilization_ratio"}
assert len(seen) == gpus, f"GPU series for {len(seen)} GPUs, nvidia-smi has {gpus}"
for l in nv:
    assert l["attributes"].get("gpu_uuid", "").startswith("GPU-"), l
    assert l["state"] in ("up", "down"), l
    if l["state"] == "up":
        assert (l["capacity_bytes_per_second"] or 0) > 0, l
def totals(doc):
    return {(l["device"], l["port"]): (l["tx_bytes_total"], l["rx_bytes_total"])
            for l in doc["links"] if l["class"] == "nvlink" and l["tx_bytes_total"] is not None}
ta, tb = totals(a), totals(b)
for k, (tx, rx) in tb.items():
    if k in ta:
        assert tx >= ta[k][0] and rx >= ta[k][1], f"{k} went backwards: {ta[k]} -> {(tx, rx)}"
util = [s["value"] for s in b["samples"] if s["metric"] == "gpu_utilization_ratio"]
assert all(0 <= u <= 1 for u in util), util
print(f"ok: {len(nv)} NVLink link(s), {len(tb)} with byte counters, {gpus} GPU(s), "
      f"throughput source {sorted({l['attributes'].get('throughput_source') for l in nv})}")
PY

cat >"$WORK/matmul.py" <<'PY'
import sys, time, torch
n, iters = 8192, int(sys.argv[1]) if len(sys.argv) > 1 else 200
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(20):
    a @ b
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(iters):
    a @ b
torch.cuda.synchronize()
print(f"{time.perf_counter() - t:.6f}")
PY

run_loop() {
    local best=""
    for _ in 1 2 3; do
        local t
        t=$(python3 "$WORK/matmul.py" 300)
        if [[ -z "$best" ]] || python3 -c "import sys; sys.exit(0 if $t < $best else 1)"; then best=$t; fi
    done
    echo "$best"
}

nvml_p50() {
    # p50 of commwatch_agent_nvml_call_duration_seconds{call="field_values"} from the histogram buckets.
    curl -fsS "http://127.0.0.1:$1/metrics" | python3 -c '
import sys, re
b = []
for line in sys.stdin:
    m = re.match(r"commwatch_agent_nvml_call_duration_seconds_bucket\{call=\"field_values\",le=\"([^\"]+)\"\} (\S+)", line)
    if m: b.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
total = b[-1][1] if b else 0
print(next((f"{le*1e6:.0f} us" for le, c in b if total and c >= total / 2), "n/a"))'
}

echo "== overhead (matmul loop, best of 3)"
BASE=$(run_loop)
printf "%-22s %12s %10s %18s\n" "agent fast period" "loop (s)" "slowdown" "NVML field p50"
printf "%-22s %12s %10s %18s\n" "no agent" "$BASE" "-" "-"
for period in 50ms 10ms 2500us; do
    PORT=$((20000 + RANDOM % 20000))
    # 2.5 ms is below the agent's 5 ms floor: 20x runs at the floor and says so.
    p=$period; [[ "$p" == "2500us" ]] && p=5ms
    "$BIN" agent --node gpu-check --fast-period "$p" --http-listen "127.0.0.1:$PORT" \
        --steps-udp off --steps-socket off --collector http://127.0.0.1:9 >"$WORK/agent.log" 2>&1 &
    AGENT_PID=$!
    sleep 3
    T=$(run_loop)
    LAT=$(nvml_p50 "$PORT" || echo "n/a")
    kill "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=""
    SLOW=$(python3 -c "print(f'{($T / $BASE - 1) * 100:+.2f}%')")
    printf "%-22s %12s %10s %18s\n" "$p ($period asked)" "$T" "$SLOW" "$LAT"
done
echo "done"
