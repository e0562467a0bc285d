#!/usr/bin/env python3
"""The test bed's evaluator, computed apart from commwatch's code (standard library only).

  evaluate.py wait --url URL --nodes N [--timeout S]     until the collector answers and knows N nodes
  evaluate.py poll --url URL --nodes N --out DIR          snapshots of the API every --interval s until SIGTERM
  evaluate.py report --out DIR [--json]                   one scenario's figures and goals against the truth
  evaluate.py summary DIR                                 one line per scenario of a run
  evaluate.py table DIR...                                a markdown table of the runs' figures (REALITY.md)

The truth is the job's own log (truth/<job>-rank<r>.jsonl, one line per step: wall-clock edges in ns, the
kernel's counters of the node at each edge); the bed writes scenario.json, jobs.jsonl and faults.jsonl beside
it. What commwatch says comes from the snapshots under api/: every poll is kept raw (api/<name>.jsonl, one
{"t", "status", "body"} per line) and the last one also as api/final-<name>.json. The evaluator never trusts
the API's shape: a missing key, a wrong type or an error answer is counted and reported, never a crash.
"""

import argparse
import json
import math
import os
import signal
import statistics
import sys
import time
import urllib.error
import urllib.request

TRAFFIC_KINDS_BY_FAULT = {
    # Finding kinds that name each fault from traffic (the environment-variable rule, nccl_misconfiguration,
    # is never counted: the goal is "from traffic alone").
    "management": {"management_network_traffic"},
    "ratecut": {"transmit_queue_backlog", "link_degraded", "congestion", "link_underutilized", "straggler"},
    "loss": {"link_errors", "tcp_retransmits", "congestion", "link_degraded"},
    "straggler": {"straggler", "cpu_bound"},
}
ENV_KINDS = {"nccl_misconfiguration"}


# ------------------------------------------------------------------------------------------------ helpers

def get(obj, *path, default=None):
    """obj[path[0]][path[1]]..., or default when any step is missing or of the wrong type."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or not -len(obj) <= key < len(obj):
                return default
        elif not isinstance(obj, dict) or key not in obj:
            return default
        obj = obj[key]
    return obj


def num(value):
    """value as a finite float, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def pct_off(measured, truth):
    if measured is None or truth is None or truth == 0:
        return None
    return 100.0 * (measured - truth) / truth


