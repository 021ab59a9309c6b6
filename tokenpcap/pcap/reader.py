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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenpcap.errors import BadMagic, CaptureError, TruncatedFile
from tokenpcap.pcap.chain import ByteViews, Chain, walk
from tokenpcap.pcap.formats import (
    BT_SHB, ERF_ETH_TYPES, ERF_LINKTYPE, ERF_RECORD, ERF_TYPE_PAD, LINKTYPE_ERF, MAX_SNAPLEN,
    PCAP_FILE_HEADER, PCAP_MAGIC_NSEC, PCAP_MAGIC_USEC, PCAP_RECORD)
from tokenpcap.pcap.timestamps import NS, erf_to_ns

__all__ = ["RECORD_DTYPE", "CHUNK", "InterfaceInfo", "Capture", "open_capture", "unwrap_erf"]

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
        """Drop the mapping (it stays alive while arrays that view it do)."""
        self.data = np.zeros(0, np.uint8)
        self.views = ByteViews(self.data)

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
        while p < end:
            limit = min(p + REGION, end)
            try:
                starts, p, stopped = walk(chain, p, limit)
            except TruncatedFile as err:
                if not self._stop_on_truncation:
                    raise
                self.truncated_at = err.offset
                starts, _, stopped = walk(chain, p, err.offset) if err.offset > p else \
                    (np.zeros(0, np.int64), p, False)
                yield starts, err.offset, True
                return
            yield starts, p, stopped
            if stopped:
                return

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


def _error(cls, offset: int, message: str):
    err = cls(f"{message} (byte offset {offset})")
    err.offset = offset
    return err


