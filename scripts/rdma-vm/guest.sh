#!/usr/bin/env bash
# Runs inside the guest that scripts/rdma-vm.sh boots (as root, the host's filesystem read-only, OUT shared
# read-write): Soft-RoCE on a veth pair, then the RDMA probe, perftest on the same devices, the RDMA test binary
# and `agent --once`. Writes key=value figures to OUT/figures and each tool's output beside it; never fails
# silently: a step that fails writes `error=<why>` and the script goes on to the next where it can.
# Usage: guest.sh OUT COMMWATCH_BINARY TEST_BINARY MODE REPS   (MODE: full | ci; REPS: repetitions in full)
set -u
out=$1 bin=$2 testbin=$3 mode=$4 reps=$5
fig=$out/figures
note() { echo "$1" >>"$fig"; }
fail() { note "error=$1"; exit 1; }

note "booted_after_s=$(cut -d' ' -f1 /proc/uptime)"
note "kernel=$(uname -r)"
# What a clock read costs depends on it: a system call and an emulated device read unless it is the TSC.
note "clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
t0=$(date +%s.%N)

modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
modprobe veth || fail "modprobe veth failed"
ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
ip link set lo up
ip link set veth0 up && ip link set veth1 up || fail "cannot bring the veth pair up"
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 failed"
rdma link add rxe1 type rxe netdev veth1 || fail "rdma link add rxe1 failed"
# GID 0 (the link-local address, from the MAC) is what both the probe and perftest use (-x 0).
for d in rxe0 rxe1; do
  for _ in $(seq 50); do
    state=$(cat /sys/class/infiniband/$d/ports/1/state 2>/dev/null)
    [[ $state == *ACTIVE* ]] && break
    sleep 0.1
  done
  [[ $state == *ACTIVE* ]] || fail "$d port 1 is not ACTIVE ($state)"
done
rdma link >"$out/rdma-link.txt" 2>&1

# The probe: rxe1 answers, rxe0 asks; 127.0.0.1 carries only the control connection.
"$bin" probe serve --listen 127.0.0.1:9476 --device rxe1 >"$out/serve.log" 2>&1 &
serve=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/9476) 2>/dev/null && break
  sleep 0.1
done
# CPU ticks (1/100 s) the kernel's softirq threads have run so far: packet work the kernel deferred from the
# interrupted context to ksoftirqd, which waits for a CPU while busy pollers hold them.
ksoftirqd_ticks() {
  local p t=0
  for p in $(pgrep ksoftirqd); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$t"
}
probe() { # NAME SIZE DURATION
  if timeout 90 "$bin" probe run --target 127.0.0.1:9476 --transport rdma --device rxe0 --size "$2" \
    --duration "$3" --format json >"$out/probe-$1.json" 2>"$out/probe-$1.err"; then
    note "probe_$1=ok"
    note "ksoftirqd_ticks_after_probe_$1=$(ksoftirqd_ticks)"
  else
    note "probe_$1=failed: $(tail -1 "$out/probe-$1.err")"
  fi
}
# A count of iterations (-n), not a duration: under emulation ib_write_bw's duration mode (-D) can print 0.00.
# Waits until a perftest server listens on PORT (its out-of-band connection), at most 10 s.
listening() {
  for _ in $(seq 100); do
    ss -Hltn "sport = :$1" | grep -q . && return 0
    sleep 0.1
  done
  return 1
}
perftest_bw() { # NAME SERVER_DEV CLIENT_DEV SIZE ITERATIONS
  ib_write_bw -d "$2" -x 0 -s "$4" -n "$5" -F -p 18515 >"$out/perftest-$1-server.txt" 2>&1 &
  local s=$!
  listening 18515
  if timeout 60 ib_write_bw -d "$3" -x 0 -s "$4" -n "$5" -F -p 18515 127.0.0.1 >"$out/perftest-$1.txt" 2>&1; then
    note "perftest_$1=ok"
  else
    note "perftest_$1=failed: $(tail -1 "$out/perftest-$1.txt")"
    kill "$s" 2>/dev/null # a server whose client never came waits for ever
  fi
  wait "$s" 2>/dev/null
}
perftest_lat() { # NAME
  ib_send_lat -d rxe1 -x 0 -s 8 -n 2000 -F -p 18516 >"$out/perftest-$1-server.txt" 2>&1 &
  local s=$!
  listening 18516
  note "ksoftirqd_ticks_before_perftest_$1=$(ksoftirqd_ticks)"
  if timeout 60 ib_send_lat -d rxe0 -x 0 -s 8 -n 2000 -F -p 18516 127.0.0.1 >"$out/perftest-$1.txt" 2>&1; then
    note "perftest_$1=ok"
    note "ksoftirqd_ticks_after_perftest_$1=$(ksoftirqd_ticks)"
  else
    note "perftest_$1=failed: $(tail -1 "$out/perftest-$1.txt")"
    kill "$s" 2>/dev/null # a server whose client never came waits for ever
  fi
  wait "$s" 2>/dev/null
}

