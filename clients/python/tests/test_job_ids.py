"""The job identity rule against the table the agent's processes source is tested with (job_ids.json)."""
import json
import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import commwatch_steps  # noqa: E402

TABLE = os.path.join(os.path.dirname(__file__), "job_ids.json")


def cases():
    with open(TABLE, encoding="utf-8") as f:
        return json.load(f)["cases"]


class JobIdentityTests(unittest.TestCase):
    def test_table_has_every_rule(self):
        self.assertGreaterEqual(len(cases()), 10)

    def test_job_ids_follow_the_shared_table(self):
        for case in cases():
            with self.subTest(case["name"]):
                pod = commwatch_steps.pod_uid(case["cgroup"]) if case["cgroup"] else None
                got = commwatch_steps.job_id_from(case["env"], pod=pod, session=case["session"], pid=case["pid"])
                self.assertEqual(got, case["job"])
                self.assertLessEqual(len(got.encode("utf-8")), commwatch_steps.MAX_JOB_ID_BYTES)

    def test_ranks_follow_the_shared_table(self):
        for case in cases():
            with self.subTest(case["name"]):
                self.assertEqual(commwatch_steps.rank_from(case["env"]), case["rank"])

    def test_a_marker_sender_names_its_job_by_the_rule(self):
        for case in cases():
            with self.subTest(case["name"]):
                pod = commwatch_steps.pod_uid(case["cgroup"]) if case["cgroup"] else None
                with mock.patch.dict(os.environ, case["env"], clear=True), \
                        mock.patch.object(commwatch_steps, "_own_pod", return_value=pod), \
                        mock.patch.object(os, "getsid", return_value=case["session"]), \
                        mock.patch.object(os, "getpid", return_value=case["pid"]):
                    m = commwatch_steps.StepMarker(socket_path="/nonexistent", udp="127.0.0.1:9")
                self.assertEqual(m.job, case["job"])
                self.assertEqual(m.rank, 0 if case["rank"] is None else case["rank"])


if __name__ == "__main__":
    unittest.main()
