"""What every capture writer shares: an atomic output file, reusable batch buffers, batch checks.

* :class:`AtomicOutput` writes to ``.<name>.<pid>.<random>.part`` in the destination directory and
  renames it over the destination at :meth:`close` (``os.replace``, atomic on POSIX); :meth:`abort`
  (and any exception inside a ``with`` block) removes the temporary file, so nothing that looks
  finished is ever left behind. A temporary file of a process that no longer exists (SIGKILL) is
  removed by the next writer of the same destination. Writes run on one background thread so that building batch k+1 overlaps
  writing batch k (numpy and ``os.write`` release the GIL); two alternating buffers keep memory
  flat. A file past 1 GiB is written back and released from the page cache as it grows
  (:mod:`tokenpcap.pcap.dropbehind`).
* :func:`scatter` writes fixed-size records (record headers) at arbitrary byte offsets of a
  buffer with one numpy assignment, through a ``V<size>`` view whose stride is 1 or 4 bytes.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tokenpcap.errors import EncodeError, OutputError
from tokenpcap.pcap.blocks import BlockAppends
from tokenpcap.pcap.dropbehind import DropBehind
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.pcap.gather import writev_all
from tokenpcap.pcap.pathlimits import PART_EXTRA_BYTES, check_path_length

__all__ = ["AtomicOutput", "remove_stale_parts", "Scratch", "scatter", "check_batch", "check_caplen", "LINKS",
           "make_directory", "not_a_directory"]

#: frame kinds a writer accepts: name -> file link type. Native InfiniBand goes into ERF (197):
#: TShark refuses classic pcap with linktype 247 (case C13).
LINKS = {"ethernet": 1, "infiniband": 197}


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()       # read once at import: os.umask is process-wide, not thread-safe


def not_a_directory(path: str | os.PathLike) -> str:
    """Why directory ``path`` cannot be written into, as "got ...": ``got a file (<path>)`` when
    ``path`` or an ancestor is not a directory, otherwise ``got a missing directory (<path>)``."""
    q = Path(path)
    while not q.exists() and q != q.parent:
        q = q.parent
    if q.exists() and not q.is_dir():
        return f"got a file ({q})"
    return f"got a missing directory ({path})"


@contextlib.contextmanager
def make_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Create directory ``path`` and its missing parents (``mkdir -p``) for the ``with`` block;
    if the block raises, the directories made here are removed again while still empty.

    Raises:
        OutputError: ``path`` or an ancestor is a file ("got a file") or a symbolic link to
            nothing, a name in it is longer
            than the file system allows (:func:`~tokenpcap.pcap.pathlimits.check_path_length`),
            or the file system refuses to create it (read-only, no permission), naming the path
            and the OS error.
    """
    check_path_length(path, what="output directory")
    p = Path(path)
    made: list[Path] = []
    q = p
    while not q.exists() and q != q.parent:
        if q.is_symlink():              # mkdir would say "File exists" of a missing target
            raise OutputError(f"{p}: output directory: got a symbolic link {q} to "
                              f"{os.readlink(q)}, which does not exist, expected a directory")
        made.append(q)
        q = q.parent
    if not q.is_dir():
        raise OutputError(f"{p}: output directory: got a file ({q}), expected a directory")
    try:
        for d in reversed(made):
            d.mkdir()
    except OSError as err:
        _remove_empty(made)
        raise OutputError(f"{p}: output directory: cannot create it: {err.strerror}") from None
    try:
        yield p
    except BaseException:
        _remove_empty(made)
        raise


def _remove_empty(dirs: list[Path]) -> None:
    for d in dirs:                       # deepest first
        try:
            d.rmdir()
        except OSError:
            return