def fmt(value, unit="", digits=2):
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def fetch(url, timeout=5.0):
    """(status, body): body parsed as JSON when it is JSON, else the text; status 0 when unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except (urllib.error.URLError, OSError, ValueError) as e:
        return 0, f"unreachable: {e}"
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def read_jsonl(path):
    """(records, bad line count); a missing file gives none."""
    out, bad = [], 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
                else:
                    bad += 1
    except OSError:
        pass
    return out, bad


def read_json(path, default=None):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


# --------------------------------------------------------------------------------------------- wait, poll

def cmd_wait(a):
    deadline = time.time() + a.timeout
    while time.time() < deadline:
        if a.nodes == 0:
            status, _ = fetch(a.url + "/healthz", timeout=2)
            if status == 200:
                return 0
        else:
            status, body = fetch(a.url + "/api/v1/nodes", timeout=2)
            nodes = body if isinstance(body, list) else get(body, "nodes", default=[])
            names = {get(n, "name") for n in nodes if isinstance(n, dict)} if isinstance(nodes, list) else set()
            if status == 200 and len(names) >= a.nodes:
                return 0
        time.sleep(0.5)
    print(f"evaluate.py wait: {a.url} did not answer with {a.nodes} nodes within {a.timeout}s", file=sys.stderr)
    return 1


def endpoints(url, n):
    eps = {
        "findings": url + "/api/v1/findings?limit=1000",
        "jobs": url + "/api/v1/jobs",
        "nodes": url + "/api/v1/nodes",
    }
    for k in range(n):
        eps[f"steps-node{k}"] = url + f"/api/v1/steps?node=node{k}&limit=1000"
    return eps


def snapshot(eps, out_dir, final=False):
    t = time.time()
    for name, url in eps.items():
        status, body = fetch(url)
        with open(os.path.join(out_dir, f"{name}.jsonl"), "a") as f:
            f.write(json.dumps({"t": t, "status": status, "body": body}) + "\n")
        if final:
            with open(os.path.join(out_dir, f"final-{name}.json"), "w") as f:
                json.dump({"t": t, "status": status, "body": body}, f)


def cmd_poll(a):
    out_dir = os.path.join(a.out, "api")
    os.makedirs(out_dir, exist_ok=True)
    eps = endpoints(a.url, a.nodes)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        snapshot(eps, out_dir)
        end = time.time() + a.interval
        while not stop and time.time() < end:
            time.sleep(0.1)
    snapshot(eps, out_dir, final=True)
    return 0


# ------------------------------------------------------------------------------------------------- truth

ROLES = (("fabric", "fab0"), ("management", "mgmt0"))


def truth_steps(records):
    """The job's steps on one rank: dicts with start, end, comm_start (s) and bytes per role and direction.

    A step's bytes are counted between quiet points: from the counters read when its compute ends (just before
    its all-reduce: `edge_comm`) to the same point of the next step. At a step's own end the kernel has not yet
    sent everything the library handed it (the shaped link drains after the call returns), so the end edges
    would move bytes between neighbouring steps; the last step, with no next one, uses its own edges. Steps cut
    at the job's markers hold the bytes between the step's own edges: `<role>_<dir>_edges`."""
    steps = []
    records = sorted((r for r in records if num(r.get("step")) is not None), key=lambda r: r["step"])
    for i, r in enumerate(records):
        nxt = records[i + 1] if i + 1 < len(records) and records[i + 1]["step"] == r["step"] + 1 else None
        a_key, b_rec, b_key = ("edge_comm", nxt, "edge_comm") if nxt else ("edge_start", r, "edge_end")
        start, end = num(r.get("start_ns")), num(r.get("end_ns"))
        if start is None or end is None or end < start:
            continue
        s = {"step": r.get("step"), "start": start / 1e9, "end": end / 1e9,
             "comm_start": (num(r.get("comm_start_ns")) or start) / 1e9,
             "allreduce_s": (num(r.get("allreduce_ns")) or 0) / 1e9}
        for role, dev in ROLES:
            for d in ("tx", "rx"):
                a, b = num(get(r, a_key, f"{dev}_{d}")), num(get(b_rec, b_key, f"{dev}_{d}"))
                s[f"{role}_{d}"] = b - a if a is not None and b is not None and a >= 0 and b >= a else None
                # Between the step's own edges: what steps cut at the job's markers hold.
                a, b = num(get(r, "edge_start", f"{dev}_{d}")), num(get(r, "edge_end", f"{dev}_{d}"))
                s[f"{role}_{d}_edges"] = b - a if a is not None and b is not None and a >= 0 and b >= a else None
        a, b = num(get(r, "edge_start", "retrans")), num(get(r, "edge_end", "retrans"))
        s["retrans"] = b - a if a is not None and b is not None and a >= 0 else None
        steps.append(s)
    steps.sort(key=lambda s: s["start"])
    return steps


def load_truth(out):
    """{job name: {"id", "nodes": {node: [steps]}, "bad_lines"}} from jobs.jsonl and truth/."""
    jobs, _ = read_jsonl(os.path.join(out, "jobs.jsonl"))
    result = {}
    tdir = os.path.join(out, "truth")
    files = sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []
    for j in jobs:
        name = str(j.get("name"))
        entry = {"id": j.get("id"), "nodes": {}, "bad_lines": 0}
        for f in files:
            if not f.startswith(name + "-rank") or not f.endswith(".jsonl"):
                continue
            recs, bad = read_jsonl(os.path.join(tdir, f))
            entry["bad_lines"] += bad
            node = next((r.get("node") for r in recs if isinstance(r.get("node"), str)), None)
            if node:
                entry["nodes"][node] = truth_steps(recs)
                if not entry.get("id") or recs and recs[0].get("lib") == "mpi":
                    entry["id"] = recs[0].get("job", entry.get("id"))
        result[name] = entry
    return result


def job_period(entry):
    """The job's own step time: the median step duration over its ranks (s)."""
    return median([s["end"] - s["start"] for steps in entry["nodes"].values() for s in steps])


def fault_windows(out, scenario, truth):
    """[(kind, nodes, start_s, end_s)]: mid-run faults from faults.jsonl, whole-run ones over the job."""
    kind = scenario.get("fault", "none")
    if kind in (None, "none"):
        return []
    nodes = str(scenario.get("fault_nodes", "")).split()
    events, _ = read_jsonl(os.path.join(out, "faults.jsonl"))
    starts = [num(e.get("time_ns")) for e in events if e.get("event") == "start"]
    ends = [num(e.get("time_ns")) for e in events if e.get("event") == "end"]
    if starts and starts[0] is not None:
        end = ends[0] / 1e9 if ends and ends[0] is not None else None
        return [(kind, nodes, starts[0] / 1e9, end)]
    all_steps = [s for e in truth.values() for steps in e["nodes"].values() for s in steps]
    if not all_steps:
        return [(kind, nodes, None, None)]
    return [(kind, nodes, min(s["start"] for s in all_steps), max(s["end"] for s in all_steps))]


# ---------------------------------------------------------------------------------------- what commwatch says

def snapshots(out, name):
    recs, _ = read_jsonl(os.path.join(out, "api", f"{name}.jsonl"))
    return recs


def final_body(out, name):
    """The last snapshot's body that answered 200, else the final one, else None."""
    final = read_json(os.path.join(out, "api", f"final-{name}.json"))
    if get(final, "status") == 200:
        return final.get("body")
    for rec in reversed(snapshots(out, name)):
        if rec.get("status") == 200:
            return rec.get("body")
    return get(final, "body")