def unwrap_erf(views: ByteViews, rec: np.ndarray, file: Path) -> np.ndarray:
    """Unwrap ERF records in place; ``rec`` rows have ``offset``/``caplen`` of the ERF record.

    Sets offset, caplen, orig_len (= wlen), linktype and time_ns (ERF timestamp, rounded to the
    nearest ns as Wireshark does). Returns a bool mask of the rows to keep (PAD records dropped).

    Raises:
        CaptureError: a record shorter than its ERF header (with extension headers and pad), or
            an ``rlen`` shorter than the header; the message names the record's byte offset.
    """
    if rec.size == 0:
        return np.ones(0, bool)
    d = rec["offset"].astype(np.int64)
    have = rec["caplen"].astype(np.int64)
    short = have < ERF_RECORD.size
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise _error(CaptureError, int(rec["record"][i]), f"{file}: ERF record: length got "
                     f"{int(have[i])}, expected >= {ERF_RECORD.size}")
    u1 = views.data
    typ = u1[d + 8].astype(np.int64)
    rlen = views(">u2")[d + ERF_RECORD.offset("rlen")].astype(np.int64)
    wlen = views(">u2")[d + ERF_RECORD.offset("wlen")].astype(np.int64)
    hdr = np.full(d.size, ERF_RECORD.size, np.int64)
    more = np.flatnonzero(typ & 0x80)
    while more.size:                                   # extension headers, 8 bytes each
        over = hdr[more] + 8 > have[more]
        if over.any():
            i = int(more[np.flatnonzero(over)[0]])
            raise _error(CaptureError, int(rec["record"][i]),
                         f"{file}: ERF extension headers run past the record")
        flag = u1[d[more] + hdr[more]] & 0x80
        hdr[more] += 8
        more = more[flag != 0]
    base = typ & 0x7F
    hdr += np.where(np.isin(base, ERF_ETH_TYPES), 2, 0)
    bad = (hdr > have) | (rlen < hdr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _error(CaptureError, int(rec["record"][i]), f"{file}: ERF header: got rlen "
                     f"{int(rlen[i])}, record {int(have[i])} bytes, expected >= header {int(hdr[i])}")
    lut = np.full(128, LINKTYPE_ERF, np.int64)
    for k, v in ERF_LINKTYPE.items():
        lut[k] = v
    lt = lut[base]
    known = lt != LINKTYPE_ERF
    rec["time_ns"] = erf_to_ns(views("<u8")[d])
    rec["offset"] = np.where(known, d + hdr, d)
    rec["caplen"] = np.where(known, np.minimum(np.minimum(wlen, rlen - hdr), have - hdr), have)
    rec["orig_len"] = np.where(known, wlen, rec["orig_len"])
    rec["linktype"] = lt
    return base != ERF_TYPE_PAD


# --- classic pcap -----------------------------------------------------------------------------
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

    def advance(self, cur):
        return cur + self.cap_view[np.minimum(cur, self.last)] + self.header

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
        raw, max_caplen = self.raw, self.max_caplen
        while p < limit and len(out) < max_count:
            if p + hl > end:
                raise self.truncated(p, hl, "pcap record header")
            c = unpack(raw, p + at)[0]
            if c > max_caplen:
                raise self.corrupt(p, f"pcap record: caplen got {c}, expected <= {max_caplen} "
                                      "(the snaplen, or libpcap's maximum 262144)")
            if p + hl + c > end:
                raise self.truncated(p, hl + c, "pcap record")
            out.append(p)
            p += hl + c
        return out, p, False


class PcapCapture(Capture):
    """Classic pcap; attributes ``byte_order``, ``nanosecond``, ``snaplen``, ``linktype``."""

    format = "pcap"

    def __init__(self, path, data, raw, on_truncation):
        super().__init__(path, data, on_truncation)
        if self.size < PCAP_FILE_HEADER.size:
            raise _error(TruncatedFile, 0, f"{path}: pcap file header: got {self.size} bytes, "
                         f"expected {PCAP_FILE_HEADER.size}")
        magic_le = int(self.views("<u4")[0])
        self.byte_order = "<" if magic_le in (PCAP_MAGIC_USEC, PCAP_MAGIC_NSEC) else ">"
        h = PCAP_FILE_HEADER.unpack(data, 0, self.byte_order)
        self.nanosecond = h["magic"] == PCAP_MAGIC_NSEC
        if h["version_major"] != 2:
            raise _error(CaptureError, 4, f"{path}: pcap version_major: got {h['version_major']}, "
                         "expected 2")
        self.snaplen = h["snaplen"]
        self.linktype = h["linktype"] & 0xFFFF     # upper bits: FCS length and reserved (§4)
        self.interfaces = [InterfaceInfo(0, self.linktype, self.snaplen,
                                         tsresol=9 if self.nanosecond else 6,
                                         byte_order=self.byte_order)]
        self._frac = NS if self.nanosecond else 1_000_000
        first_sec = int(self.views(self.byte_order + "u4")[24]) if self.size >= 28 else 0
        self._chain = _PcapChain(data, raw, self.size, self.byte_order, self._frac,
                                 max(self.snaplen, MAX_SNAPLEN), first_sec, str(path))

    def _regions(self):
        for starts, _, _ in self._walk(self._chain, PCAP_FILE_HEADER.size, self.size):
            yield starts, None

    def _decode(self, starts, ctx):
        u4 = self.views(self.byte_order + "u4")
        rec = np.empty(starts.size, RECORD_DTYPE)
        t = rec["time_ns"]
        np.multiply(u4[starts], NS, out=t, dtype=np.int64)
        t += u4[starts + 4].astype(np.int64) * (NS // self._frac)
        rec["offset"] = starts + PCAP_RECORD.size
        rec["record"] = starts
        rec["caplen"] = u4[starts + 8]
        rec["orig_len"] = u4[starts + 12]
        rec["interface"] = 0
        rec["comment"] = -1
        rec["linktype"] = self.linktype
        if self.linktype == LINKTYPE_ERF:
            rec = rec[unwrap_erf(self.views, rec, self.path)]
        return rec


# --- raw ERF ----------------------------------------------------------------------------------
_ERF_TYPES = np.zeros(128, bool)
_ERF_TYPES[list(range(1, 30)) + [ERF_TYPE_PAD]] = True


class _ErfChain(Chain):
    header = ERF_RECORD.size

    def __init__(self, data, raw, end, first_sec, name):
        super().__init__(data, end, name)
        self.raw, self.first_sec = raw, first_sec
        self.rlen = self.views(">u2")
        self.struct = ERF_RECORD.struct("rlen")
        self.last = max(end - self.header, 0)
        self.rlen_view = np.ndarray((self.last + 1,), ">u2", buffer=data, offset=10,
                                    strides=(1,)) if end >= self.header else np.zeros(1, ">u2")

    def advance(self, cur):
        return cur + self.rlen_view[np.minimum(cur, self.last)]

    def step(self, pos):
        inb = pos + self.header <= self.end
        r = self.rlen[np.where(inb, pos, 0) + 10].astype(np.int64)
        nxt = pos + r
        return nxt, inb & (r >= self.header) & (nxt <= self.end), np.zeros(pos.size, bool)

    def plausible(self, pos):
        r = self.rlen[pos + 10].astype(np.int64)
        sec = self.views("<u4")[pos + 4].astype(np.int64)
        return (_ERF_TYPES[self.data[pos + 8] & 0x7F] & (r >= self.header)
                & (pos + r <= self.end) & (np.abs(sec - self.first_sec) < (1 << 26)))

    def scalar(self, p, limit, max_count):
        out, unpack, end, raw = [], self.struct.unpack_from, self.end, self.raw
        while p < limit and len(out) < max_count:
            if p + 16 > end:
                raise self.truncated(p, 16, "ERF record header")
            r = unpack(raw, p + 10)[0]
            if r < 16:
                raise self.corrupt(p, f"ERF record: rlen got {r}, expected >= 16")
            if p + r > end:
                raise self.truncated(p, r, "ERF record")
            out.append(p)
            p += r
        return out, p, False


class ErfCapture(Capture):
    """A raw ERF file (no file header; records back to back)."""

    format = "erf"

    def __init__(self, path, data, raw, on_truncation):
        super().__init__(path, data, on_truncation)
        first_sec = int(self.views("<u4")[4]) if self.size >= 8 else 0
        self._chain = _ErfChain(data, raw, self.size, first_sec, str(path))
        self.interfaces = [InterfaceInfo(i, LINKTYPE_ERF, name=f"Port {'ABCD'[i]}")
                           for i in range(4)]

    def _regions(self):
        for starts, _, _ in self._walk(self._chain, 0, self.size):
            yield starts, None

    def _decode(self, starts, ctx):
        rec = np.empty(starts.size, RECORD_DTYPE)
        rec["offset"] = starts
        rec["record"] = starts
        rec["caplen"] = self.views(">u2")[starts + 10]
        rec["orig_len"] = rec["caplen"]
        rec["interface"] = self.data[starts + 9] & 3
        rec["comment"] = -1
        return rec[unwrap_erf(self.views, rec, self.path)]


def _looks_like_erf(data: np.ndarray) -> bool:
    if data.size < 16:
        return False
    rlen = int.from_bytes(data[10:12].tobytes(), "big")
    return bool(_ERF_TYPES[data[8] & 0x7F]) and 16 <= rlen <= data.size


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
        CaptureError: the file cannot be opened or read (names the path).
        BadMagic: not a format we know (names the first four bytes).
    """
    from tokenpcap.pcap.pcapng_reader import PcapngCapture

    path = Path(path)
    if on_truncation not in ("error", "stop"):
        raise CaptureError(f"{path}: on_truncation: got {on_truncation!r}, expected 'error' or 'stop'")
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
    if format == "erf" or (format is None and (_looks_like_erf(data) or
                                               (not data.size and path.suffix == ".erf"))):
        return ErfCapture(path, data, raw, on_truncation)
    raise _error(BadMagic, 0, f"{path}: magic got {head.hex() or 'an empty file'}, expected a "
                 "pcap (a1b2c3d4/a1b23c4d), pcapng (0a0d0d0a) or ERF file")
