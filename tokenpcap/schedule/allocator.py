"""Freed arrays given back to the operating system at once: glibc's mmap threshold held fixed.

glibc's ``malloc`` serves a request of at least ``M_MMAP_THRESHOLD`` bytes with a mapping of its
own, unmapped when freed; smaller ones come from the heap, whose freed space the process keeps
(mallopt(3)). The threshold starts at 128 KiB but is *dynamic*: freeing a mapped block raises it
to that block's size, up to 32 MiB (``DEFAULT_MMAP_THRESHOLD_MAX`` on 64-bit). Building a run's
engine state frees many temporary numpy arrays of a few to tens of MiB, so after the first ones
the rest land in the heap, and the process's resident memory keeps every byte it ever held at
once (GPT-3 175B at ``--scale 2``: 2.63 GB peak RSS building the state, 1.89 GB with the
threshold held at 1 MiB; benchmarks/README.md). Setting the threshold explicitly turns the
dynamic adjustment off (mallopt(3): "M_MMAP_THRESHOLD ... disables the dynamic adjustment").
Arrays of at least :data:`MMAP_THRESHOLD_BYTES` are then mapped and unmapped each time: a page
fault per 4 KiB page touched, well below the cost of filling the array.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "hold_mmap_threshold"]

#: Bytes from which an allocation gets its own mapping (glibc's default start, 128 KiB, would
#: map the packet path's per-chunk arrays too; 1 MiB keeps those in the heap).
MMAP_THRESHOLD_BYTES = 1 << 20
#: ``M_MMAP_THRESHOLD`` of glibc's ``<malloc.h>``.
_M_MMAP_THRESHOLD = -3


def hold_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Hold glibc's mmap threshold at ``nbytes`` for the rest of the process (module docstring).
    Returns True when set; False where there is no glibc (another libc, another system), where
    nothing is changed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(nbytes)))
    except (OSError, AttributeError):
        return False
