"""Tests of the marker sender against a real UDP and unix datagram receiver (no agent needed)."""
import json
import os
import socket
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import commwatch_steps  # noqa: E402


class MarkerTests(unittest.TestCase):
    def test_udp_marker_format(self):
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        m = commwatch_steps.StepMarker(job="j1", rank=5, socket_path="/nonexistent", udp=f"127.0.0.1:{port}")
        self.assertTrue(m.mark_step(12, samples=64))
        msg = json.loads(rx.recv(2048))
        self.assertEqual((msg["job"], msg["rank"], msg["step"], msg["phase"], msg["samples"]), ("j1", 5, 12, "end", 64))
        self.assertIsInstance(msg["time"], float)
        with m.step(13):
            pass
        phases = [json.loads(rx.recv(2048))["phase"] for _ in range(2)]
        self.assertEqual(phases, ["begin", "end"])

    def test_unix_socket_preferred(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "steps.sock")
            rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            rx.bind(path)
            m = commwatch_steps.StepMarker(job="j2", rank=0, socket_path=path, udp="127.0.0.1:1")
            self.assertTrue(m.mark_step(1))
            self.assertEqual(json.loads(rx.recv(2048))["job"], "j2")

    def test_never_raises_without_agent(self):
        m = commwatch_steps.StepMarker(job="x" * 2000, rank=0, socket_path="/nonexistent", udp="127.0.0.1:9")
        before = commwatch_steps.stats()["dropped"]
        self.assertFalse(m.mark_step(1))
        self.assertEqual(commwatch_steps.stats()["dropped"], before + 1)
        with m.step(2):
            pass

    def test_env_defaults(self):
        os.environ["COMMWATCH_JOB"] = "envjob"
        os.environ["RANK"] = "7"
        try:
            m = commwatch_steps.StepMarker()
            self.assertEqual((m.job, m.rank), ("envjob", 7))
        finally:
            del os.environ["COMMWATCH_JOB"]
            del os.environ["RANK"]


if __name__ == "__main__":
    unittest.main()
