"""Tests of the test bed's evaluator: its matching, byte accounting and finding timelines on made-up figures,
and that odd API answers and broken truth lines are reported, never a crash.

    python3 -m unittest discover -s scripts/testbed -p 'test_*.py'
"""

import json
import os
import tempfile
import unittest

import evaluate as ev


def truth_line(step, start, comm, end, fab_tx):
    """A truth record: the node's fabric tx counter at the step's start, before its all-reduce, and at its end."""
    edge = lambda tx: {"fab0_tx": tx, "fab0_rx": tx, "mgmt0_tx": 0, "mgmt0_rx": 0, "retrans": 0}
    return {"lib": "mpi", "job": "j", "rank": 0, "node": "node0", "step": step,
            "start_ns": int(start * 1e9), "comm_start_ns": int(comm * 1e9), "end_ns": int(end * 1e9),
            "allreduce_ns": int((end - comm) * 1e9),
            "edge_start": edge(fab_tx[0]), "edge_comm": edge(fab_tx[1]), "edge_end": edge(fab_tx[2])}


def step(start, end, fab=0.0):
    return {"start": start, "end": end, "fabric_tx": fab, "fabric_rx": fab, "management_tx": 0.0,
            "management_rx": 0.0}


class TruthBytes(unittest.TestCase):
    def test_bytes_are_counted_between_quiet_points(self):
        # 100 bytes a step, 10 of them still draining when the step ends: the next step's edges see them.
        recs = [truth_line(0, 0, 0.5, 1.0, (0, 0, 90)), truth_line(1, 1.0, 1.5, 2.0, (90, 100, 190)),
                truth_line(2, 2.0, 2.5, 3.0, (190, 200, 290))]
        steps = ev.truth_steps(recs)
        self.assertEqual([s["fabric_tx"] for s in steps], [100, 100, 100])
        self.assertEqual([s["fabric_tx_edges"] for s in steps], [90, 100, 100])

    def test_broken_records_are_skipped(self):
        recs = [{"step": "x"}, {"step": 0, "start_ns": None}, truth_line(1, 1, 1.5, 2, (0, 0, 5)),
                {"step": 2, "start_ns": 5, "end_ns": 1}]
        self.assertEqual([s["step"] for s in ev.truth_steps(recs)], [1])


class JobStepTime(unittest.TestCase):
    def test_the_collectors_step_time_is_held_against_its_own_window(self):
        # 1 s steps for 40 s, then 3 s steps for 30 s (a fault): the poll at 70 s sees the slow steps alone.
        steps, t = [], 0.0
        while t < 70:
            d = 1.0 if t < 40 else 3.0
            steps.append(step(t, t + d))
            t += d
        entry = {"nodes": {"node0": steps}}
        self.assertEqual(ev.period_at(entry, 70.0), 3.0)
        self.assertEqual(ev.period_at(entry, 30.0), 1.0)
        self.assertIsNone(ev.period_at(entry, -5.0))
        self.assertEqual(ev.job_period(entry), 1.0)

    def test_the_poll_compared_is_the_last_while_the_job_ran(self):
        polls = [(10.0, 1.0), (20.0, 1.1), (30.0, 2.0), (45.0, 3.0)]
        self.assertEqual(ev.last_poll_while_running(polls, 29.5), (30.0, 2.0))
        self.assertEqual(ev.last_poll_while_running(polls, 5.0), (45.0, 3.0))
        self.assertEqual(ev.last_poll_while_running([], 5.0), (None, None))


class Matching(unittest.TestCase):
    def test_each_job_step_gets_at_most_one_inferred_step(self):
        truth = [step(0, 1), step(1, 2), step(2, 3)]
        inferred = [step(0.02, 1.02), step(1.02, 2.02), step(1.02, 2.02), step(2.02, 2.3), step(2.3, 3.0)]
        pairs = ev.match_steps(truth, inferred)
        found = [ev.found(t, s) for t, s in pairs]
        self.assertEqual(found, [True, True, False])

    def test_node_figures_count_extra_and_duplicate_steps(self):
        truth = [dict(step(k, k + 1), fabric_tx=100, fabric_rx=100) for k in range(4)]
        inferred = [step(k, k + 1, fab=100) for k in range(4)] + [step(1, 2, fab=100), step(2, 2.5, fab=50)]
        fig = ev.node_figures(truth, inferred)
        self.assertEqual((fig["found"], fig["extra"], fig["duplicate_steps"]), (4, 2, 1))
        self.assertEqual(fig["fabric_tx_off_pct_max"], None)  # truth steps under 1 MB: compared in MB only
        self.assertEqual(fig["fabric_tx_off_mb_max"], 0.0)

    def test_bytes_off_in_percent(self):
        truth = [dict(step(k, k + 1), fabric_tx=10e6, fabric_rx=10e6) for k in range(4)]
        inferred = [step(k, k + 1, fab=10e6) for k in range(4)]
        inferred[1]["fabric_tx"] = 10.5e6
        fig = ev.node_figures(truth, inferred)
        self.assertAlmostEqual(fig["fabric_tx_off_pct_max"], 5.0)
        self.assertAlmostEqual(fig["fabric_rx_off_pct_max"], 0.0)


