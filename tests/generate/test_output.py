"""output: writer processes never outlive a killed parent. The parent is SIGKILLed in the middle
of sending a batch (a real child process: the batch's length header and its first bytes are in
the worker's pipe, the rest never comes); the worker, blocked reading it, drops its files and
exits, and the directory's lock is free again. A parent's death noticed once (by its signal or by
``getppid``) is not raised again by the signals that follow it while the files are dropped
(``_worker`` in this process, with sinks that signal themselves)."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.generate.test_faults import _alive
from tokenpcap.errors import OutputError
from tokenpcap.generate import output
from tokenpcap.pcap.outputset import OutputSet

ROOT = Path(__file__).resolve().parents[2]

#: the parent: two writer processes for four pcapng files staged in DIR, then the first bytes
#: of a batch written straight into worker 0's queue pipe (multiprocessing's framing: a 4-byte
#: big-endian length, then the pickle), its pid printed, and a SIGKILL to itself
PARENT = """
import os, signal, struct, sys
from pathlib import Path
from tokenpcap.config.profiles import load_cluster
from tokenpcap.generate.output import Dispatcher, FileSpec, WriterConfig
from tests.generate.test_faults import _alive
from tokenpcap.pcap.outputset import OutputSet
out = Path(sys.argv[1])
c = load_cluster(sys.argv[2])
s = OutputSet(out, what="test")
specs = [FileSpec(s.path(f"f{i}.pcapng"), (i,)) for i in range(4)]
cfg = WriterConfig(c, "pcapng", 262144, 1, {i: (f"node{i}/nic0", "x") for i in range(4)})
d = Dispatcher(specs, cfg, 2)
os.write(d.queues[0]._writer.fileno(), struct.pack("!i", 1 << 20) + b"\\x80\\x04" * 8)
print(" ".join(str(p.pid) for p in d.procs), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux prctl and /proc")
def test_a_worker_reading_a_half_sent_batch_exits_when_the_parent_is_killed(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run([sys.executable, "-c", PARENT, str(out),
                        str(ROOT / "profiles" / "clusters" / "h100-rocev2-8x1.yaml")],
                       cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       timeout=120)
    assert r.returncode == -signal.SIGKILL
    workers = [int(p) for p in r.stdout.split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in workers):
        if time.monotonic() > deadline:
            for p in workers:
                if _alive(p):
                    os.kill(p, signal.SIGKILL)     # do not leave them behind
            pytest.fail("a writer process outlived its killed parent by 30 s")
        time.sleep(0.1)
    stages = [p for p in out.iterdir()]
    assert all(not list(st.iterdir()) for st in stages), "the workers kept their files"
    OutputSet(out).abort()                         # the lock is free: the next run may start
    assert list(out.iterdir()) == []


class _SignallingSink:
    """A stand-in for a Sink whose ``abort`` (and, if asked, ``add``) sends this process
    SIGUSR1, as Linux does once for each thread of a dying parent."""

    def __init__(self, on_add: str | None = None):
        self.on_add, self.aborts = on_add, 0

    def add(self, packets, labels, codes) -> None:
        if self.on_add == "signal":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif self.on_add == "fail":
            raise OutputError("disk full")

    def close(self):
        return (0, 0)

    def abort(self) -> None:
        self.aborts += 1
        os.kill(os.getpid(), signal.SIGUSR1)


class _Empty:
    """A queue that never delivers (the worker's one-second poll, at once)."""

    def get(self, timeout=None):
        raise queue.Empty


@pytest.fixture
def sigusr1():
    """Put back SIGUSR1's handler and clear the parent-death signal that ``_worker`` asks for."""
    old = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, old)
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None).prctl(output._PR_SET_PDEATHSIG, 0, 0, 0, 0)


def _run_worker(monkeypatch, sinks, q, parent=None):
    monkeypatch.setattr(output, "_open", lambda specs, cfg, builder=None: sinks)
    results: queue.Queue = queue.Queue()
    output._worker(0, [], None, q, results, os.getppid() if parent is None else parent)
    return [results.get_nowait() for _ in range(results.qsize())]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_second_parent_death_signal_while_dropping_the_files_is_ignored(monkeypatch, sigusr1):
    sinks = [_SignallingSink(), _SignallingSink()]
    q: queue.Queue = queue.Queue()
    q.put((0, None, None, None))
    q.put((1, None, None, None))
    sinks[1].on_add = "signal"                 # the first signal arrives in the middle of a batch
    assert _run_worker(monkeypatch, sinks, q) == []       # nothing reported, nothing raised
    assert all(s.aborts >= 1 for s in sinks)
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_parent_death_seen_by_getppid_ignores_the_signal_that_follows(monkeypatch, sigusr1):
    sinks = [_SignallingSink(), _SignallingSink()]
    parent = os.getppid()
    calls = iter([parent])                     # alive at the start, adopted by init after
    monkeypatch.setattr(output.os, "getppid", lambda: next(calls, 1))
    assert _run_worker(monkeypatch, sinks, _Empty(), parent) == []
    assert [s.aborts for s in sinks] == [1, 1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_parent_death_signal_while_dropping_after_an_error_is_not_raised(monkeypatch, sigusr1):
    sinks = [_SignallingSink("fail"), _SignallingSink()]
    q: queue.Queue = queue.Queue()
    q.put((0, None, None, None))
    reports = _run_worker(monkeypatch, sinks, q)
    assert all(s.aborts >= 1 for s in sinks)
    assert reports in ([], [("error", 0, "disk full")])
