"""Whether the timing engine is already compiled: numba compiles the engine's kernels at their
first call and caches the machine code on disk (``@njit(cache=True)``), so the first run after
an install or an upgrade spends minutes compiling (29-47 s of wall clock on a quiet 2-core
machine for the ideal fabric's kernels, several minutes more for the queued fabric's and
DCQCN's under load); every later run loads them in about a second.

numba keeps a function's cache as ``<module>.<function>-<line>.py<XY>.nbi`` (the index) and
``.nbc`` files in the ``__pycache__`` beside the module, or under ``NUMBA_CACHE_DIR`` when that
is set (numba ``caching.py``: ``_CacheLocator``, ``_SourceFileBackedLocatorMixin``), and finds it
stale when the module's source file changed after the index was written (the index stores the
source's stamp). The check below reads only file names and times: it says "compiled" when an
index of the engine's entry point (:func:`tokenpcap.schedule.engine.kernel.run`) for this Python
exists and is not older than ``kernel.py``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["engine_compiled", "COMPILE_CPU_S"]

#: CPU seconds of compiling the engine's entry points (:func:`tokenpcap.schedule.engine.kernel.run`
#: and ``commit``, with every kernel they call) with an empty cache, as an estimate that
#: :func:`tokenpcap.stages.wall_seconds` stretches by the load. Measured on 2026-12-07 (2-core
#: AMD EPYC, shared): 95.2 + 1.2 CPU s and 274 s of wall clock at load 9 (``K.run.compile``
#: timed on a ``dante --scale 100`` schedule); 97.4 CPU s of ``plan dante --time`` with the
#: cache emptied, its compile step 190 s of wall clock at load 5 (estimated 150 s). The
#: 29-47 s above were measured on an earlier, smaller engine.
COMPILE_CPU_S = 95.0

_KERNEL = Path(__file__).with_name("kernel.py")


def engine_compiled(kernel: Path = _KERNEL, cache_dir: str | None = None) -> bool:
    """True when numba's on-disk cache of the engine's entry point is there and not older than
    its source (module docstring). ``cache_dir``: ``NUMBA_CACHE_DIR`` (default: the
    environment's); ``kernel``: the entry point's source file."""
    cache_dir = os.environ.get("NUMBA_CACHE_DIR") if cache_dir is None else cache_dir
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    pattern = f"{kernel.stem}.run-*.{tag}.nbi"
    where = Path(cache_dir) if cache_dir else kernel.parent / "__pycache__"
    try:
        found = list(where.rglob(pattern) if cache_dir else where.glob(pattern))
        source = kernel.stat().st_mtime
        return any(p.stat().st_mtime >= source for p in found)
    except OSError:
        return False
