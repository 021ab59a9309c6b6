"""How the timing engine is compiled, and whether it already is: numba compiles the engine's
kernels at their first call and caches the machine code on disk (``@njit(cache=True)``), so the
first run after an install or an upgrade compiles them once (:data:`COMPILE_CPU_S`, measured in
``benchmarks/README.md``); every later run loads them in about a second. An ideal fabric's run
compiles only the ideal fabric's code (``QUEUED`` in :mod:`~tokenpcap.schedule.engine.events`);
a queued fabric's first run compiles its own specialization, the fabric's, ECN's and DCQCN's
code with it. :class:`CompileNotice` names the compile while it runs.

numba keeps a function's cache as ``<module>.<function>-<line>.py<XY>.nbi`` (the index) and
``.nbc`` files in the ``__pycache__`` beside the module, or under ``NUMBA_CACHE_DIR`` when that
is set (numba ``caching.py``: ``_CacheLocator``, ``_SourceFileBackedLocatorMixin``), and finds it
stale when the module's source file changed after the index was written (the index stores the
source's stamp). The check below reads only file names and times: it says "compiled" when an
index of the engine's entry point (:func:`tokenpcap.schedule.engine.kernel.run`) for this Python
exists and is not older than ``kernel.py`` (one index holds every specialization compiled so
far: the check cannot tell whether the queued fabric's is among them). The stage line does not
rely on it: :class:`CompileNotice` listens to numba's own compile event.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator

from numba import njit
from numba.core import event

from tokenpcap.stages import stage

__all__ = ["engine_compiled", "part", "inline_part", "COMPILE_STAGE", "COMPILE_CPU_S", "LOAD_SHARE", "compile_seconds", "CompileNotice"]

#: The stage line of the engine's compile (numba caches it on disk for later runs).
COMPILE_STAGE = "compiling the timing engine, once per machine"
#: CPU seconds the first run spends compiling the engine, ideal fabric and queued fabric (with
#: ECN and DCQCN): measured on the 2-core development machine, 2026-12-07, ``benchmarks/README.md``
#: (numba 0.68, LLVM 22; 29-31 s for dante, 60 s for a DCQCN incast), rounded up.
COMPILE_CPU_S = {False: 30.0, True: 65.0}
#: The compile's wall clock over its CPU seconds, as a fraction of ``(load + 1) / cores``: 3.1-3.3
#: at load 9.5-13 on the development machine's 2 cores (its other jobs niced, as they are there),
#: ``benchmarks/README.md``; a neighbour of the same priority takes more.
LOAD_SHARE = 0.65

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


def part(f):
    """The engine's compiled functions that only other compiled functions call:
    ``@njit(cache=True, _nrt=False, no_cpython_wrapper=True)``. Without numba's reference counting
    (module :mod:`~tokenpcap.schedule.engine.kernel`) and without the wrapper that would let
    Python call them: that wrapper unboxes every array of the
    :class:`~tokenpcap.schedule.engine.events.State` an engine function takes, and building it
    for each function was about a third of the engine's compile time (``benchmarks/README.md``).
    From compiled code it is an ordinary call; called from Python it crashes the interpreter
    (numba has no entry point to call), so a function Python or a test calls stays ``@njit``."""
    return njit(cache=True, _nrt=False, no_cpython_wrapper=True)(f)


def inline_part(f):
    """A :func:`part` that LLVM always inlines into its callers (``forceinline``: numba marks it
    ``alwaysinline``, and a caller's library links the callee's IR before optimizing it). For the
    event loop's parts that take the :class:`~tokenpcap.schedule.engine.events.State`: numba
    passes each array of it as its members (data pointer, shape, strides and four more: 7-9
    words), so an ordinary call pushes about 470 words of the State's 55 arrays onto the stack
    before it runs. LLVM left the larger parts (``advance``, ``_epoch``, ``ready``, ``step``,
    ``arrived``, ``_finish``, ``ab_done``) as such calls; inlined, a part loads only the arrays
    it reads, and the engine's run took a third of the CPU it did (``benchmarks/README.md``,
    ``engine_timing.py``), for about a quarter more compile time. The part must not be recursive;
    one called from several places is compiled into each of them."""
    return njit(cache=True, _nrt=False, no_cpython_wrapper=True, forceinline=True)(f)


def compile_seconds(queued: bool, load: float | None = None, cores: int | None = None) -> float:
    """Wall-clock estimate (s) of compiling the engine (ideal fabric, or ``queued``): its CPU
    seconds (:data:`COMPILE_CPU_S`; numba compiles on one core) stretched by the load when the
    machine's runnable processes outnumber its cores, by :data:`LOAD_SHARE` of the fair share
    ``(load + 1) / cores``. ``load``: 1-minute load average (default: ``os.getloadavg``);
    ``cores``: the cores this process may use (default: its affinity)."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    if cores is None:
        cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1)
    return COMPILE_CPU_S[bool(queued)] * max(1.0, LOAD_SHARE * (load + 1.0) / max(1, cores))


class CompileNotice(event.Listener):
    """Names the engine's compile once (a run compiles the kernel's ``run`` at its first call
    and ``commit`` at its own): ``with notice.watching(queued):`` around every call into the
    engine. Within the block, a compile of any function (numba's ``numba:compile`` event: it
    comes only when the function is not in numba's on-disk cache) starts the stage "compiling
    the timing engine, once per machine" with :func:`compile_seconds`
    (:mod:`tokenpcap.stages`), the first time for this notice. ``queued``: the run's fabric is
    queued."""

    def __init__(self) -> None:
        self.queued, self.said = False, False

    def on_start(self, ev) -> None:
        if not self.said:
            self.said = True
            stage(COMPILE_STAGE, seconds=compile_seconds(self.queued))

    def on_end(self, ev) -> None:
        pass

    @contextlib.contextmanager
    def watching(self, queued: bool) -> Iterator[None]:
        self.queued = bool(queued)
        with event.install_listener("numba:compile", self):
            yield
