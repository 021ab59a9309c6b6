"""Drop-behind for big output files: write back and release what is written, a region at a time.

A capture larger than the page cache (one NIC of GPT-3 175B in full frames is about 26 GB) left
to the kernel fills memory with dirty pages; the writer is then throttled by writeback, and
every new page of the cache is memory the kernel must first take from somewhere else (reclaim
of other cached files; on a virtual machine that reports free memory to its host, a fresh page
the host must fault in). Most of the time of such a write goes to the kernel's copy into those
pages, not to the bytes themselves.

:class:`DropBehind` keeps the file's footprint in the page cache to a few regions: once a file
has grown past :data:`START_BYTES`, each full region of :data:`REGION_BYTES` is handed to
writeback as soon as it is written (``sync_file_range(SYNC_FILE_RANGE_WRITE)``), and the region
:data:`LAG_REGIONS` before it is waited for (``SYNC_FILE_RANGE_WAIT_BEFORE | WRITE |
WAIT_AFTER``) and dropped from the cache (``posix_fadvise(POSIX_FADV_DONTNEED)``). The next writes then reuse the pages just
released. The flags' meanings are those of the ``sync_file_range(2)`` manual page (WRITE
starts writeback of the dirty pages of the range; WAIT_BEFORE and WAIT_AFTER wait for writeback
of the range before and after it); ``posix_fadvise(2)``'s DONTNEED frees only clean pages, hence
the wait first. Files smaller than
:data:`START_BYTES` are left to the kernel as before (they fit in the cache and close at memory
speed). The file's bytes are the same either way; a failure the wait reports (an I/O error, a
full disk) is raised as :class:`OSError` at the write that saw it.

Linux only (``sync_file_range`` is a Linux system call): elsewhere, or on a file system that
refuses the calls (``EINVAL``, ``ENOSYS``, ``EOPNOTSUPP``, ``ESPIPE``), it does nothing.
"""
from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["AVAILABLE", "REGION_BYTES", "START_BYTES", "DropBehind"]

#: below this many bytes written a file is left to the kernel (it fits in the page cache)
START_BYTES = 1 << 30
#: bytes handed to writeback and released at a time
REGION_BYTES = 64 << 20
#: regions in writeback while the next is written: the wait is for the region this many before
#: the one just handed over (2 wrote one NIC's 12.6 GB of full frames in 11.6-14.1 s, 1 in
#: 14.4-19.2 s, 4 as 2: benchmarks/README.md, "generate_nic.py")
LAG_REGIONS = 2

# <linux/fs.h>
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ESPIPE)


def _libc_sync_file_range():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, TypeError):      # no such symbol (not glibc/Linux), Windows
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range()
#: whether drop-behind can run here (``sync_file_range`` and ``posix_fadvise`` exist)
AVAILABLE = _SYNC_FILE_RANGE is not None and hasattr(os, "posix_fadvise")


def sync_range(fd: int, offset: int, nbytes: int, flags: int) -> None:
    """``sync_file_range(fd, offset, nbytes, flags)``, retried on ``EINTR``.

    Raises:
        OSError: the call failed (errno as reported).
    """
    while _SYNC_FILE_RANGE(fd, offset, nbytes, flags) != 0:
        e = ctypes.get_errno()
        if e != errno.EINTR:
            raise OSError(e, os.strerror(e))


def drop_range(fd: int, offset: int, nbytes: int) -> None:
    """``posix_fadvise(fd, offset, nbytes, POSIX_FADV_DONTNEED)``. Raises: OSError."""
    os.posix_fadvise(fd, offset, nbytes, os.POSIX_FADV_DONTNEED)


class DropBehind:
    """The drop-behind of one file written sequentially from offset 0 (module docstring).

    Args:
        fd: the file, open for writing, written only by the caller of :meth:`wrote`.
        start_bytes: bytes written before drop-behind begins (then from offset 0 on).
        region_bytes: the unit handed to writeback and released, > 0.
        lag_regions: the region waited for and released is this many before the one handed
            over, >= 1.

    Call :meth:`wrote` after each write, with the bytes that write added, from the thread that
    writes (it may wait for the disk).
    """

    def __init__(self, fd: int, start_bytes: int = START_BYTES, region_bytes: int = REGION_BYTES,
                 lag_regions: int = LAG_REGIONS):
        if region_bytes <= 0:
            raise ValueError(f"region_bytes: got {region_bytes}, expected > 0")
        if lag_regions < 1:
            raise ValueError(f"lag_regions: got {lag_regions}, expected >= 1")
        self.lag_bytes = lag_regions * region_bytes
        self.fd = fd
        self.start_bytes = start_bytes
        self.region_bytes = region_bytes
        self.written = 0
        #: regions below this offset have been handed to writeback
        self.started = 0
        self.enabled = AVAILABLE

    def wrote(self, nbytes: int) -> None:
        """Account ``nbytes`` more written; start writeback of every region now complete and
        wait for and release the region ``lag_regions`` before each.

        Raises:
            OSError: the wait reported a write-back failure (EIO, ENOSPC, ...).
        """
        self.written += nbytes
        if not self.enabled or self.written < self.start_bytes:
            return
        r = self.region_bytes
        try:
            while self.written - self.started >= r:
                sync_range(self.fd, self.started, r, _WRITE)
                if self.started >= self.lag_bytes:
                    behind = self.started - self.lag_bytes
                    sync_range(self.fd, behind, r, _WAIT_BEFORE | _WRITE | _WAIT_AFTER)
                    drop_range(self.fd, behind, r)
                self.started += r
        except OSError as err:
            if err.errno in _UNSUPPORTED:
                self.enabled = False          # a file system without it: left to the kernel
                return
            raise