def last_job_view(out, job_id):
    """The job's last entry in /api/v1/jobs while the collector listed it (a job leaves the list when its
    processes end), and its step times over the polls, in order (non-null ones), as (poll time s, step time s)."""
    last, times = None, []
    for rec in snapshots(out, "jobs"):
        body = rec.get("body")
        jobs = body if isinstance(body, list) else get(body, "jobs", default=[])
        for j in jobs if isinstance(jobs, list) else []:
            if get(j, "id") == job_id:
                last = j
                v, t = num(get(j, "step_time_s")), num(rec.get("t"))
                if v is not None and t is not None:
                    times.append((t, v))
    return last, times


# The collector's job step time is the median of the steps of its analysis window (`WINDOW_NS`, 20 s) at the
# poll; the truth it is held against is the median of the job's steps that ended in that same window.
API_WINDOW_S = 20.0


def last_poll_while_running(times, job_end, slack_s=1.0):
    """The last (poll time, step time) of `times` taken while the job ran (up to slack_s after its last step's
    end): later polls (the collector lists a job until it sees its processes gone) hold a window emptied of its
    steps. The last of all when none is; (None, None) without polls."""
    running = [tv for tv in times if job_end is None or tv[0] <= job_end + slack_s]
    return (running or times or [(None, None)])[-1]


def period_at(entry, t):
    """The job's own step time over the steps that ended in the API_WINDOW_S before poll time t (s), the median
    over its ranks; None when no step ended there."""
    return median([s["end"] - s["start"] for steps in entry["nodes"].values() for s in steps
                   if t - API_WINDOW_S <= s["end"] <= t])


def inferred_steps(body, problems):
    """Steps of /api/v1/steps?node= as dicts with start, end, duration and bytes per role and direction."""
    steps = get(body, "steps")
    if not isinstance(steps, list):
        problems.append("steps answer without a `steps` list")
        return []
    out = []
    for s in steps:
        start, end = num(get(s, "start_unix_s")), num(get(s, "end_unix_s"))
        if start is None or end is None or end < start:
            problems.append("a step without valid start/end")
            continue
        st = {"start": start, "end": end, "confidence": get(s, "confidence")}
        for role, _ in ROLES:
            for d in ("tx", "rx"):
                st[f"{role}_{d}"] = 0.0
        links = get(s, "links", default=[])
        for link in links if isinstance(links, list) else []:
            role = get(link, "role")
            for d in ("tx", "rx"):
                v = num(get(link, f"{d}_bytes"))
                if role in ("fabric", "management") and v is not None:
                    st[f"{role}_{d}"] += v
        out.append(st)
    out.sort(key=lambda s: s["start"])
    return out


def overlap(a, b):
    return max(0.0, min(a["end"], b["end"]) - max(a["start"], b["start"]))


def match_steps(truth, inferred):
    """One-to-one matches, greedy by overlap: [(truth step, inferred step or None)]."""
    pairs = []
    for i, t in enumerate(truth):
        for j, s in enumerate(inferred):
            o = overlap(t, s)
            if o > 0:
                pairs.append((o, i, j))
    pairs.sort(reverse=True)
    used_t, used_s, match = set(), set(), {}
    for o, i, j in pairs:
        if i in used_t or j in used_s:
            continue
        used_t.add(i)
        used_s.add(j)
        match[i] = j
    return [(t, inferred[match[i]] if i in match else None) for i, t in enumerate(truth)]


def found(t, s):
    """A truth step is found when its match lasts within 10 % of it and covers at least half of it."""
    if s is None:
        return False
    dt = t["end"] - t["start"]
    return dt > 0 and abs((s["end"] - s["start"]) - dt) <= 0.1 * dt and overlap(t, s) >= 0.5 * dt


