"""The common reader surface: :data:`RECORD_DTYPE`, :class:`InterfaceInfo`, :class:`Capture`.

Format readers (:mod:`~tokenpcap.pcap.reader`, :mod:`~tokenpcap.pcap.pcapng_reader`,
:mod:`~tokenpcap.pcap.erf`) subclass :class:`Capture` with ``_regions`` (where records start,
found by :func:`tokenpcap.pcap.chain.walk`) and ``_decode`` (numpy rows for those records).
"""
from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenpcap.errors import TruncatedFile
from tokenpcap.pcap.chain import ByteViews, Chain, walk

__all__ = ["RECORD_DTYPE", "CHUNK", "REGION", "InterfaceInfo", "Capture", "located_error",
           "even_step", "columns_at"]

#: One row per packet. Shape (n,).
#:
#: ========= ====== ==============================================================================
#: time_ns   int64  ns since the epoch (NO_TIME for a pcapng Simple Packet Block)
#: offset    int64  byte offset of the frame's first byte in ``Capture.data``
#: record    int64  byte offset of the record / block header (error messages, options)
#: caplen    uint32 frame bytes present in the file
#: orig_len  uint32 frame length on the wire
#: interface int32  index into ``Capture.interfaces`` (raw ERF: the ERF port, flags bits 0-1)
#: comment   int32  index into ``Capture.comments`` (pcapng ``opt_comment``), -1 for none
#: linktype  uint16 what the bytes at ``offset`` are: 1 Ethernet, 247 InfiniBand, ...
#: ========= ====== ==============================================================================
RECORD_DTYPE = np.dtype([("time_ns", "<i8"), ("offset", "<i8"), ("record", "<i8"),
                         ("caplen", "<u4"), ("orig_len", "<u4"), ("interface", "<i4"),
                         ("comment", "<i4"), ("linktype", "<u2")], align=True)
REGION = 64 << 20      # bytes walked at a time: bounds the offset arrays
CHUNK = 1 << 16        # records decoded at a time: the structured array stays in cache


@dataclass(frozen=True)
class InterfaceInfo:
    """One interface: a pcapng IDB, the single interface of a pcap, or an ERF port."""

    index: int
    linktype: int
    snaplen: int = 0
    name: str | None = None
    description: str | None = None
    speed_bps: int | None = None
    tsresol: int = 9
    tsoffset_s: int = 0
    section: int = 0
    byte_order: str = "<"


