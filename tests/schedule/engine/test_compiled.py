"""tokenpcap.schedule.engine.compiled: numba's on-disk cache of the engine's entry point, found
by its file names and times as numba's ``_SourceFileBackedLocatorMixin`` lays them out."""
from __future__ import annotations

import os
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
