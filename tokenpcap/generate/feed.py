"""How the writer processes get their packet rows: through memory every process maps, not a pipe.

Sending a chunk's ``PACKET_DTYPE`` rows through a :class:`multiprocessing.Queue` pickles them
(a copy), writes them into a pipe in pieces (a copy into the kernel and system calls), and the
worker reads and unpickles them (two more copies): about 70 ns of CPU per 91-byte row on each
side (benchmarks/README.md, packet_path.py). :class:`RowSlots` is one ring of ``slots`` buffers
of ``slot_rows`` rows each (a whole chunk of the schedule's output) in anonymous shared memory
(``mmap`` ``MAP_SHARED | MAP_ANONYMOUS``, made before the workers are forked, so that they map
the same pages, and given back by the kernel when the last process that maps it exits: nothing
to unlink, even after a SIGKILL), and one semaphore per worker counting the buffers that worker
has finished with.

A chunk takes the next buffer of the ring (:meth:`RowSlots.take`: one unit of every worker's
semaphore, so the buffer is free when every worker released its use of it): the lowering
writes the chunk's rows straight into it, each file's rows together
(:func:`tokenpcap.generate.route.route_chunk`), or :func:`feed_chunk` copies the parts in back
to back. Every worker is then sent the buffer's number and the row range of each of its files'
parts (an empty list when it has none: it releases the buffer all the same, which keeps every
worker's semaphore in step with the ring), copies each part out of the buffer into the rows its
file holds (:meth:`RowSlots.view`, :meth:`tokenpcap.generate.output.Sink.add`) and frees its
use (:meth:`RowSlots.release`). The queues carry the items in order and the buffers are taken
in ring order, so a worker's semaphore counts the buffers it no longer reads. A process started
by ``spawn`` cannot inherit the mapping: its rows go through the queue as before (``slots``
None), as do the parts of a chunk larger than a buffer.
"""
from __future__ import annotations

import mmap

import numpy as np

from tokenpcap.records import PACKET_DTYPE

__all__ = ["RowSlots", "feed_chunk", "SLOT_ROWS", "SLOTS"]

#: Rows per buffer: a chunk of the schedule's output (``pipeline.prepare(chunk_rows=1 << 16)``)
#: fits whole; a larger chunk goes through the queues.
SLOT_ROWS = 1 << 16
#: Buffers in the ring (6 MB each at 91 bytes a row): as many chunks in flight as the queues'
#: eight batches allow, less the one being lowered.
SLOTS = 6


class RowSlots:
    """A ring of ``slots`` buffers of ``slot_rows`` ``PACKET_DTYPE`` rows in shared memory for
    ``workers`` worker processes, with one semaphore per worker made with the multiprocessing
    context ``ctx``; see the module docstring."""

    def __init__(self, ctx, workers: int, slot_rows: int = SLOT_ROWS, slots: int = SLOTS):
        self.slot_rows, self.slots, self.workers = int(slot_rows), int(slots), int(workers)
        self._mm = mmap.mmap(-1, self.slot_rows * PACKET_DTYPE.itemsize * self.slots)
        self._rows = np.frombuffer(self._mm, PACKET_DTYPE).reshape(self.slots, self.slot_rows)
        self._base = self._rows.ctypes.data
        self._free = [ctx.Semaphore(self.slots) for _ in range(self.workers)]
        self._next = 0

    def take(self, check) -> tuple[int, np.ndarray]:
        """The next buffer of the ring once every worker has released it: ``(k, rows)``,
        ``rows`` its ``PACKET_DTYPE (slot_rows,)`` view (the parent's side). ``check()`` is
        called every second while a worker still reads it (it raises when a worker failed)."""
        for free in self._free:
            while not free.acquire(timeout=1.0):
                check()
        k = self._next
        self._next = (k + 1) % self.slots
        return k, self._rows[k]

    def offset(self, k: int, rows: np.ndarray) -> int:
        """The index in buffer ``k`` of the first row of ``rows`` (a view into it)."""
        # ctypes.data: a structured array's __array_interface__ builds its whole descr
        return (rows.ctypes.data - self._base) // PACKET_DTYPE.itemsize - k * self.slot_rows

    def view(self, k: int, start: int, end: int) -> np.ndarray:
        """Rows ``start:end`` of buffer ``k`` (the worker's side), valid until :meth:`release`:
        to be copied out before."""
        return self._rows[k, start:end]

    def release(self, worker: int) -> None:
        """Free ``worker``'s use of the oldest buffer it was sent (the worker's side, once it
        took every part of it)."""
        self._free[worker].release()


def feed_chunk(slots: RowSlots, where: list[tuple[int, int]], parts: list, put, check,
               slot: int | None = None) -> None:
    """Send one chunk's ``(file, packets, labels, codes)`` parts to the workers: through the
    ring (each worker the queue item ``(buffer, [(index, start, end, labels, codes), ...])``,
    module docstring) when the chunk fits a buffer, else part by part (``(index, packets,
    labels, codes)``).

    Args:
        slots: the :class:`RowSlots` of the workers; where: ``(worker, index)`` of each file.
        put: ``put(worker, item)`` onto the worker's queue; check: called while waiting for a
            buffer (raises when a worker failed).
        slot: None, or the buffer (:meth:`RowSlots.take`) the parts' rows already lie in (each
            part a view into it): nothing is copied.
    """
    if slot is None and sum(p[1].size for p in parts) > slots.slot_rows:
        for f, packets, labels, codes in parts:
            w, i = where[f]
            put(w, (i, packets, labels, codes))
        return
    if slot is None:
        slot, dst = slots.take(check)
        at, ranges = 0, []
        for _, packets, _, _ in parts:  # as bytes: numpy copies a structured array field by field
            dst.view(np.uint8)[at * PACKET_DTYPE.itemsize: (at + packets.size)
                               * PACKET_DTYPE.itemsize] = np.ascontiguousarray(packets).view(np.uint8)
            ranges.append((at, at + packets.size))
            at += packets.size
    else:
        ranges = [(a, a + p[1].size) for p in parts for a in [slots.offset(slot, p[1])]]
    per: list[list] = [[] for _ in range(slots.workers)]
    for (f, _, labels, codes), (a, b) in zip(parts, ranges):
        w, i = where[f]
        per[w].append((i, a, b, labels, codes))
    for w, mine in enumerate(per):
        put(w, (slot, mine))