class Capture:
    """An open capture file. Use :func:`open_capture`.

    Attributes:
        path: the file. format: ``"pcap"``, ``"pcapng"`` or ``"erf"``.
        data: uint8 (file size,) read-only view of the mapped file.
        interfaces: list of :class:`InterfaceInfo` (global index = ``record["interface"]``).
        comments: distinct comment texts; ``record["comment"]`` indexes it.
        truncated_at: byte offset where an incomplete last record starts, when opened with
            ``on_truncation="stop"``; None otherwise.
    """

    format = ""

    def __init__(self, path: Path, data: np.ndarray, on_truncation: str):
        self.path = path
        self.data = data
        self.size = int(data.size)
        self.views = ByteViews(data)
        self.interfaces: list[InterfaceInfo] = []
        self.comments: list[str] = []
        self._comment_index: dict[str, int] = {}
        self.truncated_at: int | None = None
        self._stop_on_truncation = on_truncation == "stop"
        owner = getattr(data.base, "obj", data.base)           # np.frombuffer(mmap) -> memoryview
        self._mm = owner if isinstance(owner, mmap.mmap) else None

    # -- public ----------------------------------------------------------------------------------
    def batches(self, max_records: int = CHUNK) -> Iterator[np.ndarray]:
        """Yield the packets in file order as :data:`RECORD_DTYPE` arrays of at most
        ``max_records`` rows (at most :data:`CHUNK`, so that decoding stays in cache and memory
        stays flat whatever the file size).

        Raises:
            BadMagic, TruncatedFile, CaptureError: naming the byte offset of the bad record.
        """
        chunk = max(1, min(int(max_records), CHUNK))
        for starts, ctx in self._regions():
            for i in range(0, starts.size, chunk):
                rec = self._decode(starts[i:i + chunk], ctx)
                if rec.size:
                    yield rec

    def read(self) -> np.ndarray:
        """Every packet as one :data:`RECORD_DTYPE` array (n,). Raises: as :meth:`batches`."""
        parts = list(self.batches())
        return np.concatenate(parts) if parts else np.zeros(0, RECORD_DTYPE)

    def frame(self, row) -> bytes:
        """The captured bytes of one record row (convenience; not for hot loops)."""
        o = int(row["offset"])
        return self.data[o:o + int(row["caplen"])].tobytes()

    def close(self) -> None:
        """Drop this object's references to the mapping; the ``mmap`` is released once no
        array that views it (``data`` slices kept by the caller) is alive."""
        self.data = np.zeros(0, np.uint8)
        self.views = ByteViews(self.data)
        for name in ("_chain", "raw", "_c16", "_mm"):
            if hasattr(self, name):
                setattr(self, name, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- helpers for subclasses -------------------------------------------------------------------
    def _regions(self) -> Iterator[tuple[np.ndarray, object]]:
        """Yield (record starts int64 (k,), context for :meth:`_decode`) region by region."""
        raise NotImplementedError

    def _decode(self, starts: np.ndarray, ctx) -> np.ndarray:
        """:data:`RECORD_DTYPE` rows for the records at ``starts``."""
        raise NotImplementedError

    def _walk(self, chain: Chain, p: int, end: int) -> Iterator[tuple[np.ndarray, int, bool]]:
        """Walk [p, end) region by region; honours ``on_truncation``."""
        avg, first = None, p
        while p < end:
            limit, region = min(p + REGION, end), p
            try:
                starts, p, stopped = walk(chain, p, limit, avg=avg)
                if starts.size > 1000 and avg is None:
                    avg = max((p - first) // starts.size, 1)
            except TruncatedFile as err:
                if not self._stop_on_truncation:
                    raise
                self.truncated_at = err.offset
                starts, _, stopped = walk(chain, p, err.offset) if err.offset > p else \
                    (np.zeros(0, np.int64), p, False)
                yield starts, err.offset, True
                return
            yield starts, p, stopped
            self.release(region, p)
            if stopped:
                return

    def forget_comments(self) -> None:
        """Start :attr:`comments` afresh: rows of later batches get codes from 0 in a new list,
        and the codes of rows already handed out no longer resolve. For a consumer done with
        every earlier row: pcapng comments are distinct per collective call and step, so the
        table otherwise grows with the file."""
        self.comments = []
        self._comment_index = {}

    def release(self, start: int, stop: int) -> None:
        """Drop the whole pages of ``data[start:stop]`` from this process's resident memory
        (MADV_DONTNEED on the read-only mapping; byte offsets, int). The pages stay in the page
        cache and a later access to ``data`` there maps them again, so nothing read changes.

        The reader calls it for every region it has walked; a consumer that reads the frames
        of a batch after the reader has moved on (batches joined across regions, frames read
        by the CRC check) calls it for the batch's bytes when done, or every page it touched
        stays resident and memory grows with the file."""
        if self._mm is not None and hasattr(mmap, "MADV_DONTNEED"):
            lo = start // mmap.PAGESIZE * mmap.PAGESIZE
            hi = stop // mmap.PAGESIZE * mmap.PAGESIZE
            if hi > lo:
                self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def _label_codes(self, texts: list[str]) -> np.ndarray:
        """Codes in :attr:`comments` for distinct texts, adding new ones."""
        out = np.empty(len(texts), np.int32)
        for i, t in enumerate(texts):
            code = self._comment_index.get(t)
            if code is None:
                code = self._comment_index[t] = len(self.comments)
                self.comments.append(t)
            out[i] = code
        return out


def located_error(cls, offset: int, message: str):
    """An error of class ``cls`` whose message ends with the byte offset, kept as ``.offset``."""
    err = cls(f"{message} (byte offset {offset})")
    err.offset = offset
    return err


def even_step(starts: np.ndarray) -> int:
    """The distance between consecutive record starts (int64 (n,)) when they are evenly spaced
    (records of one size back to back: a headers-only capture), else 0."""
    n = starts.size
    if n < 2:
        return 0
    step = int(starts[1] - starts[0])
    if step <= 0 or int(starts[-1] - starts[0]) != step * (n - 1) or \
            (n > 2 and np.any(np.diff(starts) != step)):
        return 0
    return step


def columns_at(data: np.ndarray, starts: np.ndarray, dtype: np.dtype, views: ByteViews,
               step: int | None = None) -> np.ndarray:
    """The ``dtype`` headers at byte offsets ``starts`` (int64 (n,)) of ``data``, (n,): a
    strided view over the file itself when the starts are evenly spaced (``step``, or found
    with :func:`even_step`), every field then read by column with no gather; otherwise one
    gather of whole headers (one cache/TLB miss per record). The caller guarantees that every
    header lies inside ``data``."""
    step = even_step(starts) if step is None else step
    if step >= dtype.itemsize:
        return np.ndarray((starts.size,), dtype, buffer=data, offset=int(starts[0]),
                          strides=(step,))
    return views(f"V{dtype.itemsize}")[starts].view(dtype)
