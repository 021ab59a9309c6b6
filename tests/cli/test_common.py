"""tokenpcap.cli.common and the stops of tokenpcap.errors: SIGINT/SIGTERM stop a command even
when the exception they raise is swallowed by a callback from C (numba's compiler calls back
into Python through ctypes while it compiles the engine: a Ctrl-C then was printed as "Exception
ignored", the run went on, landed its files and exited 0)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import click
import pytest
from click.testing import CliRunner

from tokenpcap.cli.common import library_errors
from tokenpcap.errors import Terminated, clear_stops, note_stop, raise_if_stopped
from tokenpcap.pcap.outputset import OutputSet

SWALLOW = ctypes.CFUNCTYPE(None)            # a callback from C: what it raises is "ignored"


def _signal_inside_a_c_callback(sig: int) -> None:
    def body():
        os.kill(os.getpid(), sig)
        for _ in range(10_000):             # the handler runs here and its exception is lost
            time.sleep(0)

    SWALLOW(body)()


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"),
                                           (signal.SIGTERM, 143, "SIGTERM")])
def test_a_stop_swallowed_by_a_c_callback_still_stops_the_command_before_its_files_land(
        tmp_path, monkeypatch, sig, code, name):
    import sys

    lost = []                               # "Exception ignored" reports outside the command
    monkeypatch.setattr(sys, "unraisablehook", lambda u: lost.append(u.exc_type))
    reached = []
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.png").write_bytes(b"earlier")

    @click.command()
    @library_errors
    def cmd():
        with OutputSet(out) as s:
            s.path("a.png").write_bytes(b"new")
            _signal_inside_a_c_callback(sig)   # lost here ...
            reached.append(1)
            s.commit()                          # ... raised again here: nothing lands
        click.echo("done")

    r = CliRunner().invoke(cmd, [])
    assert reached == [1] and lost == []    # lost in the callback, not reported as a traceback
    assert r.exit_code == code, r.output
    assert r.output == f"error: stopped ({name}): nothing half-written was kept\n"
    assert [p.name for p in out.iterdir()] == ["a.png"]
    assert (out / "a.png").read_bytes() == b"earlier"


def test_raise_if_stopped_raises_a_noted_stop_once():
    clear_stops()
    raise_if_stopped()                                     # nothing noted: nothing raised
    note_stop(signal.SIGTERM)
    with pytest.raises(Terminated):
        raise_if_stopped()
    raise_if_stopped()                                     # once
    note_stop(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        raise_if_stopped()


def test_a_path_the_file_system_cannot_hold_is_one_line_and_exit_1(tmp_path):
    """Met outside a writer's own check (a stat of an input or output path): still one line."""
    long = tmp_path / ("n" * 300)

    @click.command()
    @library_errors
    def cmd():
        long.exists()                        # ENAMETOOLONG, not ENOENT: raised by pathlib

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == 1, r.output
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    assert r.output.startswith(f"error: {long}: got a path the file system cannot hold (File "
                               "name too long)")


@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"),
                                           (signal.SIGTERM, 143, "SIGTERM")])
def test_an_error_that_follows_a_swallowed_stop_is_reported_as_the_stop(sig, code, name):
    """numba, its KeyboardInterrupt lost in a callback, goes on with a half-built library and
    fails with a RuntimeError before any place that raises a noted stop is reached."""

    @click.command()
    @library_errors
    def cmd():
        _signal_inside_a_c_callback(sig)
        raise RuntimeError("no compiled object yet for <Library 'flush_out'>")

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == code, (r.output, r.exception)
    assert r.output == f"error: stopped ({name}): nothing half-written was kept\n"


def test_an_error_without_a_stop_is_not_taken_for_one():
    @click.command()
    @library_errors
    def cmd():
        raise RuntimeError("internal")

    r = CliRunner().invoke(cmd, [])
    assert isinstance(r.exception, RuntimeError)


class _BrokenOnDelete:
    """As a numba/llvmlite object a stop cut half-built: its destructor fails."""

    def __del__(self):
        raise AttributeError("'PipelineTuningOptions' object has no attribute '_ptr'")


def test_after_a_stop_a_failing_destructor_adds_no_report():
    """A SIGTERM while numba set up its compiler left an object whose destructor failed at
    teardown: "Exception ignored in ... AttributeError" followed the one stop line (found by
    the fuzz campaign's signal surface)."""
    @click.command()
    @library_errors
    def cmd():
        raise Terminated(signal.SIGTERM)

    old, reported = sys.unraisablehook, []
    sys.unraisablehook = reported.append            # Python's default would print the report
    try:
        r = CliRunner().invoke(cmd, [])
        assert r.exit_code == 143
        obj = _BrokenOnDelete()
        del obj
        assert reported == []
    finally:
        sys.unraisablehook = old


#: ``generate`` whose engine compile (faked: numba's compiler calling back through ctypes) meets
#: a SIGINT inside a callback, then fails as numba does after it
COMPILE_CHILD = """
import ctypes, os, signal, sys, time
import tokenpcap.__main__ as m
from tokenpcap.schedule import runner

def compile_then_fail(self):
    def llvm_callback():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            time.sleep(0)
    ctypes.CFUNCTYPE(None)(llvm_callback)()
    raise RuntimeError("no compiled object yet for <Library 'tx_time_ns_ceil'>")
    yield

runner.Schedule.run = compile_then_fail
sys.argv = ["tokenpcap", "generate", "profiles/scenarios/dante.yaml", "-o", sys.argv[1], "--quiet"]
m.run()
"""


def test_sigint_during_the_first_compile_of_generate_is_one_line_and_130(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", COMPILE_CHILD, str(tmp_path / "out")], cwd=root,
                       capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 130, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: stopped (SIGINT)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ignored_when_the_command_started_stays_ignored(tmp_path, sig):
    """A process started with SIGINT or SIGTERM ignored (a background job of a shell script,
    ``trap '' INT``, a supervisor that shields its workers) keeps ignoring it while a command
    runs, as ``python -m tokenpcap`` does while it imports (POSIX: a program installs a
    handler only where the signal was not ignored; CPython itself keeps an inherited SIG_IGN
    for SIGINT). The command completes, its files land and it exits 0."""
    out = tmp_path / "out"
    out.mkdir()

    @click.command()
    @library_errors
    def cmd():
        with OutputSet(out) as s:
            s.path("a.png").write_bytes(b"new")
            os.kill(os.getpid(), sig)
            for _ in range(1000):
                time.sleep(0)
            s.commit()
        click.echo("done")

    old = signal.signal(sig, signal.SIG_IGN)
    try:
        r = CliRunner().invoke(cmd, [])
        assert signal.getsignal(sig) is signal.SIG_IGN
    finally:
        signal.signal(sig, old)
    assert r.exit_code == 0 and r.output == "done\n", r.output
    assert (out / "a.png").read_bytes() == b"new"