def node_figures(tsteps, isteps, window=None, markers=False):
    """Steps and bytes of one node of one job (optionally only the truth steps inside window); with markers,
    a step's bytes are compared with the counters at the job's own step edges."""
    if window:
        lo, hi = window
        tsteps = [t for t in tsteps if t["start"] >= lo - 1e-3 and (hi is None or t["end"] <= hi + 1e-3)]
    if not tsteps:
        return {"truth_steps": 0}
    lo, hi = tsteps[0]["start"], tsteps[-1]["end"]
    inside = [s for s in isteps if lo <= (s["start"] + s["end"]) / 2 <= hi]
    pairs = match_steps(tsteps, inside)
    ok = [(t, s) for t, s in pairs if found(t, s)]
    fig = {"truth_steps": len(tsteps), "inferred_steps": len(inside), "found": len(ok),
           "extra": len(inside) - len(ok),
           "truth_period_s": median([t["end"] - t["start"] for t in tsteps]),
           "inferred_period_s": median([s["end"] - s["start"] for s in inside])}
    fig["period_off_pct"] = pct_off(fig["inferred_period_s"], fig["truth_period_s"])
    # Steps the API lists twice (same start and end), and steps that overlap an earlier one otherwise (a step
    # history should tile time).
    keys = [(round(x["start"], 3), round(x["end"], 3)) for x in inside]
    fig["duplicate_steps"] = len(keys) - len(set(keys))
    uniq = sorted(set(keys))
    fig["overlapping_steps"] = sum(1 for a, b in zip(uniq, uniq[1:]) if b[0] < a[1] - 1e-3)
    # Bytes of every found step (the first and last of the job left out: they straddle its start and end).
    inner = [(t, s) for t, s in ok if t is not tsteps[0] and t is not tsteps[-1]]
    for role, _ in ROLES:
        for d in ("tx", "rx"):
            key = f"{role}_{d}"
            offs, abs_mb = [], []
            tkey = key + "_edges" if markers else key
            for t, s in inner:
                if t[tkey] is None:
                    continue
                if t[tkey] >= 1e6:
                    offs.append(pct_off(s[key], t[tkey]))
                abs_mb.append((s[key] - t[tkey]) / 1e6)
            fig[f"{key}_off_pct_median"] = median(offs)
            fig[f"{key}_off_pct_max"] = max((abs(o) for o in offs), default=None)
            fig[f"{key}_off_mb_max"] = max((abs(x) for x in abs_mb), default=None)
            fig[f"{key}_truth_mb_median"] = median([t[key] / 1e6 for t in tsteps if t[key] is not None])
    return fig


# ----------------------------------------------------------------------------------------------- findings

def finding_timeline(out):
    """{id: {"kind", "severity", "node", "root", "caused_by", "first_seen", "last_seen", "polls": [(t, active)]}}
    over every findings snapshot, and the count of answers that were not a list of findings."""
    seen, odd = {}, 0
    for rec in snapshots(out, "findings"):
        body = rec.get("body")
        items = body if isinstance(body, list) else get(body, "findings")
        if rec.get("status") != 200 or not isinstance(items, list):
            odd += 1
            continue
        t = num(rec.get("t"))
        for f in items:
            fid = get(f, "id")
            if not isinstance(fid, (str, int)):
                odd += 1
                continue
            e = seen.setdefault(str(fid), {"polls": []})
            e.update({
                "kind": get(f, "kind"), "severity": get(f, "severity"), "node": get(f, "subject", "node"),
                "subject": get(f, "subject"), "root": get(f, "root"), "caused_by": get(f, "caused_by"),
                "first_seen": num(get(f, "first_seen_unix_s")), "last_seen": num(get(f, "last_seen_unix_s")),
                "summary": get(f, "summary"),
            })
            e["polls"].append((t, get(f, "active") is not False))
    return seen, odd


def poll_times(out):
    return [num(r.get("t")) for r in snapshots(out, "findings") if num(r.get("t")) is not None]


def held_state(times, finding_polls, raise_t, end_t):
    """("held" | "flickered" | "cleared early" | "n/a", active polls, polls) between raise and the fault's end:
    held when every poll in that span has the finding active."""
    if raise_t is None:
        return "n/a", 0, 0
    active_at = {t for t, act in finding_polls if act}
    span = [t for t in times if t >= raise_t and (end_t is None or t <= end_t)]
    act = [t in active_at for t in span]
    if not span:
        return "n/a", 0, 0
    if all(act):
        return "held", sum(act), len(span)
    # Flickered: went inactive and came back; cleared early: went inactive and stayed so.
    last_true = max(i for i, x in enumerate(act) if x) if any(act) else -1
    first_false = act.index(False)
    return ("flickered" if last_true > first_false else "cleared early"), sum(act), len(span)


def steps_between(tsteps, t0, t1):
    """Job steps (of one rank) ending in (t0, t1]."""
    return sum(1 for s in tsteps if t0 < s["end"] <= t1)


# ------------------------------------------------------------------------------------------------- report

