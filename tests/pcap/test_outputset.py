"""OutputSet: a set of files lands whole or not at all, one run per directory; AtomicOutput's
leftovers of killed processes are removed by the next writer."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tokenpcap.errors import OutputError
from tokenpcap.pcap.output import AtomicOutput, remove_stale_parts
from tokenpcap.pcap.outputset import COMMIT_MARK, STAGE_PREFIX, OutputSet, recover


def _files(d: Path) -> dict[str, bytes]:
    """Every entry of ``d`` (a directory left behind would make read_bytes fail)."""
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _earlier(d: Path) -> dict[str, bytes]:
    d.mkdir(exist_ok=True)
    for n, body in (("a.pcap", b"old a"), ("b.pcap", b"old b"), ("notes.txt", b"mine")):
        (d / n).write_bytes(body)
    return _files(d)


def test_commit_replaces_the_set_and_nothing_else(tmp_path):
    before = _earlier(tmp_path / "out")
    with OutputSet(tmp_path / "out") as s:
        for n in ("a.pcap", "b.pcap", "c.pcap"):
            s.path(n).write_bytes(b"new " + n.encode())
        assert {p.name for p in (tmp_path / "out").iterdir()} - {s.stage.name} == \
            before.keys()                                   # nothing in place before commit
        done = s.commit()
    assert [p.name for p in done] == ["a.pcap", "b.pcap", "c.pcap"]
    assert _files(tmp_path / "out") == {"a.pcap": b"new a.pcap", "b.pcap": b"new b.pcap",
                                        "c.pcap": b"new c.pcap", "notes.txt": b"mine"}


@pytest.mark.parametrize("how", ["exception", "abort", "no commit"])
def test_anything_but_a_commit_leaves_exactly_the_earlier_files(tmp_path, how):
    before = _earlier(tmp_path / "out")
    try:
        with OutputSet(tmp_path / "out") as s:
            s.path("a.pcap").write_bytes(b"half")
            if how == "exception":
                raise KeyboardInterrupt
            if how == "abort":
                s.abort()
    except KeyboardInterrupt:
        pass
    assert _files(tmp_path / "out") == before


def test_a_second_set_in_one_directory_is_refused_until_the_first_ends(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    first = OutputSet(d)
    with pytest.raises(OutputError, match=rf"^{d}: got another tokenpcap run writing into it "
                                          rf"\(pid {os.getpid()}\), expected one run per "
                                          "directory at a time"):
        OutputSet(d)
    first.abort()
    OutputSet(d).abort()                 # free again
    other = tmp_path / "other"
    other.mkdir()
    OutputSet(other).abort()             # other directories were never affected


def test_the_next_set_finishes_a_marked_stage_and_removes_unmarked_ones(tmp_path):
    """What a SIGKILL leaves: a stage killed while renaming (marker written: its set is
    completed) and a stage killed while writing (no marker: removed)."""
    d = tmp_path / "out"
    _earlier(d)
    marked = d / f"{STAGE_PREFIX}111.aaaa"
    marked.mkdir()
    (marked / "b.pcap").write_bytes(b"new b")            # a.pcap was renamed already
    (d / "a.pcap").write_bytes(b"new a")
    (marked / COMMIT_MARK).write_text("a.pcap\nb.pcap\n")
    unmarked = d / f"{STAGE_PREFIX}222.bbbb"
    unmarked.mkdir()
    (unmarked / ".x.pcap.222.zz.part").write_bytes(b"half")
    OutputSet(d).abort()
    assert _files(d) == {"a.pcap": b"new a", "b.pcap": b"new b", "notes.txt": b"mine"}
    assert recover(d) == []


def test_bad_names_and_directories(tmp_path):
    with pytest.raises(OutputError, match="cannot open it"):
        OutputSet(tmp_path / "missing")
    with OutputSet(tmp_path) as s:
        for bad in ("../x", "a/b", ".hidden", ""):
            with pytest.raises(OutputError, match="expected a plain file name"):
                s.path(bad)


def test_atomic_output_removes_the_parts_of_killed_writers_only(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".x.pcap.{dead}.abcd.part"
    live = tmp_path / f".x.pcap.{os.getpid()}.efgh.part"
    other = tmp_path / f".y.pcap.{dead}.abcd.part"
    for p in (stale, live, other):
        p.write_bytes(b"half")
    w = AtomicOutput(tmp_path / "x.pcap", threaded=False)
    assert not stale.exists() and live.exists() and other.exists()
    w.write(b"whole")
    w.close()
    assert (tmp_path / "x.pcap").read_bytes() == b"whole"
    assert remove_stale_parts(tmp_path / "y.pcap") == [other]


def test_stopped_commits_lists_marked_stages_only_and_the_files_they_still_hold(tmp_path):
    """A marked stage (stopped while renaming) is listed with the files not yet moved; an
    unmarked one (stopped while writing, or writing now) is not; none once the next set ran."""
    from tokenpcap.pcap.outputset import stopped_commit_text, stopped_commits

    d = tmp_path / "out"
    _earlier(d)
    assert stopped_commits(d) == [] and stopped_commit_text(d) is None
    unmarked = d / f"{STAGE_PREFIX}222.bbbb"
    unmarked.mkdir()
    (unmarked / "a.pcap").write_bytes(b"half")
    assert stopped_commits(d) == []
    marked = d / f"{STAGE_PREFIX}111.aaaa"
    marked.mkdir()
    (marked / "b.pcap").write_bytes(b"new b")
    (d / "a.pcap").write_bytes(b"new a")
    (marked / COMMIT_MARK).write_text("a.pcap\nb.pcap\n")
    assert stopped_commits(d) == [(marked, ["b.pcap"])]
    assert stopped_commit_text(d).startswith(f"{d}: got a run stopped while moving its files "
                                             f"into place (1 of them still in {marked.name})")
    OutputSet(d).abort()
    assert stopped_commits(d) == [] and stopped_commits(tmp_path / "missing") == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_in_the_set_is_refused_and_never_replaced(tmp_path):
    """The commit renames over each destination: a FIFO (or a device such as ``/dev/null``)
    there would be replaced. path() refuses it before any work; one made after path() is
    refused by the commit, which then moves nothing and removes the stage."""
    import stat

    os.mkfifo(tmp_path / "a.pcap")
    with OutputSet(tmp_path) as s:
        with pytest.raises(OutputError, match=r"a.pcap: got a FIFO \(named pipe\), expected a "
                                              r"regular file or a new path"):
            s.path("a.pcap")
    with pytest.raises(OutputError, match=r"b.pcap: got a FIFO"):
        with OutputSet(tmp_path) as s:
            s.path("c.pcap").write_bytes(b"c")
            s.path("b.pcap").write_bytes(b"b")
            os.mkfifo(tmp_path / "b.pcap")
            s.commit()
    assert all(stat.S_ISFIFO(os.stat(tmp_path / n).st_mode) for n in ("a.pcap", "b.pcap"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pcap", "b.pcap"]
    with OutputSet(tmp_path) as s:                  # the directory was released
        s.path("c.pcap").write_bytes(b"c")
        assert s.commit() == [tmp_path / "c.pcap"]


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="needs POSIX signal masks")
def test_a_signal_taken_by_another_thread_during_the_renames_waits_for_the_whole_set(
        tmp_path, monkeypatch):
    """SIGINT sent to the process while the files are renamed: with another thread alive (a
    writer queue's feeder thread) the kernel may hand the signal to that thread, and Python then
    runs the handler in the main thread between two renames. The set still lands whole and the
    interrupt comes right after (before, one file of the new set beside the earlier ones)."""
    import threading
    import time

    out = tmp_path / "out"
    _earlier(out)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)   # started before any mask
    other.start()
    real = os.replace
    sent = []

    def replace(src, dst):
        real(src, dst)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)                                     # delivered to `other` meanwhile
            for _ in range(1000):                              # bytecode boundaries
                pass

    monkeypatch.setattr("tokenpcap.pcap.outputset.os.replace", replace)
    # Python's own SIGINT handler, whatever the test runner inherited (a background job starts
    # with SIGINT ignored)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with OutputSet(out) as s:
                for n in ("a.pcap", "b.pcap", "c.pcap"):
                    s.path(n).write_bytes(b"new " + n.encode())
                s.commit()
    finally:
        stop.set()
        signal.signal(signal.SIGINT, old_int)
    assert sent
    assert _files(out) == {"a.pcap": b"new a.pcap", "b.pcap": b"new b.pcap",
                           "c.pcap": b"new c.pcap", "notes.txt": b"mine"}


@pytest.mark.parametrize("rounds", range(5))
def test_abort_under_a_writer_still_creating_files_leaves_nothing(tmp_path, rounds):
    """A cancelled cluster task stops only at its next progress report: until then it keeps
    making directories and files under the stage's path. The abort removes the stage whole
    anyway, and the writer's next create fails instead of landing beside the earlier files."""
    import threading
    before = _earlier(tmp_path / "out")
    s = OutputSet(tmp_path / "out")
    started, stop, errors = threading.Event(), threading.Event(), []

    def writer():
        shard = s.stage / ".shard-00000"
        try:
            shard.mkdir()
            for i in range(100_000):
                if stop.is_set():
                    return
                d = shard / f"d{i}"
                d.mkdir()
                (d / "x.pcap").write_bytes(b"x" * 100)
                started.set()
        except OSError as err:
            errors.append(err)
        finally:
            started.set()

    t = threading.Thread(target=writer)
    t.start()
    started.wait()
    s.abort()
    t.join(timeout=10)
    stop.set()
    t.join()
    assert errors and all(isinstance(e, FileNotFoundError) for e in errors)
    assert _files(tmp_path / "out") == before
