"""tokenpcap.cli.common and the stops of tokenpcap.errors: SIGINT/SIGTERM stop a command even
when the exception they raise is swallowed by a callback from C (numba's compiler calls back
into Python through ctypes while it compiles the engine: a Ctrl-C then was printed as "Exception
ignored", the run went on, landed its files and exited 0)."""
from __future__ import annotations

import ctypes
import os
import signal
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