def evaluate(out):
    scenario = read_json(os.path.join(out, "scenario.json"), {}) or {}
    truth = load_truth(out)
    problems = []
    nodes_n = int(num(scenario.get("nodes")) or 0)
    node_names = [f"node{k}" for k in range(nodes_n)]
    isteps, sources = {}, {}
    for n in node_names:
        body = final_body(out, f"steps-{n}")
        isteps[n] = inferred_steps(body, problems) if body is not None else []
        sources[n] = get(body, "source")
    report = {"scenario": scenario, "problems": [], "jobs": {}, "faults": [], "findings": [], "goals": []}
    report["bed_rc"] = read_json(os.path.join(out, "bed_rc"))
    for name, entry in truth.items():
        period = job_period(entry)
        api_job, api_step_times = last_job_view(out, entry.get("id"))
        job_end = max((st["end"] for steps in entry["nodes"].values() for st in steps), default=None)
        last_t, last_v = last_poll_while_running(api_step_times, job_end)
        jfig = {"id": entry.get("id"), "truth_period_s": period, "bad_truth_lines": entry["bad_lines"],
                "api_found": api_job is not None, "api_nodes": get(api_job, "nodes"),
                "api_step_time_s": last_v, "api_step_time_poll_t": last_t,
                "api_step_time_s_range": [min(v for _, v in api_step_times), max(v for _, v in api_step_times)]
                if api_step_times else None,
                "api_scaling_efficiency": num(get(api_job, "scaling_efficiency")), "nodes": {}}
        # Like with like: that poll's figure against the job's steps in that poll's window.
        jfig["truth_step_time_at_poll_s"] = period_at(entry, last_t) if last_t is not None else None
        jfig["step_time_off_pct"] = pct_off(last_v, jfig["truth_step_time_at_poll_s"])
        jfig["step_time_off_whole_job_pct"] = pct_off(last_v, period)
        for node, tsteps in sorted(entry["nodes"].items()):
            fig = node_figures(tsteps, isteps.get(node, []), markers=sources.get(node) == "markers")
            fig["source"] = sources.get(node)
            fig["allreduce_s_median"] = median([t["allreduce_s"] for t in tsteps])
            fig["retrans_total"] = sum(t["retrans"] or 0 for t in tsteps)
            jfig["nodes"][node] = fig
        report["jobs"][name] = jfig
    timeline, odd = finding_timeline(out)
    if odd:
        problems.append(f"{odd} findings answers or entries of an odd shape")
    times = poll_times(out)
    windows = fault_windows(out, scenario, truth)
    # Every finding is placed against the (first) fault: job steps from its start to the raise, and whether it
    # stayed active until the fault's end (or, without a fault, until the last poll).
    w_start, w_end = (windows[0][2], windows[0][3]) if windows else (None, None)
    rank0 = next((steps for e in truth.values() for steps in e["nodes"].values()), [])
    for fid, f in sorted(timeline.items(), key=lambda kv: (kv[1].get("first_seen") or 0)):
        first_active = next((t for t, act in f["polls"] if act), None)
        raised = f.get("first_seen") or first_active
        report["findings"].append({
            "id": fid, "kind": f.get("kind"), "severity": f.get("severity"), "node": f.get("node"),
            "root": f.get("root"), "caused_by": f.get("caused_by"), "first_seen": f.get("first_seen"),
            "last_seen": f.get("last_seen"), "first_active_poll": first_active,
            "active_polls": sum(1 for _, a in f["polls"] if a), "polls": len(f["polls"]),
            "steps_from_fault": steps_between(rank0, w_start, raised)
            if w_start is not None and raised is not None and raised >= w_start else None,
            "state": held_state(times, f["polls"], first_active, w_end)[0],
            "summary": f.get("summary"), "subject": f.get("subject")})
    for kind, fnodes, start, end in windows:
        report["faults"].append(fault_figures(kind, fnodes, start, end, truth, isteps, timeline, times))
    report["problems"] = problems
    report["goals"] = goals(report)
    return report


def root_from_traffic(f):
    """Whether a finding is a root cause with the environment-variable rule switched off: a root, or filed only
    under an environment-variable finding (ENV_KINDS; the collector has no switch for that rule, so the
    evaluator takes it out here)."""
    cause = f.get("caused_by") or ""
    if any(cause.startswith(k + ":") for k in ENV_KINDS):
        return True
    return f.get("root") is not False and not cause


def fault_figures(kind, fnodes, start, end, truth, isteps, timeline, times):
    """Per fault: the findings that name it (traffic only), raise in steps, held or not, steps during it."""
    # Steps are counted on the first rank of the job that ran during the fault (the one with most steps in it).
    def inside(entry):
        return sum(1 for steps in entry["nodes"].values() for t in steps
                   if start is not None and t["end"] > start and (end is None or t["start"] < end))
    main = max(truth.values(), key=inside, default={"nodes": {}})
    rank0 = next(iter(main["nodes"].values()), [])
    expected = TRAFFIC_KINDS_BY_FAULT.get(kind, set())
    ff = {"kind": kind, "nodes": fnodes, "start": start, "end": end, "per_node": {}, "during": {}}
    for node in fnodes:
        cands = [(fid, f) for fid, f in timeline.items()
                 if f.get("node") == node and f.get("kind") in expected]
        roots = [(fid, f) for fid, f in cands if root_from_traffic(f)]
        best = None
        for fid, f in roots or cands:
            t = f.get("first_seen") or next((t for t, a in f["polls"] if a), None)
            if t is not None and (best is None or t < best[0]):
                best = (t, fid, f)
        entry = {"found": best is not None, "as_root": bool(roots)}
        if best:
            t, fid, f = best
            entry.update({"id": fid, "kind": f.get("kind"), "severity": f.get("severity"), "raised": t,
                          "steps_to_raise": steps_between(rank0, start, t) if start is not None else None})
            # Held: a finding of that kind on that node active at every poll from the raise to the fault's end.
            polls = [p for fid2, f2 in cands for p in f2["polls"]]
            entry["state"], entry["active_polls"], entry["span_polls"] = held_state(times, polls, t, end)
        env = [f for f in timeline.values() if f.get("node") == node and f.get("kind") in ENV_KINDS]
        entry["env_rule_findings"] = len(env)
        ff["per_node"][node] = entry
    if start is not None:
        for name, entry in truth.items():
            for node, tsteps in sorted(entry["nodes"].items()):
                fig = node_figures(tsteps, isteps.get(node, []), (start, end))
                if not fig.get("truth_steps"):
                    continue
                ff["during"][f"{name}/{node}"] = {k: fig.get(k) for k in (
                    "truth_steps", "inferred_steps", "found", "truth_period_s", "inferred_period_s",
                    "period_off_pct", "management_tx_truth_mb_median", "management_rx_truth_mb_median",
                    "fabric_tx_truth_mb_median")}
    return ff


