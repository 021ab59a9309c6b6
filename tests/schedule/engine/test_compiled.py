"""tokenpcap.schedule.engine.compiled: numba's on-disk cache of the engine's entry point, found
by its file names and times as numba's ``_SourceFileBackedLocatorMixin`` lays them out."""
from __future__ import annotations

import os
import re
import sys

from tokenpcap.schedule.engine import compiled
from tokenpcap.schedule.engine.compiled import engine_compiled

TAG = f"py{sys.version_info.major}{sys.version_info.minor}"


def test_an_index_newer_than_the_source_is_compiled(tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text("# source\n")
    assert not engine_compiled(kernel, cache_dir="")               # no __pycache__ at all
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / f"kernel.commit-68.{TAG}.nbi").write_bytes(b"")       # another function's index
    assert not engine_compiled(kernel, cache_dir="")
    index = cache / f"kernel.run-76.{TAG}.nbi"
    index.write_bytes(b"")
    t = kernel.stat().st_mtime
    os.utime(index, (t + 10, t + 10))
    assert engine_compiled(kernel, cache_dir="")
    os.utime(kernel, (t + 20, t + 20))                               # source edited after
    assert not engine_compiled(kernel, cache_dir="")


def test_numba_cache_dir_is_searched_below(tmp_path):
    kernel = tmp_path / "src" / "kernel.py"
    kernel.parent.mkdir()
    kernel.write_text("# source\n")
    deep = tmp_path / "cache" / "work" / "src"
    deep.mkdir(parents=True)
    index = deep / f"kernel.run-76.{TAG}.nbi"
    index.write_bytes(b"")
    t = kernel.stat().st_mtime
    os.utime(index, (t + 10, t + 10))
    assert engine_compiled(kernel, cache_dir=str(tmp_path / "cache"))
    assert not engine_compiled(kernel, cache_dir=str(tmp_path / "elsewhere"))


def test_the_real_kernel_has_a_run_function():
    """The file name the check looks for is the entry point's: ``kernel.run``."""
    from tokenpcap.schedule.engine import kernel

    assert compiled._KERNEL.name == "kernel.py" and callable(kernel.run)


def test_the_compile_estimate_is_the_cpu_time_stretched_by_the_load():
    """One core compiles: on an idle machine the estimate is the measured CPU seconds; with more
    runnable processes than cores, LOAD_SHARE of the fair share (load + 1) / cores."""
    assert 0.5 <= compiled.ASIDE_SHARE < 1
    share = compiled.LOAD_SHARE
    for queued in (False, True):
        cpu = compiled.COMPILE_CPU_S[queued]
        assert compiled.compile_seconds(queued, load=0.0, cores=2) == cpu
        assert compiled.compile_seconds(queued, load=1.0, cores=2) == cpu
        assert compiled.compile_seconds(queued, load=9.0, cores=2) == cpu * share * 5
        assert compiled.compile_seconds(queued, load=15.0, cores=4) == cpu * share * 4
        # a helper process compiling beside: the critical path's share of the CPU seconds on
        # two free cores or more (one core runs the two processes one after the other); on a
        # busy machine the two share one process's fair share, as without the helper
        path = compiled.ASIDE_SHARE
        assert compiled.compile_seconds(queued, load=0.0, cores=2, aside=True) == cpu * path
        assert compiled.compile_seconds(queued, load=9.0, cores=2, aside=True) == (
            compiled.compile_seconds(queued, load=9.0, cores=2))
        assert compiled.compile_seconds(queued, load=0.0, cores=1, aside=True) == cpu
    assert compiled.COMPILE_CPU_S[True] > compiled.COMPILE_CPU_S[False]


def test_a_compile_is_announced_once_and_a_cached_function_not_at_all():
    """numba's compile event starts the stage line, once per notice however many blocks and
    functions compile; a function already compiled (or loaded from numba's cache) compiles
    nothing and a fresh notice prints nothing for it."""
    from numba import njit

    from tokenpcap.stages import listening

    f = njit(lambda x: x * 3)
    g = njit(lambda x: f(x) + 1)            # compiling g compiles f: one line for both
    h = njit(lambda x: x - 1)
    lines: list[str] = []
    with listening(lines.append, after_s=1.0):
        notice = compiled.CompileNotice()
        with notice.watching(False):
            assert g(2) == 7
        assert len(lines) == 1 and lines[0].startswith(
            "compiling the timing engine, once per machine, about "), lines
        with notice.watching(True):
            assert h(3) == 2                    # another compile, the same notice
        with compiled.CompileNotice().watching(True):
            assert g(3) == 10                   # compiled already
    assert len(lines) == 1
    lines.clear()
    with listening(lines.append, after_s=1.0):
        with compiled.CompileNotice().watching(True):
            assert njit(lambda x: x + 2)(1) == 3    # a queued fabric's first compile
    assert len(lines) == 1 and lines[0].startswith(
        "compiling the timing engine for a queued fabric, once per machine "
        "(apart from the ideal fabric's), about "), lines


def test_in_cache_reads_numba_s_own_index(tmp_path, monkeypatch):
    """A function's compile for some argument types is in the cache once numba saved it (its
    ``numba:compile``-free load in a fresh dispatcher is the oracle), and only for those types."""
    import importlib

    from numba.core import types

    (tmp_path / "cached_mod.py").write_text(
        "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("cached_mod")
    assert not compiled.in_cache(mod.f, (types.int64,))
    assert mod.f(1) == 2                                   # compiles, saves to __pycache__
    assert compiled.in_cache(mod.f, (types.int64,))
    assert not compiled.in_cache(mod.f, (types.float64,))
    fresh = importlib.reload(mod).f                        # a new dispatcher: loads, no compile
    lines = []
    with compiled.CompileNotice().watching(False):
        from tokenpcap.stages import listening
        with listening(lines.append, after_s=1.0):
            assert fresh(41) == 42
    assert lines == []
    assert not compiled.in_cache(object(), (types.int64,))    # not a dispatcher: no cache


def test_with_a_helper_the_event_loop_s_compile_is_a_line_of_its_own():
    """With a helper process, numba's compile of the entry point (``kernel.run``, after the
    parts) starts a second stage line with its own estimate; without one, the first line covers
    it and nothing more is said; another function named ``run`` elsewhere is not the loop."""
    from numba import njit

    from tokenpcap.stages import listening

    def entry(x):
        return x * 2

    entry.__name__ = "run"
    entry.__module__ = "tokenpcap.schedule.engine.kernel"
    elsewhere = njit(lambda x: x + 5)
    elsewhere.py_func.__name__ = "run"
    for aside in (True, False):
        lines: list[str] = []
        with listening(lines.append, after_s=0.0):
            with compiled.CompileNotice().watching(False, aside=aside):
                assert njit(lambda x: x - 1)(3) == 2       # a part: the first line
                assert elsewhere(1) == 6
                assert njit(entry)(4) == 8
        assert lines[0].startswith("compiling the timing engine, once per machine, about ")
        if aside:
            assert len(lines) == 2, lines
            assert re.fullmatch(re.escape(compiled.LOOP_STAGE) + r", about \d+ (s|min)",
                                lines[1]), lines
        else:
            assert len(lines) == 1, lines
