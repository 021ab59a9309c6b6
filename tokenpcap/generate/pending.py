"""The rows a file holds until its next batch: :class:`PendingRows`, one buffer the parts are
copied into as they arrive (from the parent's chunk or from a writer's shared buffer,
:mod:`tokenpcap.generate.feed`), so that a batch is a slice of it, not a join of the parts, and
:func:`captured_bytes`, the sum and largest of ``min(frame_bytes, snaplen)`` in one pass."""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.records import PACKET_DTYPE

__all__ = ["PendingRows", "captured_bytes"]

_SIZE = PACKET_DTYPE.itemsize


class PendingRows:
    """``PACKET_DTYPE`` rows appended back to back (:meth:`append`), taken as one slice
    (:meth:`take`); the buffer grows by half its size and is kept for the next batch unless
    :meth:`release` gives it back."""

    def __init__(self) -> None:
        self._buf = np.empty(0, PACKET_DTYPE)
        self._n = 0
        self._hint = 4096           # rows to make room for at once: the last buffer's size

    def append(self, packets: np.ndarray) -> None:
        """Copy ``packets`` after the rows so far (as bytes: numpy copies structured rows field
        by field)."""
        n, k = self._n, len(packets)
        if n + k > self._buf.size:
            grown = np.empty(max((n + k) * 3 // 2, self._hint), PACKET_DTYPE)
            grown.view(np.uint8)[: n * _SIZE] = self._buf.view(np.uint8)[: n * _SIZE]
            self._buf = grown
        self._buf.view(np.uint8)[n * _SIZE: (n + k) * _SIZE] = \
            np.ascontiguousarray(packets).view(np.uint8)
        self._n = n + k

    def take(self) -> np.ndarray:
        """The rows appended so far (a view, valid until the next :meth:`append`); empties."""
        rows, self._n = self._buf[: self._n], 0
        return rows

    def release(self) -> None:
        """Give the buffer back (after :meth:`take`); the next one is made as large at once
        (its pages are touched only as rows arrive)."""
        self._hint = max(self._hint, self._buf.size)
        self._buf = self._buf[:0].copy()


@njit(cache=True)
def captured_bytes(frame_bytes, snaplen):
    """``(sum, max)``, int64, of ``min(frame_bytes, snaplen)`` over ``frame_bytes`` (int
    ``(n,)``): the bytes a capture keeps of these frames."""
    total, top = 0, 0
    for v in frame_bytes:
        c = min(np.int64(v), snaplen)
        total += c
        top = max(top, c)
    return total, top
