"""output: writer processes never outlive a killed parent. The parent is SIGKILLed in the middle
of sending a batch (a real child process: the batch's length header and its first bytes are in
the worker's pipe, the rest never comes); the worker, blocked reading it, drops its files and
exits, and the directory's lock is free again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.generate.test_faults import _alive
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
