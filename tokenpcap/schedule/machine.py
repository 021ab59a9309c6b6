"""The memory of the machine a run is on, which bounds the state one run may plan to hold
(:data:`tokenpcap.schedule.limits.MAX_STATE_BYTES`).

:func:`memory_bytes` is the physical memory (``sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE)``,
POSIX), lowered to the memory limit of the process's control group when it sets one: cgroup v2's
``memory.max`` or cgroup v1's ``memory.limit_in_bytes`` (Linux kernel documentation,
``admin-guide/cgroup-v2.rst``, "memory.max", and ``admin-guide/cgroup-v1/memory.rst``), as a
container sees them mounted at ``/sys/fs/cgroup``. A limit that is "max" (v2) or not below the
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

__all__ = ["memory_bytes", "state_limit_bytes", "MEMORY_SHARE", "CGROUP_LIMIT_FILES"]

#: The share of :func:`memory_bytes` one run may plan to hold (module docstring).
MEMORY_SHARE = Fraction(3, 5)
#: Where a control group's memory limit is read, v2 first (module docstring).
CGROUP_LIMIT_FILES = (Path("/sys/fs/cgroup/memory.max"),
                      Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def _cgroup_limit_bytes(files: tuple[Path, ...]) -> int | None:
    """The first numeric limit of ``files`` (bytes), or None when none is set or readable."""
    for f in files:
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def memory_bytes(cgroup_files: tuple[Path, ...] = CGROUP_LIMIT_FILES) -> int:
    """The memory this process may use (bytes, int): the machine's physical memory, or its
    control group's limit when that is lower (module docstring). Raises nothing: on a system
    without ``_SC_PHYS_PAGES`` it is the cgroup limit, or 8 GB when there is none either."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 0
    limit = _cgroup_limit_bytes(cgroup_files)
    known = [m for m in (physical, limit) if m and m > 0]
    return min(known) if known else 8_000_000_000


def state_limit_bytes(memory: int | None = None) -> int:
    """What one run may plan to hold (bytes, int): :data:`MEMORY_SHARE` of ``memory`` (default
    :func:`memory_bytes`), rounded down."""
    m = memory_bytes() if memory is None else memory
    return int(m * MEMORY_SHARE)