note "ksoftirqd_ticks_before_probes=$(ksoftirqd_ticks)"
if [ "$mode" = ci ]; then
  # The default 1 MiB messages: the case that failed before the window followed the rate.
  probe default-1 1048576 4s
else
  # Probe and perftest alternate, each repeated, so a slow spell of the emulation falls on both alike; the
  # report takes medians. Each direction separately: rxe0 -> rxe1 is the probe's tx (up), perftest with
  # rxe0 as its client; rxe1 -> rxe0 the probe's rx (down).
  for r in $(seq "$reps"); do
    probe "64k-$r" 65536 5s
    perftest_bw "write-64k-up-$r" rxe1 rxe0 65536 300
    perftest_bw "write-64k-down-$r" rxe0 rxe1 65536 300
    perftest_lat "lat-$r"
    probe "default-$r" 1048576 5s
    perftest_bw "write-1m-up-$r" rxe1 rxe0 1048576 20
    perftest_bw "write-1m-down-$r" rxe0 rxe1 1048576 20
  done
fi

# The end-to-end test that needs an RDMA device (ignored on hosts without one).
if timeout 120 "$testbin" --ignored --exact rdma_probe_on_loopback --nocapture >"$out/test.txt" 2>&1; then
  note "test_rdma_probe_on_loopback=ok"
else
  note "test_rdma_probe_on_loopback=failed: $(grep -m1 -E 'panicked|error' "$out/test.txt")"
fi

if [ "$mode" = full ]; then
  # The agent while probes run back to back, so the port's counters move between its two fast ticks (200 ms
  # apart) whenever its slow start under emulation ends; the port's own files are read just before and after.
  ( while [ ! -e "$out/stop-probes" ]; do
      timeout 60 "$bin" probe run --target 127.0.0.1:9476 --transport rdma --device rxe0 --size 65536 \
        --duration 10s --format json >>"$out/probe-during-once.json" 2>&1
    done ) &
  loop=$!
  sleep 3
  t1=$(date +%s.%N)
  sent1=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts)
  if timeout 120 "$bin" agent --once --node guest --sysfs-root /sys --procfs-root /proc --fast-period 200ms \
    >"$out/once.json" 2>"$out/once.err"; then
    note "agent_once=ok"
  else
    note "agent_once=failed: $(tail -1 "$out/once.err")"
  fi
  sent2=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts)
  t2=$(date +%s.%N)
  note "rxe0_sent_pkts_per_s_around_once=$(awk -v a="$sent1" -v b="$sent2" -v s="$t1" -v e="$t2" \
    'BEGIN { printf "%.0f", (b - a) / (e - s) }')"
  note "agent_once_s=$(awk -v s="$t1" -v e="$t2" 'BEGIN { printf "%.1f", e - s }')"
  touch "$out/stop-probes"
  wait "$loop" 2>/dev/null
  # What the agent read is checked against the source: the port's own files.
  for f in sent_pkts rcvd_pkts; do note "rxe0_hw_$f=$(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$f)"; done
  note "rxe0_has_counters_dir=$([ -d /sys/class/infiniband/rxe0/ports/1/counters ] && echo yes || echo no)"
fi

kill "$serve" 2>/dev/null
wait "$serve" 2>/dev/null
note "check_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
note "done=1"
