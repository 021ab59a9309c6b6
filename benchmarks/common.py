"""Helpers the benchmark scripts share: repeated timing with best and spread, the file system a
path lives on, a plain write of N bytes (the physical limit), fsync, machine load.

Benchmarks only (not part of the package); standard library and numpy.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Timing", "fs_info", "fsync_path", "plain_write", "loadavg", "drop_file", "machine",
           "tree_dir"]


@dataclass
class Timing:
    """Seconds of repeated runs of one case: wall clock without and with the final fsync, and
    the CPU time of this process (all its threads, user + system) over the whole run."""

    write_s: list[float] = field(default_factory=list)   # until the file is closed
    fsync_s: list[float] = field(default_factory=list)   # until os.fsync of the file returned
    cpu_s: list[float] = field(default_factory=list)     # time.process_time() over the run

    def add(self, write_s: float, fsync_s: float, cpu_s: float) -> None:
        self.write_s.append(write_s)
        self.fsync_s.append(fsync_s)
        self.cpu_s.append(cpu_s)

    @staticmethod
    def best(xs: list[float]) -> float:
        return min(xs)

    @staticmethod
    def spread(xs: list[float]) -> float:
        """(slowest - fastest) / fastest: 0.10 means the slowest run took 10 % longer."""
        return (max(xs) - min(xs)) / min(xs) if xs and min(xs) > 0 else 0.0


def fs_info(path: Path) -> str:
    """``"ext4 on /dev/vda"`` / ``"tmpfs"``: what ``findmnt -T`` says about ``path``."""
    try:
        out = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", str(path)],
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return "unknown file system"
    if not out:
        return "unknown file system"
    return out[0] if out[0] == "tmpfs" or len(out) < 2 else f"{out[0]} on {out[1]}"


def fsync_path(path: Path) -> None:
    """Flush the file's data to the device (any descriptor of the inode will do)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_file(path: Path, sync: bool) -> None:
    """Remove ``path``; with ``sync``, also let the file system finish the unlink (ext4 with
    ``discard`` trims the freed blocks) so that it does not land in the next timed run."""
    path.unlink(missing_ok=True)
    if sync:
        os.sync()
        time.sleep(0.2)


_PLAIN_BUFFER_BYTES = 64 << 20


def plain_write(path: Path, nbytes: int, chunk_bytes: int = 8 << 20, drop_behind: bool = False
                ) -> tuple[float, float, float]:
    """Write ``nbytes`` of a prepared random buffer to a new file in ``chunk_bytes`` writes.

    The buffer (at most 64 MiB, cycled) is made before the clock starts. With ``drop_behind``,
    each write is followed by ``tokenpcap.pcap.dropbehind.DropBehind.wrote`` (what the capture
    writers do: a file past 1 GiB written back and released from the page cache as it grows),
    so that a writer and this plain write can be compared with the same page-cache discipline.
    Returns ``(seconds until close, seconds until fsync returned, CPU seconds)``. The file is
    left in place.
    """
    buf = np.random.default_rng(1).integers(0, 256, min(nbytes, _PLAIN_BUFFER_BYTES) or 1, np.uint8)
    mv = memoryview(buf)
    c0 = time.process_time()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    behind = None
    if drop_behind:
        # (imported here: the scripts put the tree on sys.path before using it)
        from tokenpcap.pcap.dropbehind import DropBehind
        behind = DropBehind(fd)
    left, at = nbytes, 0
    while left:
        n = min(chunk_bytes, left, buf.size - at)
        view = mv[at:at + n]
        while view.nbytes:
            view = view[os.write(fd, view):]
        if behind is not None:
            behind.wrote(n)
        left -= n
        at = (at + n) % buf.size
    os.close(fd)
    t1 = time.perf_counter()
    fsync_path(path)
    return t1 - t0, time.perf_counter() - t0, time.process_time() - c0


def loadavg() -> str:
    """``"3.72 3.42 2.25"``: 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine() -> str:
    """One line: CPUs, model name, memory."""
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} CPUs ({model}), {mem:.0f} GiB RAM"


def tree_dir(root: Path, rev: str, tmp: str) -> tuple[str, Path]:
    """``(label, directory)`` of another tree than ``root``: a checkout's directory as it is, or
    a git revision of ``root``'s repository with its ``tokenpcap`` extracted into ``tmp``."""
    if Path(rev).is_dir():
        head = subprocess.run(["git", "-C", rev, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
        return f"{Path(rev).name} ({head or 'no git'})", Path(rev)
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev],
                         capture_output=True, text=True, check=True).stdout.strip()
    arc = subprocess.run(["git", "-C", str(root), "archive", sha, "tokenpcap"],
                         capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
    return f"{rev} ({sha})", Path(tmp)