class Held(unittest.TestCase):
    def test_a_finding_under_the_environment_rule_is_a_root_from_traffic(self):
        self.assertTrue(ev.root_from_traffic({"root": True, "caused_by": None}))
        self.assertTrue(ev.root_from_traffic(
            {"root": False, "caused_by": "nccl_misconfiguration:node1:job=j"}))
        self.assertFalse(ev.root_from_traffic(
            {"root": False, "caused_by": "management_network_traffic:node1:job=j"}))
        self.assertFalse(ev.root_from_traffic({"root": False, "caused_by": None}))

    def test_held_flickered_cleared(self):
        times = [0, 2, 4, 6, 8, 10]
        self.assertEqual(ev.held_state(times, [(t, True) for t in times], 2, 10)[0], "held")
        polls = [(2, True), (4, False), (6, True), (8, True), (10, True)]
        self.assertEqual(ev.held_state(times, polls, 2, 10)[0], "flickered")
        self.assertEqual(ev.held_state(times, [(2, True), (4, True)], 2, 10)[0], "cleared early")
        self.assertEqual(ev.held_state(times, [], None, 10)[0], "n/a")


class OddAnswers(unittest.TestCase):
    def test_a_scenario_with_odd_api_answers_is_reported(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "api"))
            os.makedirs(os.path.join(d, "truth"))
            with open(os.path.join(d, "scenario.json"), "w") as f:
                json.dump({"lib": "mpi", "scenario": "mgmt-one", "nodes": 2, "fault": "management",
                           "fault_nodes": "node1"}, f)
            with open(os.path.join(d, "jobs.jsonl"), "w") as f:
                f.write('{"name": "main", "id": "j", "nodes": "0 1"}\n')
            with open(os.path.join(d, "truth", "main-rank0.jsonl"), "w") as f:
                for k in range(4):
                    f.write(json.dumps(truth_line(k, k, k + 0.5, k + 1, (k * 100, k * 100, k * 100 + 100))) + "\n")
                f.write("not json\n[1]\n")
            with open(os.path.join(d, "api", "findings.jsonl"), "w") as f:
                for body in ([1, "x", {"id": None}, {"id": "a", "kind": 5, "subject": "n", "active": "y"}],
                             "oops", {"findings": {"a": 1}}):
                    f.write(json.dumps({"t": 1, "status": 200, "body": body}) + "\n")
                f.write("not json\n")
            with open(os.path.join(d, "api", "jobs.jsonl"), "w") as f:
                f.write(json.dumps({"t": 1, "status": 200, "body": [{"id": "j", "step_time_s": "1"}, None]}) + "\n")
            with open(os.path.join(d, "api", "final-steps-node0.json"), "w") as f:
                json.dump({"t": 2, "status": 200, "body": {"steps": [None, {"start_unix_s": 5, "end_unix_s": 1},
                                                                     {"start_unix_s": 0, "end_unix_s": 1,
                                                                      "links": [{"role": "fabric",
                                                                                 "tx_bytes": "9"}, 7]}]}}, f)
            with open(os.path.join(d, "api", "final-steps-node1.json"), "w") as f:
                json.dump({"t": 2, "status": 404, "body": {"error": "unknown node"}}, f)
            r = ev.evaluate(d)
            self.assertTrue(r["problems"])
            self.assertEqual(r["jobs"]["main"]["bad_truth_lines"], 2)
            verdicts = {name: v for name, v, _ in r["goals"]}
            self.assertEqual(verdicts["management on node1 found as root within 10 steps from traffic alone"],
                             "FAIL")
            with open(os.devnull, "w") as out:
                ev.print_report(r, out)


if __name__ == "__main__":
    unittest.main()
