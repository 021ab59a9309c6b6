"""Reading captures back: classic pcap (us/ns, both byte orders), pcapng, raw ERF and ERF in
pcap/pcapng (linktype 197), memory-mapped, as numpy batches of :data:`RECORD_DTYPE`.

``open_capture(path)`` recognises the format by its first bytes and returns a :class:`Capture`.
``capture.batches()`` yields structured arrays, one row per packet, with the byte offset of the
frame inside ``capture.data`` (the whole file as a read-only uint8 array over an ``mmap``), so
that analysis decodes headers of all packets with numpy, not one Python object per packet.

ERF records (raw files, and records of a linktype-197 pcap or pcapng interface) are unwrapped:
``offset``/``caplen`` point at the frame after the ERF header, its extension headers and, for
Ethernet types, the 2-byte pad; ``orig_len`` is the ERF ``wlen``; ``linktype`` names the bytes
(1 Ethernet, 247 InfiniBand LRH.., 228/229 IP); the time is the ERF timestamp, as Wireshark
shows it. ERF PAD records (type 48) are skipped.

Errors: every malformed length, magic, header or option raises :class:`~tokenpcap.errors.BadMagic`,
:class:`~tokenpcap.errors.TruncatedFile` or :class:`~tokenpcap.errors.CaptureError` whose message
names the byte offset (also in the exception's ``offset`` attribute).
"""
from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import BadMagic, CaptureError, TruncatedFile
from tokenpcap.pcap.capture import (
    CHUNK, RECORD_DTYPE, Capture, InterfaceInfo, columns_at, located_error)
from tokenpcap.pcap.chain import Chain
from tokenpcap.pcap.erf import ErfCapture, looks_like_erf, unwrap_erf
from tokenpcap.pcap.filekind import special_kind
from tokenpcap.pcap.formats import (
    BT_SHB, LINKTYPE_ERF, MAX_SNAPLEN, PCAP_FILE_HEADER, PCAP_MAGIC_NSEC, PCAP_MAGIC_USEC,
    PCAP_RECORD)
from tokenpcap.pcap.timestamps import NS

__all__ = ["RECORD_DTYPE", "CHUNK", "InterfaceInfo", "Capture", "PcapCapture", "ErfCapture",
           "open_capture", "unwrap_erf"]


class _PcapChain(Chain):
    header = PCAP_RECORD.size

    def __init__(self, data, raw, end, order, frac_per_sec, max_caplen, first_sec, name):
        super().__init__(data, end, name)
        self.raw = raw
        self.u4 = self.views(order + "u4")
        self.cap_at = PCAP_RECORD.offset("caplen")
        self.cap = PCAP_RECORD.struct("caplen", order)
        self.frac_per_sec, self.max_caplen, self.first_sec = frac_per_sec, max_caplen, first_sec
        self.last = max(end - self.header, 0)
        self.cap_view = np.ndarray((self.last + 1,), order + "u4", buffer=data, offset=self.cap_at,
                                   strides=(1,)) if end >= self.header else np.zeros(1, np.uint32)

    def step(self, pos):
        inb = pos + self.header <= self.end
        c = self.u4[np.where(inb, pos, 0) + self.cap_at].astype(np.int64)
        nxt = pos + self.header + c
        return nxt, inb & (c <= self.max_caplen) & (nxt <= self.end), np.zeros(pos.size, bool)

    def advance(self, cur, out, at=None):
        np.add(cur, self.cap_view[cur if at is None else at], out=out)
        out += self.header

    def bad(self, pos, at=None):
        return self.cap_view[pos if at is None else at] > self.max_caplen

    def fixed_ok(self, pos, at, size):
        """:meth:`Chain.fixed_ok` by one compare of the caplen fields: the next slot follows
        a record iff its caplen is ``size - 16``, which is not bad iff that is at most the
        maximum caplen."""
        c = size - self.header
        if c > self.max_caplen:
            return np.zeros(pos.size, bool)
        return self.cap_view[at] == c

    def plausible(self, pos):
        u4 = self.u4
        lo = max(self.first_sec - (1 << 26), 0)
        idx = np.flatnonzero((u4[pos] - np.uint32(lo)) < np.uint32(1 << 27))
        q = pos[idx]
        c = u4[q + 8].astype(np.int64)
        good = ((c <= self.max_caplen) & (u4[q + 12] >= c) & (u4[q + 4] < self.frac_per_sec)
                & (q + self.header + c <= self.end))
        out = np.zeros(pos.size, bool)
        out[idx[good]] = True
        return out

    def scalar(self, p, limit, max_count):
        out, unpack, end, hl, at = [], self.cap.unpack_from, self.end, self.header, self.cap_at
        raw, max_caplen, last, append, n = self.raw, self.max_caplen, self.end - hl, out.append, max_count
        while p < limit and n:
            if p > last:
                raise self.truncated(p, hl, "pcap record header")
            c = unpack(raw, p + at)[0]
            q = p + hl + c
            if q > end or c > max_caplen:
                if c > max_caplen:
                    raise self.corrupt(p, f"pcap record: caplen got {c}, expected <= {max_caplen} "
                                          "(the snaplen, or libpcap's maximum 262144)")
                raise self.truncated(p, hl + c, "pcap record")
            append(p)
            p = q
            n -= 1
        return out, p, False


