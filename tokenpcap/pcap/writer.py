"""Streaming writers for classic pcap and raw ERF, batch by batch, without a loop per packet.

Every writer (these two and :class:`tokenpcap.pcap.pcapng.PcapngWriter`) takes batches the same way::

    w.write_batch(time_ns, frame_bytes, fill, interface=0, comments=None)

``time_ns`` int64 (n,) ns since the epoch, ``frame_bytes`` int64 (n,) frame length on the wire
without FCS. The writer lays out every record header of the batch in one buffer (one compiled
pass, :mod:`tokenpcap.pcap.layout`; numpy around a gather fill's payload holes), calls
``fill(out, offsets, caplen)`` so that the frame builder writes the first ``caplen[i]`` bytes of
frame ``i`` at ``out[offsets[i]:]`` (``caplen = min(frame_bytes, snaplen)``, possibly a
read-only array the writer keeps for the next batch; ``fill`` only reads it), then writes the
buffer with one call.

``link="infiniband"`` frames (LRH..VCRC) are wrapped in an ERF type-21 record; in pcap under
linktype 197 (LINKTYPE_ERF), because TShark refuses linktype 247 (case C13). ``snaplen`` always
counts frame bytes; for linktype 197 the pcap header's snaplen field adds the 16-byte ERF header.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.pcap.formats import (
    ERF_FLAG_VLEN, ERF_RECORD, ERF_TYPE_INFINIBAND, MAX_SNAPLEN, PCAP_FILE_HEADER, PCAP_MAGIC_NSEC,
    PCAP_MAGIC_USEC, PCAP_RECORD, stacked_dtype)
from tokenpcap.pcap.gather import gather_holes, iovecs
from tokenpcap.pcap.output import LINKS, AtomicOutput, Scratch, check_batch, check_caplen, scatter
from tokenpcap.pcap.timestamps import NS, ns_to_erf, split_ns

__all__ = ["PcapWriter", "ErfWriter", "RecordWriter", "Fill", "check_link", "check_snaplen",
           "fill_erf_header"]

#: ``fill(out uint8 (m,), offsets int64 (n,), caplen int64 (n,))``
Fill = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
_MAX_U32_NS = (1 << 32) * NS - 1          # last ns a 32-bit seconds field can hold
_ERF_MAX_FRAME = 0xFFFF - ERF_RECORD.size  # rlen and wlen are 16 bits


def check_link(link: str, where: str) -> int:
    """File link type for frame kind ``link`` ("ethernet" → 1, "infiniband" → 197 ERF).

    Raises:
        EncodeError: any other value, including 247: native InfiniBand is written as ERF
            (linktype 197, ERF type 21) because TShark refuses linktype 247 (case C13).
    """
    if link not in LINKS:
        raise EncodeError(f"{where}: link: got {link!r}, expected one of {sorted(LINKS)} "
                          "(InfiniBand goes into ERF, linktype 197; TShark refuses linktype 247)")
    return LINKS[link]


def check_snaplen(snaplen: int, where: str) -> int:
    """Raises: EncodeError: ``snaplen`` not an integer in 1..262144 (libpcap's maximum)."""
    if not isinstance(snaplen, (int, np.integer)) or not 1 <= snaplen <= MAX_SNAPLEN:
        raise EncodeError(f"{where}: snaplen: got {snaplen!r}, expected 1..{MAX_SNAPLEN}")
    return int(snaplen)


class RecordWriter:
    """Shared streaming machinery: atomic output, two scratch buffers, context manager."""

    _where = "writer"

    def __init__(self, path, *, overwrite: bool, threaded: bool):
        self._out = AtomicOutput(path, overwrite=overwrite, threaded=threaded)
        self._scratch = Scratch()
        self._frac = NS
        self._big = False
        self.path = self._out.path
        self.packets = 0
        self._full = np.zeros(0, np.int64)

    def _cut(self, n: int, snaplen: int) -> np.ndarray:
        """``caplen`` of a batch of n frames all cut at ``snaplen``: int64 (n,), read-only and
        kept for the next batch of that size and snaplen (a headers-only run's batches are all
        alike; a fresh array costs its page faults every batch)."""
        if self._full.size != n or (n and int(self._full[0]) != snaplen):
            self._full = np.full(n, snaplen, np.int64)
            self._full.flags.writeable = False
        return self._full

    @property
    def bytes_written(self) -> int:
        """Bytes handed to the file so far, headers included."""
        return self._out.bytes_written

    def record_room(self) -> tuple[np.ndarray, int]:
        """Where records laid out in place go (:meth:`write_records`): ``(buffer, at)``, the
        file's block buffer and the offset in it after everything written before
        (:meth:`tokenpcap.pcap.output.AtomicOutput.blocks`); :meth:`record_buffer` grows it.

        Raises:
            OutputError: the file is closed, or an earlier write failed.
        """
        return self._out.blocks()

    def record_buffer(self, nbytes: int) -> np.ndarray:
        """The buffer of :meth:`record_room`, at least ``nbytes`` long, its bytes kept."""
        return self._out.block_buffer(nbytes)

    def write_records(self, end: int, n: int) -> None:
        """Write the ``n`` whole records that the caller laid out in this file's record format
        (:attr:`record_layout`) in the buffer of :meth:`record_room`, from its offset up to
        ``end``, after everything written before, as :meth:`write_batch` writes a batch (past
        the page cache where the file system allows: :mod:`tokenpcap.pcap.blocks`). The
        buffer is not to be touched again before the next :meth:`record_room`.

        Raises:
            OutputError: the file is closed, or an earlier or this write failed.
        """
        self._out.write_blocks(end)
        self.packets += n

    def release_records(self) -> None:
        """Give the buffers of :meth:`record_room` back (the next call makes them again)."""
        self._out.release_blocks()

    def release_buffers(self) -> None:
        """Free the batch buffers kept for reuse (:meth:`Scratch.release`); the next batch
        allocates them again. Raises nothing."""
        self._scratch.release()

    def close(self) -> None:
        """Finish and rename the file into place (idempotent). Raises: OutputError."""
        self._out.close()

    def abort(self) -> None:
        """Drop everything written: the temporary file is removed, no output appears."""
        self._out.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _emit(self, headers: np.ndarray, caplen: np.ndarray, fill: Fill, holes) -> None:
        """Lay ``headers`` (n,) and frame ranges out back to back around the gather fill's
        payload holes ``holes`` (:func:`~tokenpcap.pcap.gather.gather_holes`), which are written
        from its source, fill, write once."""
        hl = headers.dtype.itemsize
        n = caplen.size
        at, length = holes
        rec = caplen - length + hl
        ends = np.cumsum(rec)
        starts = ends - rec
        out = self._scratch.take(int(ends[-1]))
        scatter(out, starts, headers)
        fill.fill_around(out, starts + hl, caplen, length)
        self._out.write_gather(iovecs(out, starts + hl + at, length, fill.source), (out, fill))
        self.packets += n

    def _records(self, t: np.ndarray, fb: np.ndarray, caplen: np.ndarray, fill: Fill,
                 interface, *, pcap: bool, erf: bool) -> None:
        """Every record header of the batch written by one compiled pass
        (:func:`~tokenpcap.pcap.layout.pcap_records`), the frames by ``fill``, one write.

        Raises:
            EncodeError: a time that rounds (microseconds) to 2**32 s; an ``interface`` array
                of ERF records not of one value per record.
        """
        from tokenpcap.pcap.layout import pcap_records    # numba: loaded by the first batch

        n = t.size
        iface = np.ascontiguousarray(np.asarray(interface if erf else 0, np.int64).reshape(-1))
        if iface.size not in (1, n):
            raise EncodeError(f"{self._where}: interface: got shape {np.shape(interface)}, "
                              f"expected an int or ({n},)")
        hl = (PCAP_RECORD.size if pcap else 0) + (ERF_RECORD.size if erf else 0)
        out = self._scratch.take(n * hl + int(caplen.sum()))
        offsets = np.empty(n, np.int64)
        top = pcap_records(out, np.ascontiguousarray(t), np.ascontiguousarray(fb),
                           np.ascontiguousarray(caplen), self._frac, pcap, erf, iface,
                           self._big, offsets)
        if top > 0xFFFFFFFF:
            raise EncodeError(f"{self._where}: time_ns: got a time rounding to 2**32 s, expected less")
        fill(out, offsets, caplen)
        self._out.write(out)
        self.packets += n


class PcapWriter(RecordWriter):
    """Classic pcap writer (draft-ietf-opsawg-pcap), streaming, atomic.

    Args:
        path: output file (written as a temporary file and renamed at :meth:`close`).
        link: ``"ethernet"`` (linktype 1) or ``"infiniband"`` (linktype 197, ERF type 21 records).
        snaplen: frame bytes kept per packet, 1..262144 (default 262144: every frame we make).
        nanosecond: magic 0xA1B23C4D with ns fractions (default) or 0xA1B2C3D4 with
            microseconds rounded half up, carrying into the seconds (case C9).
        byte_order: ``"<"`` (default) or ``">"``; readers take it from the magic.
        overwrite: replace an existing file at close (default True).
        threaded: overlap building with writing on one background thread (default True).

    Raises:
        EncodeError: bad ``link``/``snaplen``/``byte_order``.
        OutputError: the file cannot be created.
    """

    _where = "pcap writer"

    def __init__(self, path: str | os.PathLike, *, link: str = "ethernet",
                 snaplen: int = MAX_SNAPLEN, nanosecond: bool = True, byte_order: str = "<",
                 overwrite: bool = True, threaded: bool = True):
        self.linktype = check_link(link, self._where)
        self.snaplen = check_snaplen(snaplen, self._where)
        if byte_order not in ("<", ">"):
            raise EncodeError(f"{self._where}: byte_order: got {byte_order!r}, expected '<' or '>'")
        self.erf = link == "infiniband"
        parts = [("", PCAP_RECORD)] + ([("erf_", ERF_RECORD)] if self.erf else [])
        self._dtype = stacked_dtype(parts, byte_order)
        super().__init__(path, overwrite=overwrite, threaded=threaded)
        self._frac = NS if nanosecond else 1_000_000
        self._big = byte_order == ">"
        extra = ERF_RECORD.size if self.erf else 0
        self._out.write(PCAP_FILE_HEADER.pack(
            byte_order, magic=PCAP_MAGIC_NSEC if nanosecond else PCAP_MAGIC_USEC,
            snaplen=min(self.snaplen + extra, MAX_SNAPLEN), linktype=self.linktype))

    @property
    def record_layout(self) -> tuple[int, bool] | None:
        """``(frac_per_sec, big)``: the arguments with which
        :func:`~tokenpcap.pcap.layout.pcap_records` (``pcap`` True, ``erf`` False) lays out this
        file's record headers, for :meth:`write_records`; None when its records carry an ERF
        header too (InfiniBand, linktype 197)."""
        return None if self.erf else (self._frac, self._big)

    def write_batch(self, time_ns: np.ndarray, frame_bytes: np.ndarray, fill: Fill,
                    interface: np.ndarray | int = 0,
                    comments: Sequence[str] | None = None,
                    caplen: np.ndarray | None = None) -> None:
        """Append n records. ``interface`` goes into the ERF flags (bits 0-1) for InfiniBand and
        is otherwise not representable in classic pcap; ``comments`` are ignored (pcap has none).
        ``caplen`` int64 (n,): bytes kept per record (a copy of a capture cut shorter than its
        snaplen); None keeps ``min(frame_bytes, snaplen)``.

        Raises:
            EncodeError: bad arrays, a time outside 0 .. 2**32 s, a frame longer than 65519
                bytes for ERF or 2**32-1 otherwise, a ``caplen`` above the frame or the snaplen.
            OutputError: the write failed (the temporary file is removed).
        """
        t, fb = check_batch(time_ns, frame_bytes, where=self._where, max_time_ns=_MAX_U32_NS,
                            max_frame=_ERF_MAX_FRAME if self.erf else 0xFFFFFFFF)
        if t.size == 0:
            return
        if caplen is not None:
            caplen = check_caplen(caplen, fb, self.snaplen, self._where)
        elif int(fb.min()) >= self.snaplen:      # every frame cut at the snaplen
            caplen = self._cut(t.size, self.snaplen)
        else:
            caplen = np.minimum(fb, self.snaplen)
        holes = gather_holes(fill, caplen)
        if holes is None:
            self._records(t, fb, caplen, fill, interface, pcap=True, erf=self.erf)
            return
        h = np.empty(t.size, self._dtype)
        sec, frac = split_ns(t, self._frac)
        if int(sec.max()) > 0xFFFFFFFF:
            raise EncodeError(f"{self._where}: time_ns: got a time rounding to 2**32 s, expected less")
        h["ts_sec"] = sec
        h["ts_frac"] = frac
        extra = ERF_RECORD.size if self.erf else 0
        h["caplen"] = caplen + extra
        h["orig_len"] = fb + extra
        if self.erf:
            fill_erf_header(h, "erf_", t, fb, caplen, interface)
        self._emit(h, caplen, fill, holes)


class ErfWriter(RecordWriter):
    """Raw ERF file writer (``.erf``): one ERF type-21 (INFINIBAND) record per frame.

    Records are not padded (``vlen`` flag set); ``rlen = 16 + caplen``, ``wlen = frame_bytes``;
    the 64-bit fixed-point timestamp round-trips integer ns exactly (:func:`ns_to_erf`).

    Args:
        path, snaplen, overwrite, threaded: as :class:`PcapWriter`.

    Raises:
        EncodeError: bad ``snaplen``. OutputError: the file cannot be created.
    """

    _where = "erf writer"

    def __init__(self, path: str | os.PathLike, *, snaplen: int = MAX_SNAPLEN,
                 overwrite: bool = True, threaded: bool = True):
        self.snaplen = check_snaplen(snaplen, self._where)
        self.linktype = check_link("infiniband", self._where)
        super().__init__(path, overwrite=overwrite, threaded=threaded)

    def write_batch(self, time_ns: np.ndarray, frame_bytes: np.ndarray, fill: Fill,
                    interface: np.ndarray | int = 0,
                    comments: Sequence[str] | None = None) -> None:
        """Append n ERF records; ``interface`` & 3 goes into the flags, ``comments`` are ignored.

        Raises:
            EncodeError: bad arrays, a time outside 0 .. 2**32 s, a frame over 65519 bytes.
            OutputError: the write failed.
        """
        t, fb = check_batch(time_ns, frame_bytes, where=self._where, max_time_ns=_MAX_U32_NS,
                            max_frame=_ERF_MAX_FRAME)
        if t.size == 0:
            return
        caplen = self._cut(t.size, self.snaplen) if int(fb.min()) >= self.snaplen else \
            np.minimum(fb, self.snaplen)
        holes = gather_holes(fill, caplen)
        if holes is None:
            self._records(t, fb, caplen, fill, interface, pcap=False, erf=True)
            return
        h = np.empty(t.size, stacked_dtype([("erf_", ERF_RECORD)]))
        fill_erf_header(h, "erf_", t, fb, caplen, interface)
        self._emit(h, caplen, fill, holes)


def fill_erf_header(h: np.ndarray, p: str, t: np.ndarray, fb: np.ndarray, caplen: np.ndarray,
                interface) -> None:
    """Fill the ERF header fields (prefix ``p``) of structured array ``h`` for IB frames."""
    h[p + "ts"] = ns_to_erf(t)
    h[p + "type"] = ERF_TYPE_INFINIBAND
    h[p + "flags"] = ERF_FLAG_VLEN | (np.asarray(interface, dtype=np.int64) & 3)
    h[p + "rlen"] = caplen + ERF_RECORD.size
    h[p + "lctr"] = 0
    h[p + "wlen"] = fb
