"""Bytes appended to an output file in whole blocks past the page cache (``O_DIRECT``), from
buffers the caller fills in place: :class:`Blocks`.

A buffered ``write`` copies every byte into the page cache, and every page of a new file is a
page the kernel must first find (reclaim of other cached files, or on a virtual machine that
reports free memory to its host, a page the host must fault in again). On the development
machine 240 MiB of kept files written in 1 MiB writes took 0.54 CPU-s of system time while
other jobs were filling the page cache (its new pages taken back from other files) and
0.04-0.09 with 15 GB free; with ``O_DIRECT`` 0.014-0.018 in both states (wall clock 0.13-0.16
s against 0.67-0.86 buffered in the first, 0.04-0.11 in the second; benchmarks/README.md,
packet_path.py). The first state is a long run's (GPT-3 node 0 headers
only writes 4.7 GB, one NIC in full frames 26 GB): there the buffered copy of a 90-byte
headers-only record costs about as much as building it. ``O_DIRECT`` (open(2)) moves
the bytes from the caller's memory to the device without the cache, but only in whole blocks:
the buffer's address, its length and the file offset must each be a multiple of the device's
logical block size (:data:`ALIGN`, 4096, a multiple of every common one).

:class:`Blocks` keeps that contract for an append-only file. Its two alternating buffers
start on a block boundary; the first :attr:`Blocks.carry` bytes of the one handed out are the
file's bytes after its last block boundary (its tail, less than a block, not written yet), and
the caller lays its new bytes out after them. :meth:`Blocks.write` writes the buffer's whole
blocks at the file's last block boundary and copies the part block left over to the start of
the other buffer: the next buffer begins with it. Any other write to the file first writes the
tail through the page cache at its place (:meth:`Blocks.settle`, which
:class:`~tokenpcap.pcap.output.AtomicOutput` calls); the next buffer then starts with the
file's tail read back. The file's bytes are the same as with buffered writes of the same
bytes in the same order.

Where ``O_DIRECT`` is not available (not Linux, a file system that refuses it at open or at
the first write, ``EINVAL``: tmpfs) the same blocks are written through the page cache: the
bytes are the same.
"""
from __future__ import annotations

import errno
import os

import numpy as np

from tokenpcap.errors import OutputError

__all__ = ["ALIGN", "BlockAppends", "Blocks", "aligned_empty"]

#: Bytes of a block: the alignment of every unbuffered write's buffer address, length and file
#: offset (Linux requires the device's logical block size, 512 or 4096 bytes).
ALIGN = 4096
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)


def aligned_empty(nbytes: int) -> np.ndarray:
    """uint8 ``(nbytes,)`` whose first byte lies on an :data:`ALIGN` boundary (uninitialised)."""
    raw = np.empty(nbytes + ALIGN, np.uint8)
    at = -raw.ctypes.data % ALIGN
    return raw[at:at + nbytes]


