"""How the timing engine is compiled, and whether it already is: numba compiles the engine's
kernels at their first call and caches the machine code on disk (``@njit(cache=True)``), so the
first run after an install or an upgrade compiles them once (:data:`COMPILE_CPU_S`, measured in
``benchmarks/README.md``); every later run loads them in about a second. An ideal fabric's run
compiles only the ideal fabric's code (``QUEUED`` in :mod:`~tokenpcap.schedule.engine.events`);
a queued fabric's first run compiles its own specialization, the fabric's, ECN's and DCQCN's
code with it. Each function is compiled once for every argument type up to literal values and
integer widths (:class:`OneSignature`), and a first run compiles half of the engine in a helper
process beside this one (:mod:`~tokenpcap.schedule.engine.compile_aside`), or, for a job smaller
than the compile, times it uncompiled while a helper compiles the whole engine in the background
(:mod:`~tokenpcap.schedule.engine.interpreted`).
:class:`CompileNotice` names the compile while it runs.

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

from numba.core import event, types
from numba.core.registry import CPUDispatcher

from tokenpcap.stages import stage

__all__ = ["engine_compiled", "in_cache", "part", "inline_part", "shared", "inline_shared",
           "one_type", "OneSignature", "COMPILE_STAGE", "COMPILE_STAGES", "COMPILE_CPU_S",
           "LOAD_SHARE", "ASIDE_SHARE", "LOOP_STAGE", "LOOP_SHARE", "compile_seconds", "CompileNotice"]

#: The stage line of the engine's compile (numba caches it on disk for later runs).
COMPILE_STAGE = "compiling the timing engine, once per machine"
#: The stage line by fabric (``queued``): a queued fabric's engine is a specialization of its
#: own, compiled at the first run that needs it even when the ideal fabric's is cached.
COMPILE_STAGES = {False: COMPILE_STAGE,
                  True: "compiling the timing engine for a queued fabric, once per machine "
                        "(apart from the ideal fabric's)"}
#: CPU seconds the first run spends compiling the engine, ideal fabric and queued fabric (with
#: ECN and DCQCN), this process and its helper together: measured on the 2-core development
#: machine, 2026-12-07, ``benchmarks/README.md`` (numba 0.68, LLVM 22, at load 4-5; 28.1 and
#: 27.6 s for dante, 64.5 s for a DCQCN incast), rounded up.
COMPILE_CPU_S = {False: 28.0, True: 65.0}
#: The share of the compile's CPU seconds on its critical path when a helper process compiles
#: half of it beside this one (:mod:`~tokenpcap.schedule.engine.compile_aside`): the larger of
#: the two processes' CPU before ``kernel.run`` (the helper's with its start) plus ``run``'s
#: compile, over both processes' CPU: dante 18.4 of 28.1 and 17.9 of 27.6 CPU s, a DCQCN incast
#: 41.2 of 64.5; 2026-12-07, ``benchmarks/README.md``; rounded up.
ASIDE_SHARE = 0.7
#: The stage line of the event loop's compile (``kernel.run``, every part inlined into it).
LOOP_STAGE = "compiling the timing engine's event loop, every part inlined"
#: The share of the compile's CPU seconds (:data:`COMPILE_CPU_S`) that ``kernel.run``'s own
#: compile takes once its parts are compiled (LLVM's passes and machine code over the whole
#: engine): dante 8.1 of 28.1 and 8.0 of 27.6 CPU s, a DCQCN incast 15.7 of 64.5; 2026-12-07,
#: ``benchmarks/README.md``; rounded up.
LOOP_SHARE = 0.3
#: The compile's wall clock over its CPU seconds, as a fraction of ``(load + 1) / cores``, with
#: the helper process: 0.51 at load 8.5 and 0.43 at load 3.6 on the development machine's 2
#: cores (dante's first run minus its second, ``benchmarks/first_run.py``, 2026-12-07, its other
#: jobs niced as this one; ``benchmarks/README.md``); rounded up. One process alone (no helper)
#: measured 0.65 at load 9.5-13: the estimate is then low by up to a quarter.
LOAD_SHARE = 0.5

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


def in_cache(f, arg_types: tuple) -> bool:
    """True when numba's on-disk cache holds the dispatcher ``f`` compiled for ``arg_types``
    (numba types), fresh for its source: its index is read, not the machine code (numba
    ``caching.py``: ``Cache._index_key``, ``IndexDataCacheFile._load_index``, which give an
    empty index for a stale one). False when it does not, or when the cache cannot be read."""
    try:
        cache = f._cache
        key = cache._index_key(tuple(arg_types), f.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:           # no cache (disabled, unreadable): what compiling finds too
        return False


def one_type(t: types.Type) -> types.Type:
    """The type a compiled call passes an argument of numba type ``t`` as: a literal as its
    plain type (a constant ``3`` is ``Literal[int](3)`` in the caller), and an integer that fits
    in 64 signed bits (``int8`` .. ``int64``, ``uint8`` .. ``uint32``, a column of an ``int32``
    array) as ``int64``; any other type unchanged. Each integer value is kept (``uint64`` is
    not narrowed), and numba's integer arithmetic works in 64 bits on narrower operands
    already (its typing of integer operators), so the callee computes the same values."""
    t = types.unliteral(t)
    if isinstance(t, types.Integer) and (t.signed or t.bitwidth < 64):
        return types.int64
    return t


class OneSignature(CPUDispatcher):
    """A numba dispatcher that compiles one specialization for every call from compiled code
    whose arguments differ only in literal values and integer widths: the arguments' types
    pass through :func:`one_type` before numba compiles (or finds) the specialization, and the
    call casts its arguments to it. numba otherwise compiles a specialization per literal
    value and per integer width it is called with (``events.push`` 8 times in one ideal
    fabric's run, ``benchmarks/README.md``), each with its own typing, lowering and LLVM
    passes. A call from Python is typed by its values (``int64`` for a Python ``int``) and is
    not changed."""

    def get_call_template(self, args, kws):
        template, pysig, _, kws = super().get_call_template(
            tuple(one_type(a) for a in args), {k: one_type(v) for k, v in kws.items()})
        return template, pysig, tuple(args), kws


def _one_signature(f, **options):
    """``f`` as a cached :class:`OneSignature` dispatcher with numba target ``options``: what
    ``numba.njit(cache=True, **options)`` does (``numba.core.decorators._jit``) with that
    class."""
    d = OneSignature(py_func=f, locals={},
                     targetoptions=dict(nopython=True, boundscheck=None, **options))
    d.enable_caching()
    return d


def part(f):
    """The engine's compiled functions that only other compiled functions call:
    ``@njit(cache=True, _nrt=False, no_cpython_wrapper=True)``, one specialization per
    argument types up to literals and integer widths (:class:`OneSignature`). Without numba's
    reference counting (module :mod:`~tokenpcap.schedule.engine.kernel`) and without the
    wrapper that would let Python call them: that wrapper unboxes every array of the
    :class:`~tokenpcap.schedule.engine.events.State` an engine function takes, and building it
    for each function was about a third of the engine's compile time (``benchmarks/README.md``).
    From compiled code it is an ordinary call; called from Python it crashes the interpreter
    (numba has no entry point to call), so a function Python or a test calls is
    :func:`shared`."""
    return _one_signature(f, _nrt=False, no_cpython_wrapper=True)


def shared(f):
    """An engine function that both compiled code and Python (a test) call: as :func:`part`,
    with numba's CPython wrapper: ``@njit(cache=True, _nrt=False)``, one specialization per
    argument types up to literals and integer widths (:class:`OneSignature`)."""
    return _one_signature(f, _nrt=False)


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
    return _one_signature(f, _nrt=False, no_cpython_wrapper=True, forceinline=True)


def inline_shared(f):
    """:func:`shared` that LLVM always inlines into compiled callers (as :func:`inline_part`),
    keeping numba's CPython wrapper for Python and tests."""
    return _one_signature(f, _nrt=False, forceinline=True)


def compile_seconds(queued: bool, load: float | None = None, cores: int | None = None,
                    aside: bool = False) -> float:
    """Wall-clock estimate (s) of compiling the engine (ideal fabric, or ``queued``): its CPU
    seconds (:data:`COMPILE_CPU_S`; numba compiles on one core per process) stretched by the
    load when the machine's runnable processes outnumber its cores, by :data:`LOAD_SHARE` of
    the fair share ``(load + 1) / cores``. With a helper process compiling beside this one
    (``aside``) on two cores or more, :data:`ASIDE_SHARE` of them on a free machine; on a busy
    one the two processes share what one would get (the scheduler's share goes to the session's
    group of processes, not to each: measured at load 7, ``benchmarks/README.md``), so the
    larger of the two. ``load``: 1-minute load average (default: ``os.getloadavg``);
    ``cores``: the cores this process may use (default: its affinity)."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    if cores is None:
        cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count() or 1)
    free = ASIDE_SHARE if aside and cores >= 2 else 1.0
    return COMPILE_CPU_S[bool(queued)] * max(free, LOAD_SHARE * (load + 1.0) / max(1, cores))


class CompileNotice(event.Listener):
    """Names the engine's compile once (a run compiles the kernel's ``run`` at its first call
    and ``commit`` at its own): ``with notice.watching(queued):`` around every call into the
    engine. Within the block, a compile of any function (numba's ``numba:compile`` event: it
    comes only when the function is not in numba's on-disk cache) starts the stage "compiling
    the timing engine, once per machine" (:data:`COMPILE_STAGES`: another for a queued fabric)
    with :func:`compile_seconds`
    (:mod:`tokenpcap.stages`), the first time for this notice; with a helper process, the
    compile of the event loop itself that comes after both processes' parts (``kernel.run``,
    :data:`LOOP_SHARE` of the compile's CPU, in this process alone) starts the stage
    "compiling the timing engine's event loop, every part inlined". ``queued``: the run's fabric
    is queued; ``aside``: a helper process compiles half of the engine beside this one."""

    def __init__(self) -> None:
        self.queued, self.aside, self.said, self.loop_said = False, False, False, False

    def on_start(self, ev) -> None:
        if not self.said:
            self.said = True
            stage(COMPILE_STAGES[self.queued],
                  seconds=compile_seconds(self.queued, aside=self.aside))
        elif self.aside and not self.loop_said and _is_entry(ev.data.get("dispatcher")):
            self.loop_said = True
            stage(LOOP_STAGE, seconds=LOOP_SHARE * compile_seconds(self.queued))

    def on_end(self, ev) -> None:
        pass

    @contextlib.contextmanager
    def watching(self, queued: bool, aside: bool = False) -> Iterator[None]:
        self.queued, self.aside = bool(queued), bool(aside)
        with event.install_listener("numba:compile", self):
            yield


def _is_entry(dispatcher) -> bool:
    """``dispatcher`` is the engine's entry point, ``run`` of ``kernel.py`` (by name: this
    module is imported by the kernel's)."""
    f = getattr(dispatcher, "py_func", None)
    return (getattr(f, "__name__", "") == "run"
            and getattr(f, "__module__", "") == f"{__package__}.{_KERNEL.stem}")
