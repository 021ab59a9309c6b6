"""Fixed-size record slots: a batch of short records written from one prepared buffer.

A headers-only batch (``--snaplen 64``/``74``) is records of one size, bar a few shorter ones
(ACKs of 62 bytes under a snaplen of 74, a pcapng block whose comment is shorter). Laying every
record out at its own byte offset costs a cumulative sum and a scatter of every record header
through a fancy index (~20 ns a record on a 2-vCPU VM, against ~30 ns for the kernel to copy an
80-byte record into the page cache). In *slots* of one size ``S`` (the longest record of the
batch) the record headers, built as one contiguous array, are copied with strided stores
(:func:`tokenpcap.pcap.output.scatter`; storing each field with a stride of ``S`` instead misses
the cache once per field and record on batches larger than the cache), and the frame builder
writes its frames at evenly spaced offsets:

    buffer: | rec 0 ........ | rec 1 ...... gap | rec 2 ........ | ...     (slots of S bytes)

When every record fills its slot the buffer is the file's bytes and goes out in one ``write``.
A shorter record leaves a gap at the end of its slot; the buffer then goes out with ``writev``
(:func:`tokenpcap.pcap.gather.writev_all`), one iovec per run of slots that ends at a shorter
record, so the file holds exactly the records back to back, the same bytes as the packed
layout. An iovec costs the kernel about as much as copying 100 bytes (measured:
benchmarks/README.md), so slots are used only when at most one record in :data:`MAX_SHORT_SHARE`
is shorter than its slot (:func:`slot_size`).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.pcap.gather import AVAILABLE as WRITEV_AVAILABLE

__all__ = ["MAX_SHORT_SHARE", "MAX_SLOT_BYTES", "slot_size", "slot_view", "run_iovecs"]

#: at most one record in this many may be shorter than its slot (each costs one iovec)
MAX_SHORT_SHARE = 8
#: slots are for short records: longer ones, unless all of one size, are laid out packed
#: (a gap in a slot of full-size frames would waste buffer memory)
MAX_SLOT_BYTES = 4096


def slot_size(rec_bytes: np.ndarray) -> int | None:
    """The slot size for records of ``rec_bytes`` (int64 (n,), bytes each takes in the file),
    or None to lay them out packed: every record the same size, or records of at most
    :data:`MAX_SLOT_BYTES` with at most one in :data:`MAX_SHORT_SHARE` shorter than the
    longest (and ``writev`` available for the gaps)."""
    n = rec_bytes.size
    if n == 0:
        return None
    big = int(rec_bytes.max())
    short = int(np.count_nonzero(rec_bytes != big))
    if short == 0:
        return big
    if big > MAX_SLOT_BYTES or not WRITEV_AVAILABLE or short * MAX_SHORT_SHARE > n:
        return None
    return big


def slot_view(out: np.ndarray, dtype: np.dtype, size: int, n: int, at: int = 0) -> np.ndarray:
    """A structured view (n,) of ``dtype`` over ``out`` with a stride of ``size`` bytes: row
    i's fields at byte ``at + i * size + their offset in dtype``. Assigning a field is one
    strided store."""
    return np.ndarray((n,), dtype, buffer=out, offset=at, strides=(size,))


def run_iovecs(out: np.ndarray, size: int, rec_bytes: np.ndarray, head: int = 0) -> np.ndarray:
    """The iovec table (uint64 (k, 2) rows (address, length), ``struct iovec`` on LP64) that
    writes the records of slots of ``size`` bytes in ``out`` back to back, leaving out the gap
    after each record shorter than its slot; ``out[:head]`` (bytes before the first slot, e.g.
    the first block's leading part) is written first. One row per run of slots that ends at a
    shorter record, and one for the last run."""
    n = rec_bytes.size
    short = np.flatnonzero(rec_bytes != size)
    ends = head + short * size + rec_bytes[short]               # end of each run
    starts = np.empty(short.size + 1, np.int64)
    starts[0] = 0
    starts[1:] = head + (short + 1) * size                     # the next run starts a slot later
    stops = np.append(ends, head + n * size)
    keep = stops > starts
    iov = np.empty((int(keep.sum()), 2), np.uint64)
    iov[:, 0] = starts[keep]
    iov[:, 0] += np.uint64(out.ctypes.data)
    iov[:, 1] = (stops - starts)[keep]
    return iov
