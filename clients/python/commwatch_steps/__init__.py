"""Step markers for training loops, sent to the local commwatch agent.

Sending never blocks and never raises into the training loop: markers are single non-blocking datagrams
(a unix datagram socket when the agent's socket exists, loopback UDP otherwise); if the agent is not there,
the marker is silently dropped and counted in ``stats()``.

Wire format (one JSON object per datagram, at most 1024 bytes)::

    {"job": "4242", "rank": 3, "step": 120, "phase": "end", "time": 1764460000.125, "samples": 256}

Environment (all optional): ``COMMWATCH_STEPS_SOCKET`` (default ``/run/commwatch/steps.sock``),
``COMMWATCH_STEPS_UDP`` (``host:port``, default ``127.0.0.1:9473``), and the job and rank below.

Job identity: the agent finds a job's processes and names the job by the same rule as this client, so its
markers and its processes are one job. The job id is the first of ``COMMWATCH_JOB``, ``SLURM_JOB_ID``,
``TORCHELASTIC_RUN_ID``, ``MASTER_ADDR:MASTER_PORT`` (both set) that is set, else ``pod-<uid>`` (the
Kubernetes pod, from ``/proc/self/cgroup``), else ``session-<sid>`` when the process carries a rank
(``RANK``, ``LOCAL_RANK``, ``OMPI_COMM_WORLD_RANK`` or ``SLURM_PROCID`` set), else ``pid-<pid>``. Control
characters are dropped, a value left empty counts as unset, and the id is cut to 128 bytes. The pod, session
and pid fall-backs are what the process sees: in a container with its own pid or cgroup namespace they differ
from what the agent sees, so set ``COMMWATCH_JOB`` (or run under Slurm or torchrun). The rank is the first of
``RANK``, ``OMPI_COMM_WORLD_RANK``, ``SLURM_PROCID`` that is an unsigned integer, else 0.
"""

import contextlib
import json
import os
import re
import socket
import string
import threading
import time
import unicodedata

__all__ = ["mark_step", "step", "StepMarker", "stats", "job_id_from", "rank_from", "pod_uid"]

DEFAULT_SOCKET = "/run/commwatch/steps.sock"
DEFAULT_UDP = "127.0.0.1:9473"
MAX_DATAGRAM = 1024

_lock = threading.Lock()
_counts = {"sent": 0, "dropped": 0}


# The job identity rule, as the agent's processes source has it (tested against the same table,
# tests/job_ids.json).
JOB_ID_KEYS = ("COMMWATCH_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
RANK_KEYS = ("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
RANK_MARKERS = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
MAX_JOB_ID_BYTES = 128
# The agent keeps at most this many bytes of an environment value before it looks at it.
_MAX_VALUE_BYTES = 256
_U32 = re.compile(r"\+?[0-9]+", re.ASCII)
# Unicode White_Space, what the agent trims around a rank (str.strip() alone would also take \x1c-\x1f).
_WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"


def _cut(text, max_bytes):
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, at a character boundary."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def _value(env, key):
    """The value of ``key`` as the agent reads it: cut to 256 bytes, control characters dropped; None when
    unset, empty after that, or not valid UTF-8."""
    value = env.get(key)
    if value is None:
        return None
    try:
        value = _cut(value, _MAX_VALUE_BYTES)
    except UnicodeEncodeError:  # undecodable bytes (surrogate escapes): the agent drops the value
        return None
    value = "".join(c for c in value if unicodedata.category(c) != "Cc")
    return value or None


def _is_uid(text):
    return len(text) == 36 and all(
        c == "-" if i in (8, 13, 18, 23) else c in string.hexdigits for i, c in enumerate(text))


def pod_uid(cgroup_text):
    """The Kubernetes pod UID in ``/proc/<pid>/cgroup`` text (cgroup v1 ``.../pod<uid>/...`` or v2 with the
    systemd driver ``...-pod<uid_with_underscores>.slice``), or None."""
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        path = parts[2] if len(parts) == 3 else line
        if "kubepods" not in path:
            continue
        pod = None
        for part in path.split("/"):
            part = part.strip()
            i = part.rfind("pod")
            if i < 0:
                continue
            rest = part[i + 3:]
            if rest.endswith(".slice"):
                rest = rest[:-len(".slice")]
            uid = rest.replace("_", "-")
            if _is_uid(uid):
                pod = uid
        if pod is not None:
            return pod
    return None


def job_id_from(env, pod=None, session=0, pid=0):
    """The job id of a process with environment ``env`` (a mapping), Kubernetes pod UID ``pod`` (or None),
    session id ``session`` and pid ``pid``, by the rule in the module documentation."""
    name = next((v for v in (_value(env, k) for k in JOB_ID_KEYS) if v is not None), None)
    if name is None:
        addr, port = _value(env, "MASTER_ADDR"), _value(env, "MASTER_PORT")
        if addr is not None and port is not None:
            name = f"{addr}:{port}"
    if name is None and pod:
        name = f"pod-{pod}"
    if name is None:
        marked = any(k in env for k in RANK_MARKERS)
        name = f"session-{session}" if marked else f"pid-{pid}"
    return _cut(name, MAX_JOB_ID_BYTES)


def rank_from(env):
    """The global rank in ``env``: the first of ``RANK_KEYS`` that is an unsigned 32-bit integer
    (surrounding whitespace allowed), or None."""
    for key in RANK_KEYS:
        value = env.get(key)
        if value is None:
            continue
        value = value.strip(_WHITE_SPACE)
        if _U32.fullmatch(value) and int(value) <= 0xFFFFFFFF:
            return int(value)
    return None


def _own_pod():
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            return pod_uid(f.read())
    except OSError:
        return None


def _env_job():
    try:
        session = os.getsid(0)
    except OSError:
        session = 0
    return job_id_from(os.environ, pod=_own_pod(), session=session, pid=os.getpid())


def _env_rank():
    rank = rank_from(os.environ)
    return 0 if rank is None else rank


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
