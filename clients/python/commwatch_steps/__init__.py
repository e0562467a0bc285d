"""Step markers for training loops, sent to the local commwatch agent.

Sending never blocks and never raises into the training loop: markers are single non-blocking datagrams
(a unix datagram socket when the agent's socket exists, loopback UDP otherwise); if the agent is not there,
the marker is silently dropped and counted in ``stats()``.

Wire format (one JSON object per datagram, at most 1024 bytes)::

    {"job": "4242", "rank": 3, "step": 120, "phase": "end", "time": 1764460000.125, "samples": 256}

Environment (all optional): ``COMMWATCH_STEPS_SOCKET`` (default ``/run/commwatch/steps.sock``),
``COMMWATCH_STEPS_UDP`` (``host:port``, default ``127.0.0.1:9473``), ``COMMWATCH_JOB`` (else
``SLURM_JOB_ID``, ``TORCHELASTIC_RUN_ID``, ``JOB_ID``, or ``"default"``), ``RANK`` (else ``SLURM_PROCID``,
``OMPI_COMM_WORLD_RANK``, or 0).
"""

import contextlib
import json
import os
import socket
import threading
import time

__all__ = ["mark_step", "step", "StepMarker", "stats"]

DEFAULT_SOCKET = "/run/commwatch/steps.sock"
DEFAULT_UDP = "127.0.0.1:9473"
MAX_DATAGRAM = 1024

_lock = threading.Lock()
_counts = {"sent": 0, "dropped": 0}


def _env_job():
    for key in ("COMMWATCH_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "JOB_ID"):
        value = os.environ.get(key)
        if value:
            return value
    return "default"


def _env_rank():
    for key in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(key)
        if value and value.isdigit():
            return int(value)
    return 0


def _parse_udp(text):
    host, _, port = text.rpartition(":")
    try:
        return (host or "127.0.0.1", int(port))
    except ValueError:
        return ("127.0.0.1", 9473)


class StepMarker:
    """A sender bound to one job and rank. Thread-safe; cheap to call every step."""

    def __init__(self, job=None, rank=None, socket_path=None, udp=None):
        self.job = str(job) if job is not None else _env_job()
        self.rank = int(rank) if rank is not None else _env_rank()
        self.socket_path = socket_path or os.environ.get("COMMWATCH_STEPS_SOCKET", DEFAULT_SOCKET)
        self.udp = _parse_udp(udp or os.environ.get("COMMWATCH_STEPS_UDP", DEFAULT_UDP))
        self._sock = None
        self._target = None
        self._pid = None

    def _connect(self):
        # Re-create after fork (DataLoader workers, torch.multiprocessing).
        if self._sock is not None and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = None
        try:
            if self.socket_path and os.path.exists(self.socket_path):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                s.setblocking(False)
                self._sock, self._target = s, self.socket_path
                return
        except OSError:
            pass
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setblocking(False)
            self._sock, self._target = s, self.udp
        except OSError:
            self._sock = None

    def send(self, step, phase, samples=None, when=None):
        """Sends one marker. Returns True if the datagram left, False if it was dropped. Never raises."""
        try:
            msg = {"job": self.job, "rank": self.rank, "step": int(step), "phase": phase,
                   "time": time.time() if when is None else float(when)}
            if samples is not None:
                msg["samples"] = int(samples)
            data = json.dumps(msg, separators=(",", ":")).encode("utf-8")
            if len(data) > MAX_DATAGRAM:
                raise ValueError("marker too large")
            self._connect()
            if self._sock is None:
                raise OSError("no socket")
            self._sock.sendto(data, self._target)
            with _lock:
                _counts["sent"] += 1
            return True
        except Exception:  # noqa: BLE001 - markers must never disturb training
            with _lock:
                _counts["dropped"] += 1
            if self._target == self.socket_path:
                # The agent may have gone; fall back to UDP on the next marker.
                self._sock = None
            return False

    def mark_step(self, step, samples=None):
        """Marks the end of step ``step`` (``samples`` processed in it)."""
        return self.send(step, "end", samples)

    @contextlib.contextmanager
    def step(self, step, samples=None):
        """Context manager around one step: a ``begin`` marker on entry, an ``end`` marker on exit."""
        self.send(step, "begin")
        try:
            yield
        finally:
            self.send(step, "end", samples)


_default = None


def _get_default():
    global _default
    if _default is None:
        _default = StepMarker()
    return _default


def mark_step(step, samples=None):
    """Marks the end of step ``step`` for this process's job and rank (from the environment)."""
    return _get_default().mark_step(step, samples)


def step(step, samples=None):
    """``with commwatch_steps.step(i, samples=batch_size): ...`` around one training step."""
    return _get_default().step(step, samples)


def stats():
    """Markers sent and dropped by this process."""
    with _lock:
        return dict(_counts)
