"""python -m tokenpcap: a stop while the command line is still being imported (numpy, numba,
the command modules: about half a second) is the same one line and exit status as a stop while
a command runs, not a KeyboardInterrupt traceback from inside an import."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import os, signal, sys, time
import tokenpcap.__main__ as m

class StopDuringImport:             # the signal arrives while tokenpcap.cli is being imported
    def find_spec(self, name, path=None, target=None):
        if name == "tokenpcap.cli":
            os.kill(os.getpid(), signal.SIG{sig})
            time.sleep(5)
        return None

sys.meta_path.insert(0, StopDuringImport())
sys.argv = ["tokenpcap", "--version"]
m.run()
"""


@pytest.mark.parametrize("sig,code", [("INT", 130), ("TERM", 143)])
def test_a_stop_while_importing_is_one_line_and_128_plus_the_signal(sig, code):
    r = subprocess.run([sys.executable, "-c", CHILD.format(sig=sig)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert r.returncode == code, r.stderr
    assert r.stderr == f"error: stopped (SIG{sig}): nothing half-written was kept\n"
    assert r.stdout == ""