def goals(report):
    """The goals of issue #31 as (name, PASS|FAIL, detail)."""
    g = []
    sc = report["scenario"]
    healthy = sc.get("fault") in (None, "none")
    nodes = [(j, n, f) for j, jf in report["jobs"].items() for n, f in jf["nodes"].items()]
    if not nodes:
        return [("truth present", "FAIL", "no truth steps were written")]
    warn = [f for f in report["findings"] if f.get("severity") in ("warning", "critical")]
    if healthy:
        bad = [f"{j}/{n} {f.get('found')}/{f.get('truth_steps')} (+{f.get('extra')})" for j, n, f in nodes
               if f.get("found", 0) < f.get("truth_steps", 0) - 2 or f.get("extra", 0) > 2]
        g.append(("every step found on every node", "FAIL" if bad else "PASS",
                  "; ".join(bad) or "all nodes (edge steps aside)"))
        worst = max((f.get(k) or 0 for _, _, f in nodes for k in ("fabric_tx_off_pct_max", "fabric_rx_off_pct_max")),
                    default=None)
        nob = [f"{j}/{n}" for j, n, f in nodes if f.get("fabric_tx_off_pct_max") is None]
        g.append(("per-step fabric bytes within 2 % of the kernel counters",
                  "PASS" if not nob and worst is not None and worst <= 2 else "FAIL",
                  f"worst {fmt(worst, ' %')}" + (f"; no matched steps on {', '.join(nob)}" if nob else "")))
        offs = [abs(f.get("period_off_pct")) if f.get("period_off_pct") is not None else math.inf
                for _, _, f in nodes]
        offs += [abs(jf["step_time_off_pct"]) if jf.get("step_time_off_pct") is not None else math.inf
                 for jf in report["jobs"].values()]
        missing = [f"{j}/{n}" for j, n, f in nodes if f.get("period_off_pct") is None]
        missing += [f"job {j} step time" for j, jf in report["jobs"].items() if jf.get("step_time_off_pct") is None]
        finite = [o for o in offs if o != math.inf]
        g.append(("period within 2 % of the job's own (every node, and the job's step time)",
                  "PASS" if max(offs) <= 2 else "FAIL",
                  f"worst {fmt(max(finite, default=None), ' %')}"
                  + (f"; none for {', '.join(missing)}" if missing else "")))
        g.append(("0 warnings", "PASS" if not warn else "FAIL", f"{len(warn)} warning/critical findings"))
        return g
    if sc.get("scenario") == "rerun-slow":
        start = next((f["start"] for f in report["faults"] if f.get("start") is not None), None)
        scal = [f for f in report["findings"] if f.get("kind") == "scaling_efficiency_drop"
                and (start is None or (f.get("first_seen") or f.get("first_active_poll") or 0) >= start)]
        g.append(("a scaling finding for the rerun that ran slower than its earlier run",
                  "PASS" if scal else "FAIL", f"{len(scal)} scaling_efficiency_drop findings after the rerun began"))
    for fault in report["faults"]:
        for node, e in fault["per_node"].items():
            ok = e.get("found") and e.get("as_root") and e.get("steps_to_raise") is not None \
                and e["steps_to_raise"] <= 10
            g.append((f"{fault['kind']} on {node} found as root within 10 steps from traffic alone",
                      "PASS" if ok else "FAIL",
                      f"{e.get('kind')} after {e.get('steps_to_raise')} steps, root={e.get('as_root')}"
                      if e.get("found") else "no traffic finding on that node"))
            g.append((f"{fault['kind']} on {node} held until the fault ends",
                      "PASS" if e.get("state") == "held" else "FAIL",
                      f"{e.get('state', 'never raised')} "
                      f"({e.get('active_polls', 0)}/{e.get('span_polls', 0)} polls)"))
        bad = []
        for key, d in fault["during"].items():
            off = d.get("period_off_pct")
            if off is None or abs(off) > 10:
                bad.append(f"{key} {fmt(d.get('inferred_period_s'), ' s')} vs {fmt(d.get('truth_period_s'), ' s')}"
                           f" ({d.get('inferred_steps')} steps for {d.get('truth_steps')})")
        g.append((f"steps during {fault['kind']} within 10 % of the job's period on every node",
                  "FAIL" if bad or not fault["during"] else "PASS",
                  "; ".join(bad) or ("all nodes" if fault["during"] else "no job step in the fault's window")))
    return g