def remove_stale_parts(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary files ``.<name>.<pid>.<random>.part`` of ``path`` whose writer
    process no longer exists (killed by SIGKILL, which no handler sees); files of live
    processes are left alone. Returns the paths removed; raises nothing."""
    p = Path(path)
    gone: list[Path] = []
    try:
        parts = list(p.parent.glob(f".{glob_escape(p.name)}.*.part"))
    except OSError:
        return gone
    for part in parts:
        pid = part.name[len(p.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            part.unlink()
            gone.append(part)
        except OSError:
            pass
    return gone


def glob_escape(name: str) -> str:
    """``name`` with the glob characters ``* ? [`` taken literally."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:        # another user's live process
        return True
    return True


class AtomicOutput(BlockAppends):
    """A file written to a temporary name in its directory and renamed into place at close.

    Args:
        path: destination. Its directory must exist.
        overwrite: replace an existing destination at close (default) or refuse at open.
        threaded: write on a background thread (one write in flight).

    Raises:
        OutputError: the directory does not exist, the destination exists and ``overwrite`` is
            false or is not a regular file (a device, a FIFO, a socket: renaming over it would
            replace it), its name with the temporary suffix is longer than the file system
            allows, or the file system refuses (the message names the path and the OS error).
    """

    def __init__(self, path: str | os.PathLike, *, overwrite: bool = True, threaded: bool = True):
        check_path_length(path, what="output file", extra_bytes=PART_EXTRA_BYTES)
        self.path = Path(path)
        parent = self.path.parent
        if not parent.is_dir():
            raise OutputError(f"{self.path}: output directory: {not_a_directory(parent)}, "
                              "expected an existing directory")
        if self.path.is_dir():
            raise OutputError(f"{self.path}: got a directory, expected a file path")
        refuse_special_output(self.path)    # the rename at close would replace the device
        if not overwrite and self.path.exists():
            raise OutputError(f"{self.path}: got an existing file, expected a new path (overwrite=False)")
        remove_stale_parts(self.path)
        try:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{self.path.name}.{os.getpid()}.",
                                       suffix=".part")
            os.fchmod(fd, 0o666 & ~_UMASK)
        except OSError as err:
            raise OutputError(f"{self.path}: cannot create a file: {err.strerror}") from err
        self._fd: int | None = fd
        self.tmp_path = Path(tmp)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="tokenpcap-write") if threaded else None
        self._pending: Future | None = None
        self.bytes_written = 0
        self._behind = DropBehind(fd)        # a file past the page cache's size: written back as it goes
        self._blocks = None                  # appends past the page cache (BlockAppends)

    def _write_all(self, data) -> None:
        view = memoryview(data).cast("B")
        nbytes = view.nbytes
        while view.nbytes:
            n = os.write(self._fd, view)
            view = view[n:]
        self._behind.wrote(nbytes)

    def _writev_all(self, iov: np.ndarray, keep=None) -> None:
        writev_all(self._fd, iov)        # ``keep`` holds the buffers ``iov`` points into until here
        self._behind.wrote(int(iov[:, 1].sum()))

    def _wait(self) -> None:
        if self._pending is not None:
            fut, self._pending = self._pending, None
            try:
                fut.result()
            except OSError as err:
                self.abort()
                raise OutputError(f"{self.path}: write failed: {err.strerror}") from err

    def write(self, data) -> None:
        """Queue ``data`` (bytes or a contiguous array) after everything written before.

        The caller must not modify ``data`` until the *next* call to :meth:`write` returns
        (the writers alternate two buffers, which guarantees that).

        Raises:
            OutputError: the file is closed, or an earlier or this write failed.
        """
        self._settle()
        self.bytes_written += memoryview(data).nbytes
        self._queue(self._write_all, data)

    def write_gather(self, iov: np.ndarray, keep) -> None:
        """Queue the bytes an iovec table names (:func:`tokenpcap.pcap.gather.iovecs`) after
        everything written before, with ``writev``. ``keep`` (the buffers the table points into)
        is held until the write is done; as with :meth:`write`, the caller must not modify them
        until the next call returns.

        Raises:
            OutputError: the file is closed, or an earlier or this write failed.
        """
        self._settle()
        self.bytes_written += int(iov[:, 1].sum())
        self._queue(self._writev_all, iov, keep)

    def _queue(self, fn, *args) -> None:
        """Run ``fn(*args)`` after every write queued before (on the write thread when there
        is one)."""
        self._wait()
        if self._pool is None:
            try:
                fn(*args)
            except OSError as err:
                self.abort()
                raise OutputError(f"{self.path}: write failed: {err.strerror}") from err
        else:
            self._pending = self._pool.submit(fn, *args)

    def close(self) -> None:
        """Finish writing and rename the temporary file to :attr:`path`.

        Raises:
            OutputError: a write or the rename failed (the temporary file is then removed).
        """
        if self._fd is None:
            return
        self._settle()
        self._wait()
        if self._blocks is not None:
            self._blocks.close()
        fd, self._fd = self._fd, None
        try:
            os.close(fd)
            os.replace(self.tmp_path, self.path)
        except OSError as err:
            self.tmp_path.unlink(missing_ok=True)
            raise OutputError(f"{self.path}: cannot finish the file: {err.strerror}") from err
        finally:
            self._shutdown()

    def abort(self) -> None:
        """Stop writing and remove the temporary file; the destination is left untouched."""
        if self._pending is not None:
            self._pending.exception()
            self._pending = None
        if self._blocks is not None:
            self._blocks.close()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)
        self.tmp_path.unlink(missing_ok=True)
        self._shutdown()

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    @property
    def closed(self) -> bool:
        return self._fd is None

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            self.abort()


