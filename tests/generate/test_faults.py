"""A run's files land whole or not at all: SIGINT, SIGTERM and SIGKILL at random moments of
writing, a full disk, two runs into one directory. After each, the directory holds either the
complete new set or exactly the earlier one (compared byte for byte with reference runs),
once the next run has removed what a SIGKILL leaves (a hidden stage directory).

The run is the Dante scenario at --scale 8 (32 pcapng files, ~170 MB, a few seconds of
writing), started as ``python -m tokenpcap generate`` in a child process. The moments are drawn
from a fixed seed (printed on failure).
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tokenpcap.pcap.outputset import STAGE_PREFIX, OutputSet

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
SCALE = "8"
LINUX = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")


def _cmd(out: Path, seed: int, jobs: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tokenpcap", "generate", str(DANTE), "-o", str(out), "--scale",
            SCALE, "--seed", str(seed), "--jobs", str(jobs), *extra]


def digest(d: Path) -> dict[str, str]:
    """name -> sha256 of every visible file of ``d``."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.iterdir()) if not p.name.startswith(".")}


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Reference sets: seed 1 (the earlier run) and seed 2 (the new one)."""
    base = tmp_path_factory.mktemp("refs")
    out = {}
    for seed in (1, 2):
        d = base / f"seed{seed}"
        r = subprocess.run(_cmd(d, seed, 2), cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        out[seed] = (d, digest(d))
    assert len(out[1][1]) == 32 and out[1][1] != out[2][1]
    yield out
    shutil.rmtree(base, ignore_errors=True)


def _earlier_set(refs, target: Path) -> None:
    """``target`` holding the seed-1 set (hard links: a run replaces files by rename)."""
    target.mkdir()
    for p in refs[1][0].iterdir():
        os.link(p, target / p.name)


def _one_error_line(err: str) -> str:
    """The error line of a failed run's stderr, checked to be its one error line and its last:
    before it stand only the stage lines of steps that took (or were estimated to take) over a
    second (:mod:`tokenpcap.cli.progress`), more of them on a loaded machine."""
    lines = err.splitlines()
    assert lines and err.endswith("\n"), err
    assert sum(ln.startswith("error") for ln in lines) == 1, err
    assert all(ln.startswith("tokenpcap: ") for ln in lines[:-1]), err
    return lines[-1]


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out.update(int(x) for x in (task / "children").read_text().split())
    except FileNotFoundError:
        pass
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _writing(out: Path) -> bool:
    """A stage directory with at least one file in it: the run is writing."""
    return any(p.name.startswith(STAGE_PREFIX) and any(p.iterdir())
               for p in out.iterdir()) if out.is_dir() else False


def _start_and_wait_for_writing(cmd: list[str], out: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while not _writing(out):
        if proc.poll() is not None:
            raise AssertionError(f"run ended before writing: {proc.communicate()}")
        assert time.monotonic() < deadline, "no file written within 300 s"
        time.sleep(0.01)
    return proc


def _next_run_cleans(out: Path) -> None:
    """What the next run into ``out`` does first (under the lock): finish or drop stages."""
    deadline = time.monotonic() + 30
    while True:             # a killed parent's writers hold the lock until they have stopped
        try:
            OutputSet(out).abort()
            break
        except Exception:   # noqa: BLE001 - "another run writing into it" for up to a second
            assert time.monotonic() < deadline, "the directory stayed locked"
            time.sleep(0.2)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


CASES = [(sig, jobs, k) for sig in ("SIGINT", "SIGTERM", "SIGKILL") for jobs in (1, 2)
         for k in range(1)]


@LINUX
@pytest.mark.parametrize("sig,jobs,k", CASES, ids=[f"{s}-jobs{j}-{k}" for s, j, k in CASES])
def test_a_signal_at_a_random_moment_leaves_the_earlier_set_or_the_complete_new_one(
        refs, tmp_path, sig, jobs, k):
    rnd = random.Random(f"{sig}{jobs}{k}")
    delay = rnd.uniform(0.0, 1.0)
    out = tmp_path / "out"
    _earlier_set(refs, out)
    proc = _start_and_wait_for_writing(_cmd(out, 2, jobs), out)
    kids = _children(proc.pid)
    time.sleep(delay)
    t0 = time.monotonic()
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    latency = time.monotonic() - t0
    got = digest(out)
    where = f"{sig} after {delay:.2f} s of writing, --jobs {jobs}: exit {proc.returncode}, {err!r}"
    if sig == "SIGKILL":
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in kids):             # writers notice and stop (<= 1 s)
            assert time.monotonic() < deadline, where
            time.sleep(0.1)
        _next_run_cleans(out)
        got = digest(out)
    elif proc.returncode == -getattr(signal, sig):
        # the run had finished and the process was exiting, its handlers gone: the default
        # action ends it; the set is complete
        assert got == refs[2][1], where
    elif proc.returncode != 0:
        assert proc.returncode == 128 + getattr(signal, sig), where
        assert _one_error_line(err).startswith(f"error: stopped ({sig})"), where
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")], where
        assert latency < 20, where          # promptly (measured ~0.3 s; generous under load)
    assert got in (refs[1][1], refs[2][1]), where
    if got == refs[1][1] and sig != "SIGKILL" and proc.returncode != 0:
        assert "holds what it held before" in err, where


@LINUX
def test_two_runs_into_one_directory_never_mix(refs, tmp_path):
    """The second run is refused at once with one line; the directory holds the first run's
    complete set (before: both exited 0 with 6 files of one and 26 of the other)."""
    out = tmp_path / "out"
    _earlier_set(refs, out)
    first = _start_and_wait_for_writing(_cmd(out, 2, 2), out)
    first.send_signal(signal.SIGSTOP)           # still writing while the second one starts
    try:
        second = subprocess.run(_cmd(out, 1, 2), cwd=ROOT, capture_output=True, text=True,
                                timeout=300)
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 1, second
    assert second.stderr.startswith(f"error: {out}: got another tokenpcap run writing into it "
                                    f"(pid {first.pid}), expected one run per directory")
    assert second.stderr.count("\n") == 1
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err
    assert digest(out) == refs[2][1]


def _mount_tmpfs(path: Path, size_mb: int) -> bool:
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                       capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_full_disk_leaves_the_earlier_set(refs, tmp_path, jobs):
    """A tmpfs holding the earlier set and room for half of the new one: without --force the
    run is refused before writing; with --force it fails when the disk is full, and the earlier
    set is left whole (before: 7 finished new files stayed)."""
    mnt = tmp_path / "mnt"
    size = sum(p.stat().st_size for p in refs[1][0].iterdir())
    if not _mount_tmpfs(mnt, size * 3 // 2 // (1 << 20)):
        pytest.skip("cannot mount a tmpfs here (no CAP_SYS_ADMIN in this container)")
    try:
        out = mnt / "out"
        out.mkdir()
        for p in refs[1][0].iterdir():
            shutil.copyfile(p, out / p.name)
        r = subprocess.run(_cmd(out, 2, jobs), cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 1 and "free space got" in r.stderr, r.stderr
        assert "before simulating" in r.stderr            # from the plan, no work done
        r = subprocess.run(_cmd(out, 2, jobs, "--force"), cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 1 and "No space left on device" in r.stderr, r.stderr
        assert _one_error_line(r.stderr).startswith("error: "), r.stderr
        assert digest(out) == refs[1][1]
        assert not [p.name for p in out.iterdir() if p.name.startswith(".")]
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
