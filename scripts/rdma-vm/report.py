#!/usr/bin/env python3
"""Prints the figures of a scripts/rdma-vm.sh run from the guest's outputs, and exits non-zero with one line
saying why when a check failed.

Usage: report.py OUT MODE ACCEL WALL_SECONDS

Units: bandwidth in MB/s (10^6 bytes per second). perftest's bandwidth is taken from its message rate (Mpps,
10^6 messages per second) times the message size, which needs no assumption about its "MB". perftest's
latency tests report half a round trip; the probe reports whole round trips, so the probe's quantiles are
halved for the comparison (both columns are printed).
"""

import json
import sys
from pathlib import Path


def figures(out):
    """The guest's key=value lines (the last value of a key wins)."""
    f = {}
    path = out / "figures"
    for line in path.read_text().splitlines() if path.exists() else []:
        if "=" in line:
            k, v = line.split("=", 1)
            f[k] = v
    return f


def perftest_bw(path, size):
    """Bytes per second of an ib_write_bw client's output (its average; perftest's MB is 2^20 bytes), or None
    when absent or 0.00 (which ib_write_bw can print under emulation)."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        cols = line.split()
        if len(cols) == 5 and cols[0] == str(size):
            try:
                bps = float(cols[3]) * 1048576
            except ValueError:
                return None
            return bps if bps > 0 else None
    return None


def perftest_lat(path):
    """(typical, p99) in seconds of an ib_send_lat client's output (half round trips); None when absent."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[0] == "8":
            try:
                return float(cols[4]) * 1e-6, float(cols[7]) * 1e-6
            except ValueError:
                return None
    return None


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def load_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def mb(x):
    return "-" if x is None else f"{x / 1e6:.1f}"


def us(x):
    return "-" if x is None else f"{x * 1e6:.0f}"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return "-"
    r = a / b
    return f"{r:.2f} ({'within' if abs(r - 1) <= 0.2 else 'outside'} 20 %)"


def reps(out, pattern):
    """The repetition numbers of files named like `pattern` (with {r}), in order."""
    found = []
    r = 1
    while (out / pattern.format(r=r)).exists():
        found.append(r)
        r += 1
    return found


def each(xs, unit):
    return ", ".join("-" if x is None else unit(x) for x in xs)


def bandwidth_lines(out, name, size, tag):
    """Median probe and perftest bandwidth each way over the repetitions, with every repetition's figure."""
    rs = reps(out, f"probe-{name}-{{r}}.json")
    if not rs:
        return [], []
    probes = [load_json(out / f"probe-{name}-{r}.json") for r in rs]
    tx = [p["tx_bytes_per_second"] if p else None for p in probes]
    rx = [p["rx_bytes_per_second"] if p else None for p in probes]
    up = [perftest_bw(out / f"perftest-write-{tag}-up-{r}.txt", size) for r in rs]
    down = [perftest_bw(out / f"perftest-write-{tag}-down-{r}.txt", size) for r in rs]
    mbs = lambda x: f"{x / 1e6:.1f}"
    lines = [f"bandwidth, {size} B messages, median of {len(rs)} (each run in MB/s, 10^6 B/s):"]
    for label, p, q in (("rxe0 -> rxe1", tx, up), ("rxe1 -> rxe0", rx, down)):
        mp, mq = median(p), median(q)
        lines.append(f"  {label}  probe {mb(mp)} MB/s [{each(p, mbs)}]  perftest {mb(mq)} MB/s "
                     f"[{each(q, mbs)}]  probe/perftest {ratio(mp, mq)}")
    return lines, [p for p in probes if p]