class Scratch:
    """Two alternating uint8 buffers that grow on demand (flat memory across batches)."""

    def __init__(self) -> None:
        self._bufs = [np.empty(0, np.uint8), np.empty(0, np.uint8)]
        self._i = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A uint8 array of ``nbytes``; the other buffer may still be in flight to the kernel."""
        self._i ^= 1
        buf = self._bufs[self._i]
        if buf.size < nbytes:
            buf = np.empty(max(nbytes, buf.size + buf.size // 2), np.uint8)
            self._bufs[self._i] = buf
        return buf[:nbytes]

    def release(self) -> None:
        """Drop both buffers (one may still be in flight: its write holds it until done). For a
        process writing many files in turn, where idle buffers per file would add up."""
        self._bufs = [np.empty(0, np.uint8), np.empty(0, np.uint8)]


def scatter(out: np.ndarray, positions: np.ndarray, records: np.ndarray, stride: int = 1,
            step: int | None = None) -> None:
    """Copy ``records[i]`` (fixed size) to ``out[positions[i]:positions[i]+size]`` (a single
    record is copied to every position).

    ``positions`` must be multiples of ``stride`` (1, or 4 for pcapng). ``step``: the caller
    knows the positions are evenly spaced by ``step`` bytes (0: they are not; None: check).
    Evenly spaced records are copied with strided assignments; others with one fancy assignment
    through an overlapping ``V<size>`` view (numpy allows strides smaller than the item size).
    """
    size = records.dtype.itemsize
    n = len(positions)
    if n == 0:
        return
    if n > 1:
        if step is None:                    # the caller may know that the spacing is even
            step = int(positions[1] - positions[0])
            if int(positions[-1] - positions[0]) != step * (n - 1) or \
                    (n > 2 and np.any(np.diff(positions) - step)):
                step = 0
        if step >= size:
            # evenly spaced (every record the same length): strided copies, no fancy index,
            # in pieces of numeric dtypes (numpy copies c16/u8/u4 far faster than V<size>)
            src = np.ascontiguousarray(records).view(np.uint8)
            each = 0 if records.size == 1 else size          # one record: broadcast it
            base = int(positions[0])
            for at, dt in _pieces(size):
                dst = np.ndarray((n,), dt, buffer=out, offset=base + at, strides=(step,))
                dst[...] = np.ndarray((n,), dt, buffer=src, offset=at, strides=(each,))
            return
    count = (out.size - size) // stride + 1
    view = np.ndarray((count,), dtype=f"V{size}", buffer=out, strides=(stride,))
    index = positions // stride if stride != 1 else positions
    view[index] = np.ascontiguousarray(records).view(f"V{size}")


def _pieces(size: int) -> list[tuple[int, str]]:
    """Split ``size`` bytes into (offset, dtype) pieces of 16, 8, 4, 2 and 1 bytes."""
    out, at = [], 0
    for width, dt in ((16, "c16"), (8, "u8"), (4, "u4"), (2, "u2"), (1, "u1")):
        while size - at >= width:
            out.append((at, dt))
            at += width
    return out


def check_batch(time_ns, frame_bytes, *, max_frame: int, max_time_ns: int, where: str
                ) -> tuple[np.ndarray, np.ndarray]:
    """Validate one batch and return ``(time_ns int64 (n,), frame_bytes int64 (n,))``.

    Raises:
        EncodeError: not 1-D integer arrays of one length, a time before the epoch or after the
            format's last second, or a frame length outside ``0..max_frame``; the message names
            the first bad index and the value.
    """
    t = np.asarray(time_ns)
    fb = np.asarray(frame_bytes)
    for name, a in (("time_ns", t), ("frame_bytes", fb)):
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise EncodeError(f"{where}: {name}: got dtype {a.dtype} shape {a.shape}, "
                              "expected a 1-D integer array (int64 ns / bytes)")
    if t.shape != fb.shape:
        raise EncodeError(f"{where}: frame_bytes: got shape {fb.shape}, expected {t.shape} like time_ns")
    t = t.astype(np.int64, copy=False)
    fb = fb.astype(np.int64, copy=False)
    if t.size:
        for name, a, lo, hi in (("time_ns", t, 0, max_time_ns), ("frame_bytes", fb, 0, max_frame)):
            amin, amax = int(a.min()), int(a.max())
            if amin < lo or amax > hi:
                i = int(np.flatnonzero((a < lo) | (a > hi))[0])
                raise EncodeError(f"{where}: {name}[{i}]: got {int(a[i])}, expected {lo}..{hi}")
    return t, fb


def check_caplen(caplen, frame_bytes: np.ndarray, snaplen, where: str) -> np.ndarray:
    """An explicit per-record ``caplen`` (int64 (n,)): bytes kept of each frame, for copies of
    captures whose records were cut shorter than their snaplen (``editcap -s``, a pcapng whose
    interfaces differ). ``snaplen``: int or int64 (n,), the limit of each record's interface.

    Raises:
        EncodeError: not an integer array shaped like ``frame_bytes``, or a value outside
            ``0..min(frame_bytes, snaplen)``; the message names the first bad index.
    """
    c = np.asarray(caplen)
    if c.shape != frame_bytes.shape or c.dtype.kind not in "iu":
        raise EncodeError(f"{where}: caplen: got dtype {c.dtype} shape {c.shape}, expected "
                          f"integers shaped {frame_bytes.shape} like frame_bytes")
    c = c.astype(np.int64, copy=False)
    hi = np.minimum(frame_bytes, snaplen)
    bad = (c < 0) | (c > hi)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise EncodeError(f"{where}: caplen[{i}]: got {int(c[i])}, expected 0..{int(hi[i])} "
                          "(the frame length, at most the snaplen)")
    return c
