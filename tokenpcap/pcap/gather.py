"""Gather writes: payload bytes that a frame builder can name instead of writing them.

A full-size frame is mostly payload, and tokenpcap's payload is a fixed pattern (byte j of every
payload is ``pattern[j]``). Copying it into the batch buffer costs a user-space copy on top of
the kernel's copy into the page cache. A *gather fill* lets the writer leave such bytes out of
its buffer: the batch buffer holds record headers, frame headers and tails back to back, and
``writev(2)`` (POSIX.1-2001) hands the kernel an iovec list ``[buffer piece, pattern[:len],
buffer piece, ...]`` so that the payload is copied once, from a cache-resident source, straight
into the file. The file's bytes are the same as with a plain ``fill``.

A gather fill is a plain ``fill(out, offsets, caplen)`` callable (so every writer path keeps
working) with three more members::

    source: np.ndarray                  # uint8 (m,), C-contiguous, alive as long as the fill
    holes(caplen) -> (at, length)       # int64 (n,) each: frame i's bytes [at, at+length)
                                        # equal source[:length]; length a multiple of 8
    fill_around(out, offsets, caplen, length)   # frame i's kept bytes except its hole,
                                        # caplen[i] - length[i] bytes at out[offsets[i]:]

(:class:`tokenpcap.wire.gather.BatchFill` is one.) Holes are multiples of 8 bytes so that record
layouts aligned to 4 bytes (pcapng) stay aligned when the holes are taken out.

``writev`` is called through ``ctypes`` (the C library's symbol), at most ``IOV_MAX`` iovecs per
call, with short writes resumed; where the symbol is missing the writers fall back to ``fill``.
"""
from __future__ import annotations

import ctypes
import errno
import os

import numpy as np

__all__ = ["MIN_HOLE_BYTES", "gather_holes", "iovecs", "writev_all", "AVAILABLE"]

#: holes shorter than this are filled in the buffer: an iovec costs about as much as a short copy
MIN_HOLE_BYTES = 512
_IOV_DTYPE = np.uint64                     # struct iovec {void *iov_base; size_t iov_len;} on LP64


def _libc_writev():
    if ctypes.sizeof(ctypes.c_void_p) != 8 or ctypes.sizeof(ctypes.c_size_t) != 8:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).writev
    except (OSError, AttributeError, TypeError):      # no C library symbols (Windows: TypeError)
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    return fn


_WRITEV = _libc_writev()
#: whether gather writes are possible here (64-bit POSIX with a C library exporting writev)
AVAILABLE = _WRITEV is not None
try:
    _IOV_MAX = min(int(os.sysconf("SC_IOV_MAX")), 1024)
except (ValueError, OSError, AttributeError):
    _IOV_MAX = 16
if _IOV_MAX <= 0:
    _IOV_MAX = 16


def gather_holes(fill, caplen: np.ndarray) -> np.ndarray | None:
    """Hole lengths (int64 ``(n,)``, frame-relative starts in ``fill.holes``) worth gathering, or
    None when ``fill`` is a plain callable, gather writes are unavailable, or no hole is at least
    :data:`MIN_HOLE_BYTES` long. Returns ``(at, length)``."""
    holes = getattr(fill, "holes", None)
    if holes is None or not AVAILABLE or caplen.size == 0 or int(caplen.max()) < MIN_HOLE_BYTES:
        return None                       # (headers-only batches end here, at one reduction)
    at, length = holes(caplen)
    length = np.where(length >= MIN_HOLE_BYTES, length, 0)
    if not length.any():
        return None
    return at, length


def iovecs(out: np.ndarray, cut: np.ndarray, length: np.ndarray, source: np.ndarray) -> np.ndarray:
    """The iovec table that writes ``out`` with ``source[:length[i]]`` inserted at ``out``
    position ``cut[i]`` (``cut`` non-decreasing): uint64 ``(2k + 1, 2)`` rows ``(base, len)``
    over the k holes with a length, laid out as ``struct iovec`` on LP64.

    ``out`` and ``source`` must stay alive (and unchanged) until the write is done.
    """
    sel = np.flatnonzero(length)
    k = sel.size
    iov = np.empty((2 * k + 1, 2), _IOV_DTYPE)
    bounds = np.empty(k + 2, np.int64)
    bounds[0], bounds[-1] = 0, out.size
    bounds[1:-1] = cut[sel]
    iov[0::2, 0] = bounds[:-1]
    iov[0::2, 0] += np.uint64(out.ctypes.data)
    iov[0::2, 1] = np.diff(bounds)
    iov[1::2, 0] = source.ctypes.data
    iov[1::2, 1] = length[sel]
    return iov


def writev_all(fd: int, iov: np.ndarray) -> None:
    """Write every byte an iovec table names, in order, in calls of at most ``IOV_MAX`` entries.

    Raises:
        OSError: the system call failed (errno as reported), or wrote nothing.
    """
    iov = np.ascontiguousarray(iov, dtype=_IOV_DTYPE)
    total = len(iov)
    # bytes up to each entry, and the table's address: no numpy work per system call
    ends = np.cumsum(iov[:, 1].astype(np.int64))
    base, at, done_bytes = iov.ctypes.data, 0, 0
    while at < total:
        c = min(_IOV_MAX, total - at)
        want = int(ends[at + c - 1]) - done_bytes
        got = _WRITEV(fd, base + 16 * at, c)
        if got < 0:
            e = ctypes.get_errno()
            if e == errno.EINTR:
                continue
            raise OSError(e, os.strerror(e))
        if got == want:
            at += c
            done_bytes += want
            continue
        if got == 0 and want:
            raise OSError(errno.EIO, "writev wrote nothing")
        # short write (a full disk, a signal): skip what went out and retry from there
        done_bytes += got
        skip = at + int(np.searchsorted(ends[at:at + c], done_bytes, side="right"))
        part = done_bytes - (int(ends[skip - 1]) if skip else 0)
        iov = iov[skip:].copy()
        iov[0, 0] += np.uint64(part)
        iov[0, 1] -= np.uint64(part)
        total = len(iov)
        ends = np.cumsum(iov[:, 1].astype(np.int64))
        base, at, done_bytes = iov.ctypes.data, 0, 0
