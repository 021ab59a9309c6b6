"""The memory of the machine a run is on, which bounds the state one run may plan to hold
(:data:`tokenpcap.schedule.limits.MAX_STATE_BYTES`).

:func:`memory_bytes` is the physical memory (``sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE)``,
POSIX), lowered to the memory limit of the process's control groups when they set one: cgroup v2's
``memory.max`` or cgroup v1's ``memory.limit_in_bytes`` (Linux kernel documentation,
``admin-guide/cgroup-v2.rst``, "memory.max", and ``admin-guide/cgroup-v1/memory.rst``) of the
group ``/proc/self/cgroup`` names and of each of its ancestors (a parent's limit binds its
children too), under ``/sys/fs/cgroup`` (v2, or v1's ``memory`` hierarchy), and at the mount's
root, which is the group itself in a container. A limit that is "max" (v2) or not below the
physical memory (v1 writes a page-aligned ``LONG_MAX`` for none) is no limit.

:data:`MEMORY_SHARE` of it is what one run may plan to hold (:func:`state_limit_bytes`): the rest
is left to what a run does beside the engine and the estimate does not count (the writer
processes of ``generate``, each up to about 0.8 GB of RSS per GB of full-size frames it writes,
docs/analysis.md; the page cache of the files written) and to whatever else runs on the machine.
On the project's reference machine (25,276,182,528 B of physical memory, no cgroup limit) that is
15,165,709,516 B.
"""
from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

__all__ = ["memory_bytes", "state_limit_bytes", "cgroup_limit_files", "MEMORY_SHARE"]

#: The share of :func:`memory_bytes` one run may plan to hold (module docstring).
MEMORY_SHARE = Fraction(3, 5)
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_limit_files(proc_cgroup: str | None = None,
                       root: Path = _CGROUP_ROOT) -> tuple[Path, ...]:
    """The files that may hold this process's memory limit (module docstring): the mount
    root's, then those of the group named in ``proc_cgroup`` (the text of
    ``/proc/self/cgroup``: ``0::/path`` for v2, ``N:...memory...:/path`` for v1; read when None)
    and of each ancestor. Files that do not exist are listed too; readers skip them."""
    if proc_cgroup is None:
        try:
            proc_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            proc_cgroup = ""
    files = [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        if parts[0] == "0" and parts[1] == "":
            base, name = root, "memory.max"
        elif "memory" in parts[1].split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        rel = Path(parts[2].lstrip("/"))
        files += [base / p / name for p in (rel, *rel.parents) if str(p) != "."]
    return tuple(files)


def _cgroup_limit_bytes(files: tuple[Path, ...]) -> int | None:
    """The lowest numeric limit in ``files`` (bytes), or None when none is set or readable."""
    limits = []
    for f in files:
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


def memory_bytes(cgroup_files: tuple[Path, ...] | None = None) -> int:
    """The memory this process may use (bytes, int): the machine's physical memory, or the
    lowest limit of its control groups (``cgroup_files``, default :func:`cgroup_limit_files`)
    when that is lower (module docstring). Raises nothing: on a system without
    ``_SC_PHYS_PAGES`` it is the cgroup limit, or 8 GB when there is none either."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 0
    files = cgroup_limit_files() if cgroup_files is None else cgroup_files
    limit = _cgroup_limit_bytes(files)
    known = [m for m in (physical, limit) if m and m > 0]
    return min(known) if known else 8_000_000_000


def state_limit_bytes(memory: int | None = None) -> int:
    """What one run may plan to hold (bytes, int): :data:`MEMORY_SHARE` of ``memory`` (default
    :func:`memory_bytes`), rounded down."""
    m = memory_bytes() if memory is None else memory
    return int(m * MEMORY_SHARE)
