"""A data-parallel training loop for the real-traffic test bed, on torch.distributed with gloo (CPU).

Each step computes (matrix products sized by time) and all-reduces a gradient of --bytes bytes: at once after
the compute, or with --buckets B > 1 as DDP does, B buckets each all-reduced asynchronously as soon as its slice
of the "backward" compute is done while the rest of the compute goes on.

The truth: one JSON line per step to <--truth>-rank<R>.jsonl with the step's wall-clock edges (CLOCK_REALTIME, ns), the
all-reduce's duration, and the kernel's counters at each edge (`/sys/class/net/{fab0,mgmt0}/statistics/
{tx,rx}_bytes` of this node's network namespace, TCP RetransSegs from /proc/net/snmp) -- the same format as
allreduce_mpi.c.

Rank, world size and rendezvous come from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); the
interface is gloo's choice: GLOO_SOCKET_IFNAME when set, else the address this host's name resolves to.
--markers sends commwatch_steps markers (the client in clients/python must be importable).
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist


def read_counter(iface, name):
    try:
        with open(f"/sys/class/net/{iface}/statistics/{name}") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return -1


def read_retrans():
    try:
        with open("/proc/net/snmp") as f:
            lines = [l.split() for l in f if l.startswith("Tcp:")]
        head, vals = lines[0], lines[1]
        return int(vals[head.index("RetransSegs")])
    except (OSError, ValueError, IndexError):
        return -1


def counters():
    return {
        "fab0_tx": read_counter("fab0", "tx_bytes"),
        "fab0_rx": read_counter("fab0", "rx_bytes"),
        "mgmt0_tx": read_counter("mgmt0", "tx_bytes"),
        "mgmt0_rx": read_counter("mgmt0", "rx_bytes"),
        "retrans": read_retrans(),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, default=32 << 20)
    p.add_argument("--compute-ms", type=float, default=400)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--buckets", type=int, default=1)
    p.add_argument("--truth", required=True)
    p.add_argument("--job", default=None)
    p.add_argument("--markers", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=__import__("datetime").timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    job = a.job or f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    marker = None
    if a.markers:
        import commwatch_steps

        # The agent's socket path of this node (COMMWATCH_STEPS_SOCKET) or loopback UDP; the job as the agent
        # names it.
        marker = commwatch_steps.StepMarker(job=job, rank=rank).send

    m = torch.randn(128, 128)

    def unit():
        return torch.mm(m, m)

    # Calibrate under the same sharing of cores as the loop (after a warm-up: the first products are slow),
    # over at least 0.3 s; every rank takes the median rank's figure. Not the slowest: one rank starved of CPU
    # while it calibrates would read a unit many times its cost in the loop and leave the job almost no compute.
    for _ in range(20):
        unit()
    dist.barrier()
    t0, n = time.perf_counter(), 0
    while n < 20 or time.perf_counter() - t0 < 0.3:
        unit()
        n += 1
    per = torch.tensor([(time.perf_counter() - t0) / n])
    every = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(every, per)
    median_per = sorted(p.item() for p in every)[world // 2]
    units = max(2 * a.buckets, int(round(a.compute_ms / 1000 / median_per)))
    grad = torch.ones(a.bytes // 4)
    buckets = list(torch.chunk(grad, a.buckets))
    host = socket.gethostname()
    dist.barrier()
    with open(f"{a.truth}-rank{rank}.jsonl", "w") as out:
        for s in range(a.steps):
            c0 = counters()
            start = time.time_ns()
            if marker:
                marker(s, "begin")
            if a.buckets == 1:
                for _ in range(units):
                    unit()
                cc = counters()
                comm_start = time.time_ns()
                dist.all_reduce(grad)
                comm_end = time.time_ns()
            else:
                fwd = units // 2
                per_bucket = (units - fwd) // a.buckets
                for _ in range(fwd):
                    unit()
                cc = counters()
                comm_start = None
                works = []
                for b in reversed(buckets):
                    for _ in range(per_bucket):
                        unit()
                    if comm_start is None:
                        comm_start = time.time_ns()
                    works.append(dist.all_reduce(b, async_op=True))
                for w in works:
                    w.wait()
                comm_end = time.time_ns()
            end = time.time_ns()
            c1 = counters()
            if marker:
                marker(s, "end")
            rec = {
                "lib": "torch", "job": job, "rank": rank, "world": world, "node": host, "step": s,
                "bytes": a.bytes, "buckets": a.buckets, "start_ns": start, "comm_start_ns": comm_start,
                "end_ns": end, "allreduce_ns": comm_end - comm_start,
                "edge_start": c0, "edge_comm": cc, "edge_end": c1,
            }
            out.write(json.dumps(rec) + "\n")
            out.flush()
            grad.fill_(1.0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
