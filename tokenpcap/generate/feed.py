"""How the writer processes get their packet rows: through memory both sides map, not a pipe.

Sending a chunk's ``PACKET_DTYPE`` rows through a :class:`multiprocessing.Queue` pickles them
(a copy), writes them into a pipe in pieces (a copy into the kernel and system calls), and the
worker reads and unpickles them (two more copies): about 70 ns of CPU per 91-byte row on each
side (benchmarks/README.md, packet_path.py). :class:`RowSlots` is a ring of ``slots`` buffers of
``slot_rows`` rows in anonymous shared memory (``mmap`` ``MAP_SHARED | MAP_ANONYMOUS``, made
before the workers are forked, so that they map the same pages, and given back by the kernel
when the last process that maps it exits: nothing to unlink, even after a SIGKILL) and a
semaphore counting the free buffers. The parent copies one worker's share of a chunk into the
worker's next buffer (:meth:`RowSlots.put`, one ``memcpy`` per file's part) and sends only the
buffer's number and each part's row range over the queue; the worker copies each part out of
the buffer into the rows its file buffers (:meth:`RowSlots.view`, :meth:`tokenpcap.generate.
output.Sink.add`) and then frees it
(:meth:`RowSlots.release`). The queue carries the parts in order and the buffers are used in
ring order, so the semaphore's count is the number of free buffers. A process started by
``spawn`` cannot inherit the mapping: its rows go through the queue as before (``slots`` None).
"""
from __future__ import annotations

import mmap

import numpy as np

from tokenpcap.records import PACKET_DTYPE

__all__ = ["RowSlots", "feed_chunk", "SLOT_ROWS", "SLOTS"]

#: Rows per buffer: a chunk of the schedule's output (``pipeline.prepare(chunk_rows=1 << 16)``)
#: fits whole; a larger share goes through the queue.
SLOT_ROWS = 1 << 16
#: Buffers per worker: as many chunks in flight as the queue's eight batches were before
#: (6 MB each at 91 bytes a row).
SLOTS = 6


class RowSlots:
    """A ring of ``slots`` buffers of ``slot_rows`` ``PACKET_DTYPE`` rows in shared memory, made
    with the multiprocessing context ``ctx`` (its semaphore); see the module docstring."""

    def __init__(self, ctx, slot_rows: int = SLOT_ROWS, slots: int = SLOTS):
        self.slot_rows, self.slots = int(slot_rows), int(slots)
        self._mm = mmap.mmap(-1, self.slot_rows * PACKET_DTYPE.itemsize * self.slots)
        self._raw = np.frombuffer(self._mm, np.uint8).reshape(self.slots, -1)
        self._free = ctx.Semaphore(self.slots)
        self._next = 0

    def put(self, parts: list[np.ndarray], timeout: float) -> tuple[int, list[int]] | None:
        """Copy ``parts`` (``PACKET_DTYPE`` arrays, together at most ``slot_rows`` rows) into the
        next free buffer, back to back: ``(buffer, ends)``, ``ends`` the row after each part;
        None when no buffer came free within ``timeout`` seconds (nothing copied)."""
        if not self._free.acquire(timeout=timeout):
            return None
        k = self._next
        self._next = (k + 1) % self.slots
        dst, size = self._raw[k], PACKET_DTYPE.itemsize
        ends, at = [], 0
        for p in parts:             # as bytes: numpy copies a structured array field by field
            dst[at * size: (at + p.size) * size] = np.ascontiguousarray(p).view(np.uint8)
            at += p.size
            ends.append(at)
        return k, ends

    def view(self, k: int, start: int, end: int) -> np.ndarray:
        """Rows ``start:end`` of buffer ``k`` (the worker's side), valid until :meth:`release`:
        to be copied out before."""
        size = PACKET_DTYPE.itemsize
        return self._raw[k, start * size: end * size].view(PACKET_DTYPE)

    def release(self) -> None:
        """Free the oldest buffer in use (the worker's side, once it took every part of it)."""
        self._free.release()


def feed_chunk(slots: list[RowSlots], where: list[tuple[int, int]], parts: list, put, check
               ) -> None:
    """Send one chunk's ``(file, packets, labels, codes)`` parts to the workers: each worker's
    share through its :class:`RowSlots` when it fits a buffer (the queue item ``(buffer,
    [(index, start, end, labels, codes), ...])``), else part by part (``(index, packets,
    labels, codes)``).

    Args:
        slots: one :class:`RowSlots` per worker; where: ``(worker, index)`` of each file.
        put: ``put(worker, item)`` onto the worker's queue; check: called while waiting for a
            buffer (raises when a worker failed).
    """
    per: dict[int, list] = {}
    for f, packets, labels, codes in parts:
        w, i = where[f]
        per.setdefault(w, []).append((i, packets, labels, codes))
    for w, mine in per.items():
        ring = slots[w]
        if sum(p[1].size for p in mine) > ring.slot_rows:
            for item in mine:
                put(w, item)
            continue
        while (got := ring.put([p[1] for p in mine], timeout=1.0)) is None:
            check()
        k, ends = got
        starts = [0] + ends[:-1]
        put(w, (k, [(i, a, b, labels, codes)
                    for (i, _, labels, codes), a, b in zip(mine, starts, ends)]))