class PcapCapture(Capture):
    """Classic pcap; attributes ``byte_order``, ``nanosecond``, ``snaplen``, ``linktype``."""

    format = "pcap"

    def __init__(self, path, data, raw, on_truncation):
        super().__init__(path, data, on_truncation)
        if self.size < PCAP_FILE_HEADER.size:
            raise located_error(TruncatedFile, 0, f"{path}: pcap file header: got {self.size} bytes, "
                         f"expected {PCAP_FILE_HEADER.size}")
        magic_le = int(self.views("<u4")[0])
        self.byte_order = "<" if magic_le in (PCAP_MAGIC_USEC, PCAP_MAGIC_NSEC) else ">"
        h = PCAP_FILE_HEADER.unpack(data, 0, self.byte_order)
        self.nanosecond = h["magic"] == PCAP_MAGIC_NSEC
        if h["version_major"] != 2:
            raise located_error(CaptureError, 4, f"{path}: pcap version_major: got {h['version_major']}, "
                         "expected 2")
        self.snaplen = h["snaplen"]
        self.linktype = h["linktype"] & 0xFFFF     # upper bits: FCS length and reserved (§4)
        self.interfaces = [InterfaceInfo(0, self.linktype, self.snaplen,
                                         tsresol=9 if self.nanosecond else 6,
                                         byte_order=self.byte_order)]
        self._frac = NS if self.nanosecond else 1_000_000
        first_sec = int(self.views(self.byte_order + "u4")[24]) if self.size >= 28 else 0
        self._dtype = PCAP_RECORD.dtype(self.byte_order)
        self._chain = _PcapChain(data, raw, self.size, self.byte_order, self._frac,
                                 max(self.snaplen, MAX_SNAPLEN), first_sec, str(path))

    def _regions(self):
        for starts, _, _ in self._walk(self._chain, PCAP_FILE_HEADER.size, self.size):
            yield starts, None

    @property
    def max_caplen(self) -> int:
        """The largest caplen a record may have (the snaplen, or libpcap's maximum)."""
        return self._chain.max_caplen

    def records(self, starts: np.ndarray) -> np.ndarray:
        """:data:`RECORD_DTYPE` rows of the records at byte offsets ``starts`` (int64 (n,),
        true record starts whose records lie inside the file), as :meth:`batches` gives them."""
        return self._decode(starts, None)

    def end_at(self, p: int) -> None:
        """The reader's verdict on a record at byte offset ``p`` that runs past the file or
        has a caplen above :attr:`max_caplen`: raises what :meth:`batches` raises there, or,
        when opened with ``on_truncation="stop"`` and the record is cut short, sets
        ``truncated_at``."""
        try:
            self._chain.scalar(p, self.size, 1)
        except TruncatedFile as err:
            if not self._stop_on_truncation:
                raise
            self.truncated_at = err.offset

    def _decode(self, starts, ctx):
        f = columns_at(self.data, starts, self._dtype, self.views)
        rec = np.empty(starts.size, RECORD_DTYPE)
        t = rec["time_ns"]
        np.multiply(f["ts_sec"], NS, out=t, dtype=np.int64)
        frac = f["ts_frac"]
        if self.nanosecond:
            np.add(t, frac, out=t, casting="unsafe")
        else:
            t += frac.astype(np.int64) * (NS // self._frac)
        np.add(starts, PCAP_RECORD.size, out=rec["offset"])
        rec["record"] = starts
        rec["caplen"] = f["caplen"]
        rec["orig_len"] = f["orig_len"]
        rec["interface"] = 0
        rec["comment"] = -1
        rec["linktype"] = self.linktype
        if self.linktype == LINKTYPE_ERF:
            rec = rec[unwrap_erf(self.views, rec, self.path)]
        return rec


def open_capture(path: str | os.PathLike, *, on_truncation: str = "error",
                 comments: bool = True, format: str | None = None) -> Capture:
    """Open a capture file, recognising pcap, pcapng or raw ERF by its first bytes.

    Raw ERF has no magic: a file that is neither pcap nor pcapng is read as ERF when its first
    record is plausible, when ``format="erf"``, or when it is empty and named ``*.erf``.

    Args:
        path: the file.
        format: None (recognise), or ``"pcap"``/``"pcapng"``/``"erf"`` to insist.
        on_truncation: ``"error"`` (raise :class:`TruncatedFile`) or ``"stop"`` (yield the
            complete records and set ``truncated_at``) when the last record is cut short.
        comments: decode pcapng EPB comments into ``comment`` codes (default True).

    Raises:
        CaptureError: the file cannot be opened or read, or is not a regular file (a FIFO, a
            device, a directory; names the path).
        BadMagic: not a format we know (names the first four bytes).
    """
    from tokenpcap.pcap.pcapng_reader import PcapngCapture

    path = Path(path)
    if on_truncation not in ("error", "stop"):
        raise CaptureError(f"{path}: on_truncation: got {on_truncation!r}, expected 'error' or 'stop'")
    kind = special_kind(path)
    if kind is not None:        # a FIFO would block the open, a device reads as empty or endless
        raise CaptureError(f"{path}: got {kind}, expected a regular capture file")
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as err:
        raise CaptureError(f"{path}: cannot open: {err.strerror}") from err
    data = np.frombuffer(raw, np.uint8)
    head = bytes(data[:4])
    if format not in (None, "pcap", "pcapng", "erf"):
        raise CaptureError(f"{path}: format: got {format!r}, expected pcap, pcapng or erf")
    if head in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") \
            and format in (None, "pcap"):
        return PcapCapture(path, data, raw, on_truncation)
    if int.from_bytes(head, "little") == BT_SHB and format in (None, "pcapng"):
        return PcapngCapture(path, data, raw, on_truncation, comments)
    if format == "erf" or (format is None and (looks_like_erf(data) or
                                               (not data.size and path.suffix == ".erf"))):
        return ErfCapture(path, data, raw, on_truncation)
    raise located_error(BadMagic, 0, f"{path}: magic got {head.hex() or 'an empty file'}, expected a "
                 "pcap (a1b2c3d4/a1b23c4d), pcapng (0a0d0d0a) or ERF file")
