#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each) and prints executions and crashes per target.
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Seeds come from the test fixtures.
# Usage: scripts/fuzz.sh [seconds-per-target] [target...]
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(sysfs_values step_marker wire_decode nccl_tests nccl_log kineto baseline_request terminal_text)

# Real captures are read in place from the shared test data (beside the checkout, or COMMWATCH_SHARED_TESTDATA).
shared=${COMMWATCH_SHARED_TESTDATA:-../../shared/testdata}
[ -d "$shared" ] || echo "fuzz.sh: no shared test data at $shared (set COMMWATCH_SHARED_TESTDATA); fewer seeds" >&2

seed() { # target -> corpus dir with seeds
  local t=$1 dir=corpus/$1
  mkdir -p "$dir"
  case $t in
    sysfs_values) find ../agent/tests/fixtures "$shared/sysfs" -type f -size -2k -name '[a-z]*' 2>/dev/null | head -200 | while read -r f; do cp "$f" "$dir/$(echo "$f" | tr '/' '_')"; done || true ;;
    step_marker) printf '{"job":"4242","rank":3,"step":120,"phase":"end","time":1764460000.5,"samples":256}' >"$dir/m1" ;;
    nccl_tests) cp "$shared"/nccl/*perf* "$shared"/nccl/*allreduce* ../diagnose/tests/data/nccl/synth* "$dir/" 2>/dev/null || true ;;
    nccl_log) cp "$shared"/nccl/*debug* "$shared"/nccl/*fallback* "$dir/" 2>/dev/null || true ;;
    kineto) for f in "$shared"/kineto/*.json.gz; do gzip -dc "$f" | head -c 200000 >"$dir/$(basename "$f" .gz)"; done 2>/dev/null || true ;;
    wire_decode) : ;;
    terminal_text) printf 'ok\x1b]0;owned\x07\x1b]8;;http://e\x1b\\x\x1b[2J\r\n\xc2\x9b31m' >"$dir/t1" ;;
    baseline_request) printf '{"job":"llm-7","source_file":"a.txt","tests":[{"collective":"all_reduce_perf","nranks":16,"peak_busbw_gbps":190.5,"avg_busbw_gbps":150}]}\xff{"job":"j","gpus":8,"samples_per_second_per_gpu":100.0}\xff{"tests":[{"collective":"all_reduce","peak_busbw_gbps":1e300}]}' >"$dir/b1" ;;
  esac
}

for t in "${targets[@]}"; do
  seed "$t"
  log=$(mktemp)
  status=0
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -max_len=65536 >"$log" 2>&1 || status=$?
  execs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | tail -1 || true)
  [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
  crashes=$(find artifacts/"$t" -type f 2>/dev/null | wc -l)
  printf '%-14s %6ss  executions %-10s  exit %s  crash artifacts %s\n' "$t" "$secs" "${execs:-?}" "$status" "$crashes"
  if [ "$status" -ne 0 ]; then tail -30 "$log"; fi
  rm -f "$log"
done
