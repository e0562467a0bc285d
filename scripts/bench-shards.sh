#!/usr/bin/env bash
# Collector load with the load generator: NODES simulated nodes (the sim's demo node shape, default rates)
# against SHARDS collectors, each pinned to its own core; the generator on the next core (one shard) or on
# every core (several: a 2-core machine has no spare one). Prints the generator's report (ack latency per
# shard, keeps up or not, streams reopened during the warm-up), then per shard: the connections and streams it
# refused, series per node in /metrics, the store's bytes per node, the collector's CPU seconds per million
# samples and its passes' time per node, and the load average before and after, and how often each pass
# completed during the measured window.
#
#   cargo build --release --bin commwatch && cargo build --release -p commwatch-sim --bin loadgen
#   scripts/bench-shards.sh NODES [SHARDS=1] [SECS=60]        (env: WARMUP=15, BASE_PORT=17100, EXTRA=...,
#                                                              SCRAPE_EVERY=15, CAPTURE=5, GEN_EXTRA=...,
#                                                              STATE=1)
#
# Each collector runs as operators run it, with its state directory (SQLite persistence: every batch is
# committed before it is acknowledged as durable, findings and baselines kept) in the run's temporary directory;
# STATE=0 runs them without one (memory only).
#
# Per shard it also prints each job's evaluation age (commwatch_collector_evaluation_age_seconds, read at every
# scrape of the window: p50, p99 and max over jobs and scrapes) and the collector's CPU over the measured window
# by stage, from its threads' names (/proc/PID/task/*/stat), in microseconds per node and second of data:
# the tokio threads (gRPC, validation and the store's apply, the persistence writer), commwatch-analy(sis),
# commwatch-steps, commwatch-prom (the /metrics render), analysis-histor(y) and the rest; and the same from the
# collector's own commwatch_collector_stage_cpu_seconds_total.
#
# EXTRA goes to each collector's command line, GEN_EXTRA to the generator's (e.g. `--batch-period 1s`, the
# agents' batch period; then CAPTURE=12, seconds of the real agent recorded, so that it holds several batches).
#
# During the measured window each shard's /metrics is scraped every SCRAPE_EVERY seconds with gzip, as a
# Prometheus at its default interval would (deploy/prometheus/prometheus.yml's global 15 s; 0: no scrapes), and
# the report says how long the scrapes took and how many took longer than the interval (Prometheus' timeout
# then).
set -euo pipefail
nodes=${1:?NODES}
shards=${2:-1}
secs=${3:-60}
warmup=${WARMUP:-15}
capture=${CAPTURE:-5}
scrape_every=${SCRAPE_EVERY:-15}
state=${STATE:-1}
base=${BASE_PORT:-17100}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${COMMWATCH_BIN:-$root/target/release/commwatch}
gen=${LOADGEN_BIN:-$root/target/release/loadgen}
[ -x "$bin" ] && [ -x "$gen" ] || { echo "build first: see the header of $0" >&2; exit 2; }
cores=$(nproc)
work=$(mktemp -d)
# CPU ticks (user + system) of each thread name of process $1, one "name ticks" line per name.
thread_cpu() {
  for f in /proc/"$1"/task/*/stat; do
    awk '{ name = $2; gsub(/[()]/, "", name); print name, $14 + $15 }' "$f" 2>/dev/null
  done | awk '{ t[$1] += $2 } END { for (n in t) print n, t[n] }'
}
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

urls=()
for ((k = 0; k < shards; k++)); do
  grpc=$((base + k)); http=$((base + 100 + k)); core=$((k % cores))
  state_args=()
  [ "$state" = 1 ] && state_args=(--state-dir "$work/state-$k")
  taskset -c "$core" "$bin" collector --grpc-listen "127.0.0.1:$grpc" --http-listen "127.0.0.1:$http" \
    "${state_args[@]}" ${EXTRA:-} >"$work/collector-$k.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$grpc")
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
done
if [ "$shards" -eq 1 ] && [ "$cores" -gt 1 ]; then gen_cores=1; else gen_cores=0-$((cores - 1)); fi
echo "== $nodes nodes, $shards shard(s) on cores 0..$((shards - 1)), generator on cores $gen_cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
list=$(IFS=,; echo "${urls[*]}")
pidlist=$(IFS=,; echo "${pids[*]}")
# From the start of the measured window (after the capture (CAPTURE s) and the warm-up): Prometheus' scrapes, every
# SCRAPE_EVERY seconds, the first of them kept as the passes' counters at the window's start (so that their
# refresh during the window is read apart from the ramp); with SCRAPE_EVERY=0 that one scrape alone.
for ((k = 0; k < shards; k++)); do
  (
    sleep $((capture + warmup))
    end=$((SECONDS + secs))
    out="$work/metrics-start-$k.txt"
    thread_cpu "${pids[$k]}" >"$work/threads-start-$k.txt"
    while :; do
      started=$SECONDS
      curl -s --compressed -o "$out" --max-time 60 -w '%{time_total} %{http_code}\n' \
        "http://127.0.0.1:$((base + 100 + k))/metrics" >>"$work/scrapes-$k.txt" || echo "60 timeout" >>"$work/scrapes-$k.txt"
      grep '^commwatch_collector_evaluation_age_seconds' "$out" >>"$work/ages-$k.txt" 2>/dev/null || true
      out="$work/metrics-scrape-$k.txt"
      [ "$scrape_every" -gt 0 ] && [ "$SECONDS" -lt "$end" ] || break
      left=$((scrape_every - (SECONDS - started)))
      [ "$left" -gt 0 ] && sleep "$left"
      [ "$SECONDS" -lt "$end" ] || break
    done
  ) &
done
taskset -c "$gen_cores" "$gen" --collector "$list" --nodes "$nodes" --secs "$secs" --warmup "$warmup" --capture "${capture}s" \
  --pid "$pidlist" ${GEN_EXTRA:-}
for ((k = 0; k < shards; k++)); do thread_cpu "${pids[$k]}" >"$work/threads-end-$k.txt"; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((k = 0; k < shards; k++)); do
  http=$((base + 100 + k))
  curl -s "http://127.0.0.1:$http/metrics" >"$work/metrics-$k.txt" || true
  held=$(grep -c '^commwatch_[a-z_]*{[^}]*node="load-' "$work/metrics-$k.txt" || true)
  nodes_here=$(grep -o 'node="load-[0-9]*"' "$work/metrics-$k.txt" | sort -u | wc -l)
  one=$(grep -o -m1 'node="load-[0-9]*"' "$work/metrics-$k.txt" || true)
  per_node=$(grep -c "${one:-none}" "$work/metrics-$k.txt" || true)
  store=$(grep '^commwatch_collector_store_bytes' "$work/metrics-$k.txt" | tr '\n' ' ')
  echo "shard $k: $nodes_here nodes in /metrics, $held node series ($per_node for one node), $(wc -c <"$work/metrics-$k.txt") bytes of /metrics; $store"
  # Connections and streams the collector refused over the whole run, by reason (limits, handshakes not finished
  # in time, Hellos it rejected): the generator reopens a stream that failed during the warm-up.
  for family in grpc_connections_refused rejected_streams; do
    refused=$(awk -v f="commwatch_collector_${family}_total{" 'index($0, f) == 1 && $2 > 0 {
        match($0, /reason="[a-z_0-9]*"/); printf " %s %d", substr($0, RSTART + 8, RLENGTH - 9), $2 }' "$work/metrics-$k.txt")
    echo "shard $k: ${family//_/ }:${refused:- none}"
  done
  # CPU per work over the whole run (warm-up included): the collector's CPU seconds (/proc, user + system) per
  # million samples it accepted, and its passes' time per node (commwatch_collector_pass_seconds).
  ticks=$(getconf CLK_TCK)
  cpu_s=$(awk -v t="$ticks" '{ printf "%.2f", ($14 + $15) / t }' "/proc/${pids[$k]}/stat" 2>/dev/null || echo 0)
  samples=$(awk '/^commwatch_collector_samples_total /{ printf "%.0f", $2 }' "$work/metrics-$k.txt")
  awk -v c="$cpu_s" -v s="${samples:-0}" -v k="$k" 'BEGIN { if (s > 0) printf "shard %s: collector CPU %.2f s for %.1f M samples: %.3f CPU s per million samples\n", k, c, s / 1e6, c / (s / 1e6) }'
  awk -v k="$k" '
    /^commwatch_collector_pass_seconds_sum/ { match($0, /pass="[a-z_]*"/); p = substr($0, RSTART + 6, RLENGTH - 7); sum[p] = $2 }
    /^commwatch_collector_pass_seconds_count/ { match($0, /pass="[a-z_]*"/); p = substr($0, RSTART + 6, RLENGTH - 7); cnt[p] = $2 }
    /^commwatch_collector_pass_nodes_total/ { match($0, /pass="[a-z_]*"/); p = substr($0, RSTART + 6, RLENGTH - 7); nodes[p] = $2 }
    /^commwatch_collector_pass_cpu_seconds_total/ { match($0, /pass="[a-z_]*"/); p = substr($0, RSTART + 6, RLENGTH - 7); cpu[p] = $2 }
    /^commwatch_collector_ingest_seconds_sum/ { isum = $2 } /^commwatch_collector_ingest_seconds_count/ { icnt = $2 }
    END {
      for (p in sum) if (nodes[p] > 0) printf "shard %s: pass %s: %d passes over %d nodes in all, %.1f ms per pass; per node %.1f us wall, %.1f us CPU\n", k, p, cnt[p], nodes[p], 1e3 * sum[p] / cnt[p], 1e6 * sum[p] / nodes[p], 1e6 * cpu[p] / nodes[p]
      if (icnt > 0) printf "shard %s: ingest (validate + apply): %.1f us per batch over %d batches\n", k, 1e6 * isum / icnt, icnt
    }' "$work/metrics-$k.txt"
  # Passes completed within the measured window: how often each refreshed while the load ran.
  [ -s "$work/metrics-start-$k.txt" ] && awk -v k="$k" -v secs="$secs" '
    /^commwatch_collector_pass_seconds_count/ || /^commwatch_collector_pass_nodes_total/ {
      match($0, /pass="[a-z_]*"/); p = substr($0, RSTART + 6, RLENGTH - 7)
      v = (FNR == NR) ? -$2 : $2
      if ($1 ~ /_count/) cnt[p] += v; else nodes[p] += v
    }
    END {
      # An interval only from three passes or more: one or two in the window do not say how far apart they are.
      for (p in cnt) {
        if (cnt[p] >= 3) printf "shard %s: pass %s in the measured %d s: %d passes over %.0f nodes each, one every %.1f s\n", k, p, secs, cnt[p], nodes[p] / cnt[p], secs / cnt[p]
        else if (cnt[p] > 0) printf "shard %s: pass %s in the measured %d s: %d pass(es) over %.0f nodes each\n", k, p, secs, cnt[p], nodes[p] / cnt[p]
        else printf "shard %s: pass %s in the measured %d s: none completed\n", k, p, secs
      }
    }' "$work/metrics-start-$k.txt" "$work/metrics-$k.txt"
  [ "$scrape_every" -gt 0 ] && [ -s "$work/scrapes-$k.txt" ] && sort -n "$work/scrapes-$k.txt" | awk -v k="$k" -v every="$scrape_every" '
    { t[NR] = $1; if ($2 != "200") bad++; if ($1 > every) slow++ }
    END { printf "shard %s: %d scrapes of /metrics (every %d s, gzip): median %.2f s, max %.2f s; %d longer than %d s, %d failed\n", k, NR, every, t[int((NR + 1) / 2)], t[NR], slow, every, bad }'
  [ -s "$work/ages-$k.txt" ] && awk '{ print $2 }' "$work/ages-$k.txt" | sort -g | awk -v k="$k" '
    { a[NR] = $1 }
    END { printf "shard %s: evaluation age over %d job readings at the scrapes: p50 %.2f s, p99 %.2f s, max %.2f s\n", k, NR, a[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))], a[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))], a[NR] }'
  # CPU per stage over the measured window (threads by name), per node and second of data.
  [ -s "$work/threads-start-$k.txt" ] && awk -v k="$k" -v t="$(getconf CLK_TCK)" -v n="$nodes_here" -v secs="$secs" '
    FNR == NR { start[$1] = $2; next }
    { d[$1] = $2 - start[$1]; all += d[$1] }
    END {
      if (n == 0) n = 1
      printf "shard %s: collector CPU over the window %.2f cores; per node and second:", k, all / t / secs
      for (name in d) if (d[name] > 0) printf " %s %.1f us", name, 1e6 * d[name] / t / secs / n
      printf " (all %.1f us)\n", 1e6 * all / t / secs / n
    }' "$work/threads-start-$k.txt" "$work/threads-end-$k.txt"
  # The same from the collector's own metric (commwatch_collector_stage_cpu_seconds_total, by stage), between the
  # window's first scrape and the one after the generator ended.
  [ -s "$work/metrics-start-$k.txt" ] && awk -v k="$k" -v n="$nodes_here" -v secs="$secs" '
    /^commwatch_collector_stage_cpu_seconds_total\{/ {
      match($0, /stage="[a-z_]*"/); s = substr($0, RSTART + 7, RLENGTH - 8)
      v[s] += (FNR == NR) ? -$2 : $2; seen = 1
    }
    END {
      if (!seen) exit
      if (n == 0) n = 1
      printf "shard %s: stage CPU (metric) per node and second:", k
      for (s in v) if (v[s] > 0) { printf " %s %.1f us", s, 1e6 * v[s] / secs / n; all += v[s] }
      printf " (all %.1f us)\n", 1e6 * all / secs / n
    }' "$work/metrics-start-$k.txt" "$work/metrics-$k.txt"
  grep -m5 -E ' (WARN|ERROR) ' "$work/collector-$k.log" || true
done