class Blocks:
    """Whole-block appends to the file open as ``fd`` at ``path`` (module docstring), through
    ``submit(fn, *args)``, which runs ``fn`` after every write queued before (the owner's write
    thread, :class:`~tokenpcap.pcap.output.AtomicOutput`) and ``wait()``, which returns when
    they are done; ``wrote(nbytes)`` is called on the write thread with the bytes each write
    added to the file's length.

    Raises:
        OSError: from the writes (raised where the owner collects its queued writes; ``EINVAL``
            and ``EOPNOTSUPP`` from ``O_DIRECT`` are not raised: the page cache takes over).
    """

    def __init__(self, fd: int, path, submit, wait, wrote):
        self._fd, self._path, self._submit, self._wait, self._wrote = fd, path, submit, wait, wrote
        self._direct: int | None = None     # the O_DIRECT descriptor, once opened
        self._tried = False
        self._bufs = [aligned_empty(0), aligned_empty(0)]
        self._i = 0
        self.base = -1          # file offset of the current buffer's byte 0 (-1: not started)
        self.carry = 0          # bytes of the file's tail at the start of the current buffer
        self._grown = 0         # bytes appended but not yet reported to ``wrote``

    def begin(self, end: int) -> int:
        """Start appending at file length ``end`` when not started (the file's tail read back
        into the current buffer), and return :attr:`carry`: the offset in :meth:`buffer` where
        new bytes go.

        Raises:
            OSError: the tail cannot be read back.
        """
        if self.base < 0:
            self._wait()
            self.base = end - end % ALIGN
            self.carry = end - self.base
            buf = self.buffer(ALIGN)
            if self.carry:
                buf[:self.carry] = np.frombuffer(os.pread(self._fd, self.carry, self.base),
                                                 np.uint8)
        return self.carry

    def buffer(self, nbytes: int) -> np.ndarray:
        """The current buffer, at least ``nbytes`` long (grown with its bytes kept): uint8,
        starting on a block boundary, the file's tail in its first :attr:`carry` bytes."""
        buf = self._bufs[self._i]
        if buf.size < nbytes:
            grown = aligned_empty(-(-nbytes // ALIGN) * ALIGN)
            grown[:buf.size] = buf
            buf = self._bufs[self._i] = grown
        return buf

    def write(self, end: int) -> int:
        """Append the current buffer's bytes ``carry:end`` to the file: its whole blocks queued
        for writing at :attr:`base`, the part block after them carried to the other buffer,
        which becomes current. Returns the file's length.

        Raises:
            ValueError: nothing begun (:meth:`begin`), or the tail settled since.
            OutputError: an earlier queued write failed (from ``wait``).
        """
        if self.base < 0:
            raise ValueError("Blocks.write: got no begun append, expected begin() first")
        buf = self._bufs[self._i]
        whole = end - end % ALIGN
        self._wait()                    # the other buffer's write is done: it may be refilled
        rest = end - whole
        nxt = self._i ^ 1
        if self._bufs[nxt].size < max(rest, ALIGN):
            self._bufs[nxt] = aligned_empty(max(buf.size, ALIGN))
        self._bufs[nxt][:rest] = buf[whole:end]
        self._grown += end - self.carry
        if whole:
            self._submit(self._write_blocks, buf[:whole], self.base, self._grown)
            self._grown = 0
        self.base += whole
        self.carry = rest
        self._i = nxt
        return self.base + self.carry

    def settle(self) -> None:
        """Write the tail (the carried bytes) through the page cache at its place and leave the
        file's descriptor at its end, for a write that is not this one's; the next
        :meth:`begin` reads the tail back. Call after every queued write is done."""
        if self.base < 0:
            return
        if self.carry:
            _pwrite_all(self._fd, memoryview(self._bufs[self._i][:self.carry]), self.base)
        os.lseek(self._fd, self.base + self.carry, os.SEEK_SET)
        if self._grown:
            self._wrote(self._grown)
            self._grown = 0
        self.base, self.carry = -1, 0

    def release(self) -> None:
        """Give the buffers back (the next :meth:`buffer` makes them again); only when no
        bytes are carried."""
        if self.carry == 0 and self.base < 0:
            self._bufs = [aligned_empty(0), aligned_empty(0)]

    def close(self) -> None:
        """Close the unbuffered descriptor (after :meth:`settle`)."""
        if self._direct is not None:
            os.close(self._direct)
            self._direct = None

    def _write_blocks(self, view: np.ndarray, at: int, grown: int) -> None:
        """On the write thread: ``view`` (whole blocks, aligned) at file offset ``at``, past
        the page cache when the file system allows it; the file grows by ``grown`` bytes."""
        if not self._tried:
            self._tried = True
            if _O_DIRECT:
                try:
                    self._direct = os.open(self._path, os.O_WRONLY | _O_DIRECT)
                except OSError as err:
                    if err.errno not in _REFUSED:
                        raise
        mv = memoryview(view)
        if self._direct is not None:
            try:
                n = os.pwrite(self._direct, mv, at)
            except OSError as err:
                if err.errno not in _REFUSED:
                    raise
                self.close()            # refused at the first write: the page cache from now on
                n = 0
            mv, at = mv[n:], at + n
        if mv.nbytes:
            _pwrite_all(self._fd, mv, at)
        self._wrote(grown)


def _pwrite_all(fd: int, view: memoryview, at: int) -> None:
    """Write all of ``view`` at file offset ``at`` (``pwrite`` retried after a short write)."""
    while view.nbytes:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n


class BlockAppends:
    """The block appends of :class:`~tokenpcap.pcap.output.AtomicOutput` (its ``_fd``,
    ``tmp_path``, ``path``, ``bytes_written``, ``_behind``, ``_queue``, ``_wait`` and
    ``abort``): a :class:`Blocks` made on first use, every other write of the file settling
    its tail first (:meth:`_settle`)."""

    def blocks(self) -> tuple[np.ndarray, int]:
        """Where bytes appended in place go: ``(buffer, at)``, the buffer of the file's
        :class:`~tokenpcap.pcap.blocks.Blocks` (uint8, block-aligned, at least ``at`` +
        :data:`~tokenpcap.pcap.blocks.ALIGN` long; :meth:`block_buffer` grows it) and the offset
        in it after the file's tail; the caller lays its bytes out from there and hands them to
        :meth:`write_blocks`.

        Raises:
            OutputError: the file is closed, or an earlier write or reading the tail failed.
        """
        if self._fd is None:
            raise OutputError(f"{self.path}: write after close")
        if self._blocks is None:
            self._blocks = Blocks(self._fd, self.tmp_path, self._queue, self._wait,
                                  self._behind.wrote)
        try:
            at = self._blocks.begin(self.bytes_written)
        except OSError as err:
            self.abort()
            raise OutputError(f"{self.path}: write failed: {err.strerror}") from err
        return self._blocks.buffer(at + ALIGN), at

    def block_buffer(self, nbytes: int) -> np.ndarray:
        """The buffer of :meth:`blocks`, at least ``nbytes`` long, its bytes kept."""
        return self._blocks.buffer(nbytes)

    def write_blocks(self, end: int) -> None:
        """Append the bytes laid out in the buffer of :meth:`blocks` up to ``end`` (module
        docstring of :mod:`tokenpcap.pcap.blocks`); the buffer must not be touched again
        before the next :meth:`blocks`.

        Raises:
            OutputError: an earlier or this write failed.
        """
        self.bytes_written = self._blocks.write(end)

    def release_blocks(self) -> None:
        """Give the buffers of :meth:`blocks` back (after :meth:`write_blocks`)."""
        if self._blocks is not None:
            self._settle()
            self._blocks.release()

    def _settle(self) -> None:
        """Before any other write: the tail carried by :meth:`blocks` written at its place."""
        if self._fd is None:
            raise OutputError(f"{self.path}: write after close")
        if self._blocks is not None and self._blocks.base >= 0:
            self._wait()
            try:
                self._blocks.settle()
            except OSError as err:
                self.abort()
                raise OutputError(f"{self.path}: write failed: {err.strerror}") from err