def print_report(r, out=sys.stdout):
    sc = r["scenario"]
    w = lambda s="": print(s, file=out)
    w(f"== {sc.get('lib')}:{sc.get('scenario')}  fault={sc.get('fault')} {sc.get('fault_nodes') or ''}"
      f" iface={sc.get('iface_mode')} markers={bool(sc.get('markers'))}  ({sc.get('commwatch')})")
    if r.get("bed_rc"):
        w(f"   the bed reported a failure (rc {r['bed_rc']}): see the job logs")
    for name, j in r["jobs"].items():
        w(f"job {name} id={j['id']}: period {fmt(j['truth_period_s'], ' s', 3)}; commwatch step time "
          f"{fmt(j['api_step_time_s'], ' s', 3)} ({fmt(j['step_time_off_pct'], ' %', 1)} off)"
          f"{'' if j['api_found'] else '  [job not in /api/v1/jobs]'}"
          f"; scaling efficiency {fmt(j['api_scaling_efficiency'])}")
        w("   node   steps found/job (+extra, inferred)  period s (off)        "
          "fab tx/rx MB/step (max % off)      mgmt tx/rx MB/step (max MB off)  allreduce s  retrans")
        for node, f in j["nodes"].items():
            if not f.get("truth_steps"):
                w(f"   {node}  no truth steps")
                continue
            w(f"   {node}  {f['found']:>3}/{f['truth_steps']:<3} (+{f['extra']}, {f['inferred_steps']})"
              f"{'':10}{fmt(f['inferred_period_s'], '', 3)} ({fmt(f['period_off_pct'], '%', 1)})"
              f"{'':6}{fmt(f['fabric_tx_truth_mb_median'], '', 1)}/{fmt(f['fabric_rx_truth_mb_median'], '', 1)}"
              f" ({fmt(f['fabric_tx_off_pct_max'], '%')}/{fmt(f['fabric_rx_off_pct_max'], '%')})"
              f"{'':6}{fmt(f['management_tx_truth_mb_median'], '', 1)}/"
              f"{fmt(f['management_rx_truth_mb_median'], '', 1)} "
              f"({fmt(f['management_tx_off_mb_max'], '')}/{fmt(f['management_rx_off_mb_max'], '')})"
              f"{'':5}{fmt(f['allreduce_s_median'], '', 3)}  {f['retrans_total']:.0f}  [{f.get('source')}]"
              + (f" {f['duplicate_steps']} listed twice, {f['overlapping_steps']} overlapping"
                 if f.get("duplicate_steps") or f.get("overlapping_steps") else ""))
    for fault in r["faults"]:
        w(f"fault {fault['kind']} on {' '.join(fault['nodes'])}: "
          f"{fmt(fault['start'], '', 1)} .. {fmt(fault['end'], '', 1)}")
        for node, e in fault["per_node"].items():
            w(f"   {node}: " + (f"{e['kind']} ({e['severity']}) root={e['as_root']} after {e['steps_to_raise']} "
                                 f"steps, {e['state']} ({e['active_polls']}/{e['span_polls']} polls)"
                                 if e["found"] else "no traffic finding")
              + f"; env-variable findings: {e['env_rule_findings']}")
        for key, d in fault["during"].items():
            w(f"   during, {key}: {d.get('inferred_steps')} steps for {d.get('truth_steps')}, period "
              f"{fmt(d.get('inferred_period_s'), ' s', 3)} vs {fmt(d.get('truth_period_s'), ' s', 3)} "
              f"({fmt(d.get('period_off_pct'), ' %', 1)}); management tx/rx "
              f"{fmt(d.get('management_tx_truth_mb_median'), '', 1)}/"
              f"{fmt(d.get('management_rx_truth_mb_median'), '', 1)}"
              f" MB/step, fabric tx {fmt(d.get('fabric_tx_truth_mb_median'), '', 1)} MB/step (kernel)")
    warn = sum(1 for f in r["findings"] if f.get("severity") in ("warning", "critical"))
    w(f"findings: {len(r['findings'])} ({warn} warning/critical)")
    for f in r["findings"]:
        w(f"   {f['kind']} {f['severity']} node={f['node']} root={f['root']} caused_by={f['caused_by']} "
          f"first {fmt(f['first_seen'], '', 1)} last {fmt(f['last_seen'], '', 1)} "
          f"active {f['active_polls']}/{f['polls']} polls, {f['state']}"
          + (f", raised {f['steps_from_fault']} steps after the fault began"
             if f.get("steps_from_fault") is not None else ""))
    for p in r["problems"]:
        w(f"problem: {p}")
    for name, verdict, detail in r["goals"]:
        w(f"{verdict}: {name} -- {detail}")


