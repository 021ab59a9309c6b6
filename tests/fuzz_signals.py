"""The fuzz surface of signals at random moments (the rules: tests/fuzz_surfaces.py):
``python -m tokenpcap CMD`` sent SIGINT or SIGTERM from start-up to the end, sometimes with an
empty numba cache, its stderr, exit status and what it left checked; and the peak resident set
of that process (:func:`child_peak_kb`) for the campaign's memory report.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fuzzing import ROOT, WrongOutput

#: name -> (argv after ``python -m tokenpcap`` with ``{out}``, ``{scen}``, ``{cap}``; the
#: seconds a whole run takes here, warm: the signal comes within 1.3x of it)
_SIGNAL_COMMANDS = {
    "generate": (["generate", "{scen}", "--scale", "64", "-o", "{out}"], 4.0),
    "generate-jobs": (["generate", "{scen}", "--scale", "64", "--jobs", "2", "-o", "{out}"],
                      5.0),
    "run": (["run", "{scen}", "--scale", "64", "-o", "{out}"], 5.0),
    "plot": (["plot", "{cap}", "-o", "{out}"], 4.0),
    "export": (["export", "{scen}", "--to", "hpcc", "-o", "{out}"], 2.5),
    "inspect": (["inspect", "{cap}", "--json"], 2.0),
}
#: seconds the engine's first compile takes with an empty numba cache (2 cores, load ~1)
COLD_COMPILE_S = 40.0


def make_signal(rng: random.Random, work: Path) -> bytes:
    cmd = rng.choice(sorted(_SIGNAL_COMMANDS))
    cold = cmd in ("generate", "run") and rng.random() < 0.05
    span = COLD_COMPILE_S if cold else _SIGNAL_COMMANDS[cmd][1] * 1.3
    delay = rng.choice((rng.uniform(0, 0.8), rng.uniform(0, span)))    # start-up, or anywhere
    return json.dumps({"cmd": cmd, "sig": rng.choice(("INT", "TERM")), "delay_s": delay,
                       "cold": cold}).encode()


def _wait_until_python_runs_ours(pid: int, limit_s: float = 20.0) -> None:
    """Return once process ``pid`` has mapped numpy's core library (or ended): by then
    ``tokenpcap/__main__`` has installed its stop handlers (it imports the command line, and
    numpy with it, after them). Before that, for about 0.1 s, CPython itself starts (the
    interpreter, ``site``, ``runpy``) and a SIGINT gets Python's default ``KeyboardInterrupt``
    before any line of tokenpcap has run; tests/test_main.py covers the moments between."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                if b"_multiarray_umath" in f.read():
                    return
        except OSError:
            return
        time.sleep(0.002)


def _tree(top: Path) -> list[str]:
    """Every file and directory under ``top`` (hidden ones too), relative, sorted."""
    return sorted(os.path.relpath(os.path.join(d, n), top)
                  for d, dirs, files in os.walk(top) for n in dirs + files)


#: cmd -> the tree a run of it leaves when nothing stops it (filled on first need)
_COMPLETE: dict[str, list[str]] = {}


def _signal_argv(cmd: str, work: Path, out: Path) -> list[str]:
    from tests.fuzz_surfaces import _scenario_file, _small_capture

    fill = {"out": str(out / "o"), "scen": str(_scenario_file(work)),
            "cap": str(_small_capture(work))}
    return [sys.executable, "-m", "tokenpcap", *(a.format(**fill)
                                                 for a in _SIGNAL_COMMANDS[cmd][0])]


def _complete_tree(cmd: str, work: Path) -> list[str]:
    if cmd not in _COMPLETE:
        out = work / f"complete-{cmd}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        r = subprocess.run(_signal_argv(cmd, work, out), cwd=work, capture_output=True,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600)
        if r.returncode != 0:
            raise WrongOutput(f"{cmd} without a signal: exit {r.returncode}, "
                              f"{r.stderr[-300:]!r}")
        _COMPLETE[cmd] = _tree(out)
        shutil.rmtree(out, ignore_errors=True)
    return _COMPLETE[cmd]


#: peak resident set (KiB) of the last process a case started, and of its own children
_CHILD_PEAK_KB = [0]


def child_peak_kb() -> int:
    """The peak resident set (KiB) of the process the last case started (0: none), read from
    ``wait4``'s rusage, which covers that process and the children it waited for."""
    kb, _CHILD_PEAK_KB[0] = _CHILD_PEAK_KB[0], 0
    return kb


def _stderr_and_wait(p: subprocess.Popen, timeout_s: float) -> bytes:
    """``p``'s whole stderr, then reap it with ``os.wait4`` to keep its peak resident set
    (:func:`child_peak_kb`); raises ``subprocess.TimeoutExpired`` after ``timeout_s``."""
    import selectors

    end = time.monotonic() + timeout_s
    chunks = []
    with selectors.DefaultSelector() as sel:
        sel.register(p.stderr, selectors.EVENT_READ)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(p.args, timeout_s)
            if sel.select(left):
                chunk = os.read(p.stderr.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > end:
            raise subprocess.TimeoutExpired(p.args, timeout_s)
        time.sleep(0.01)
    p.returncode = os.waitstatus_to_exitcode(status)
    _CHILD_PEAK_KB[0] = usage.ru_maxrss
    p.stderr.close()
    return b"".join(chunks)


def run_signal(data: bytes, work: Path) -> str:
    case = json.loads(data)
    outdir = work / "sig"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir()
    argv = _signal_argv(case["cmd"], work, outdir)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if case["cold"]:
        env["NUMBA_CACHE_DIR"] = str(outdir.parent / "numba-cold")
        shutil.rmtree(env["NUMBA_CACHE_DIR"], ignore_errors=True)
    p = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_until_python_runs_ours(p.pid)
    time.sleep(case["delay_s"])
    sig = signal.SIGINT if case["sig"] == "INT" else signal.SIGTERM
    if os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        os.kill(p.pid, sig)             # not reaped yet (Popen.poll would reap it: no rusage)
    try:
        err = _stderr_and_wait(p, 120.0)
    finally:
        if p.returncode is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = err.decode("utf-8", "replace")
    left = _tree(outdir)
    shutil.rmtree(outdir, ignore_errors=True)
    what = f"{case['cmd']} SIG{case['sig']} after {case['delay_s']:.2f} s"
    if "Traceback" in text or "Exception ignored" in text:
        raise WrongOutput(f"{what}: {text[-400:]!r}")
    if p.returncode == 0:
        if left != _complete_tree(case["cmd"], work):
            raise WrongOutput(f"{what}: exit 0 with {left[:4]}")
        return "ok"
    lines = text.strip().splitlines()
    if p.returncode != 128 + sig or not lines or not lines[-1].startswith(
            f"error: stopped (SIG{case['sig']})"):
        raise WrongOutput(f"{what}: exit {p.returncode}, stderr {text[-300:]!r}")
    if left and left != _complete_tree(case["cmd"], work):   # stopped after its commit: whole
        raise WrongOutput(f"{what}: stopped and left {left[:4]}")
    return "error"