def once_lines(out):
    doc = load_json(out / "once.json")
    if doc is None:
        return ["agent --once: no document"]
    lines = ["agent --once on the guest:"]
    links = {(l["device"], l["port"]): l for l in doc["links"]}
    rxe0 = links.get(("rxe0", "1"))
    if rxe0:
        hw = [s["metric"] for s in doc["inventory"]["series"]
              if s["device"] == "rxe0" and s["metric"].startswith("hw_")]
        lines.append(
            f"  rxe0 port 1: class {rxe0['class']}, role {rxe0['role']}, state {rxe0['state']}, "
            f"{len(hw)} hw_counters, byte_counters={rxe0['attributes'].get('byte_counters', 'present')}")
        lines.append(
            f"  rxe0 bytes: tx_total {fmt(rxe0['tx_bytes_total'])}, tx/s {fmt(rxe0['tx_bytes_per_second'])}; packets: "
            f"tx_total {rxe0.get('tx_packets_total')}, tx/s {fmt(rxe0.get('tx_packets_per_second'))}, "
            f"rx/s {fmt(rxe0.get('rx_packets_per_second'))}")
    else:
        lines.append("  rxe0: not listed")
    for nd in ("veth0", "veth1"):
        l = links.get((nd, nd))
        lines.append(f"  {nd}: " + (f"read, role {l['role']}, tx/s {fmt(l['tx_bytes_per_second'])} B/s"
                                    if l else "not read"))
    for w in doc["warnings"]:
        if w["code"] in ("no_byte_counters", "interfaces_left_out", "speed_unknown"):
            lines.append(f"  warning {w['code']} ({w['level']}): {w['message']}")
    return lines


def fmt(x):
    return "null" if x is None else f"{x:.0f}"


def main():
    out, mode, accel, wall = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    f = figures(out)
    print(f"== RDMA in a VM ({accel}), kernel {f.get('kernel', '?')}, clock source {f.get('clocksource') or '?'}")
    boot = f.get("booted_after_s")
    print(f"boot {float(boot):.1f} s (guest uptime at its first command); checks {f.get('check_s', '?')} s; "
          f"whole run {wall:.1f} s")
    lines64, probes64 = bandwidth_lines(out, "64k", 65536, "64k")
    lines1m, probes1m = bandwidth_lines(out, "default", 1048576, "1m")
    print("\n".join(lines64 + lines1m))
    rs = reps(out, "perftest-lat-{r}.txt")
    lat = [perftest_lat(out / f"perftest-lat-{r}.txt") for r in rs]
    p50 = median([p["latency_p50_seconds"] for p in probes64 + probes1m])
    p99 = median([p["latency_p99_seconds"] for p in probes64 + probes1m])
    line = (f"latency, 8 B ping-pong, median over {len(probes64 + probes1m)} probe runs: round trip p50 {us(p50)} us, "
            f"p99 {us(p99)} us")
    if lat and any(lat):
        t50 = median([l[0] for l in lat if l])
        t99 = median([l[1] for l in lat if l])
        half = None if p50 is None else p50 / 2
        line += (f"; half a round trip p50 {us(half)} us vs ib_send_lat typical {us(t50)} us (probe/perftest "
                 f"{ratio(half, t50)}), p99 {us(None if p99 is None else p99 / 2)} us vs {us(t99)} us")
    print(line)
    if mode == "full":
        print("\n".join(once_lines(out)))
        print(f"  agent --once took {f.get('agent_once_s')} s; rxe0's own sent_pkts moved "
              f"{f.get('rxe0_sent_pkts_per_s_around_once')} packets/s on average meanwhile")
        print(f"  the port's own hw_counters after the run: sent_pkts {f.get('rxe0_hw_sent_pkts')}, "
              f"rcvd_pkts {f.get('rxe0_hw_rcvd_pkts')}; ports/1/counters/ present: "
              f"{f.get('rxe0_has_counters_dir')}")
    failed = [f"{k}: {v}" for k, v in f.items() if v.startswith("failed") or k == "error"]
    print("passed: " + ", ".join(k for k, v in f.items() if v == "ok"))
    if failed:
        print(f"rdma-vm: {'; '.join(failed)}", file=sys.stderr)
        sys.exit(1)
    if f.get("done") != "1":
        print("rdma-vm: the guest stopped before its checks ended (time limit?)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