def cmd_report(a):
    if not os.path.isdir(a.out):
        print(f"evaluate.py report: {a.out} is not a scenario's output directory", file=sys.stderr)
        return 2
    r = evaluate(a.out)
    with open(os.path.join(a.out, "report.json"), "w") as f:
        json.dump(r, f, indent=1, default=str)
    if a.json:
        json.dump(r, sys.stdout, indent=1, default=str)
    else:
        print_report(r)
    return 0


def cmd_summary(a):
    if not os.path.isdir(a.dir):
        print(f"evaluate.py summary: {a.dir} is not a directory", file=sys.stderr)
        return 2
    for d in sorted(os.listdir(a.dir)):
        r = read_json(os.path.join(a.dir, d, "report.json"))
        if not isinstance(r, dict):
            continue
        verdicts = [v for _, v, _ in r.get("goals", [])]
        print(f"{d:28} {verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL")
    return 0


def table_row(r):
    """One markdown table row of a scenario's report (the figures REALITY.md keeps)."""
    sc = r.get("scenario", {})
    jobs = r.get("jobs", {})
    nodes = [f for j in jobs.values() for f in j.get("nodes", {}).values() if f.get("truth_steps")]
    steps = " ".join(f"{f.get('found')}/{f.get('truth_steps')}" for f in nodes)
    extra = " ".join(str(f.get("extra")) for f in nodes)
    dup = sum((f.get("duplicate_steps") or 0) + (f.get("overlapping_steps") or 0) for f in nodes)
    bytes_off = max((f.get(k) for f in nodes for k in ("fabric_tx_off_pct_max", "fabric_rx_off_pct_max")
                     if f.get(k) is not None), default=None)
    mgmt_off = max((f.get(k) for f in nodes for k in ("management_tx_off_pct_max", "management_rx_off_pct_max")
                    if f.get(k) is not None), default=None)
    per_off = max((abs(f["period_off_pct"]) for f in nodes if f.get("period_off_pct") is not None), default=None)
    period = " ".join(fmt(j.get("truth_period_s"), "", 2) for j in jobs.values())
    st = " ".join(f"{fmt(j.get('api_step_time_s'), '', 2)} ({fmt(j.get('step_time_off_pct'), '%', 0)})"
                  for j in jobs.values())
    warn = sum(1 for f in r.get("findings", []) if f.get("severity") in ("warning", "critical"))
    kinds = sorted({f"{f.get('kind')}@{f.get('node')}" for f in r.get("findings", [])})
    fault = []
    for ff in r.get("faults", []):
        for node, e in ff.get("per_node", {}).items():
            fault.append(f"{node}: {e.get('kind')} after {e.get('steps_to_raise')} steps, {e.get('state')}"
                         if e.get("found") else f"{node}: none")
        during = ff.get("during", {})
        fault.append("during: " + " ".join(f"{d.get('inferred_steps')}/{d.get('truth_steps')}"
                                           for d in during.values()))
    goals_ = r.get("goals", [])
    passed = sum(1 for g in goals_ if g[1] == "PASS")
    name = f"{sc.get('lib')}:{sc.get('scenario')}" + (" (markers)" if sc.get("markers") else "")
    return (f"| {name} | {period} | {steps} | {extra} | {dup} | {fmt(bytes_off, '', 2)} | {fmt(mgmt_off, '', 2)} "
            f"| {fmt(per_off, '', 1)} | {st} | {len(r.get('findings', []))} ({warn}) {' '.join(kinds)} "
            f"| {'; '.join(fault) or '-'} | {passed}/{len(goals_)} |")


TABLE_HEAD = ("| scenario | job period s | steps found/job per node | extra steps per node | listed twice or "
              "overlapping | fabric bytes worst % off | management bytes worst % off | period worst % off (nodes) | "
              "job step time s (off) | "
              "findings (warn+) | fault: finding per node; steps during (inferred/job) | goals passed |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|")


def cmd_table(a):
    print(TABLE_HEAD)
    for d in a.dirs:
        if not os.path.isdir(d):
            print(f"evaluate.py table: {d} is not a directory", file=sys.stderr)
            continue
        for sub in sorted(os.listdir(d)):
            r = read_json(os.path.join(d, sub, "report.json"))
            if isinstance(r, dict):
                print(table_row(r))
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("wait")
    s.add_argument("--url", required=True)
    s.add_argument("--nodes", type=int, default=0)
    s.add_argument("--timeout", type=float, default=30)
    s = sub.add_parser("poll")
    s.add_argument("--url", required=True)
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--interval", type=float, default=2)
    s = sub.add_parser("report")
    s.add_argument("--out", required=True)
    s.add_argument("--json", action="store_true")
    s = sub.add_parser("summary")
    s.add_argument("dir")
    s = sub.add_parser("table")
    s.add_argument("dirs", nargs="+")
    a = p.parse_args(argv)
    cmds = {"wait": cmd_wait, "poll": cmd_poll, "report": cmd_report, "summary": cmd_summary, "table": cmd_table}
    return cmds[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
