"""ERF: unwrapping ERF records (raw ``.erf`` files and linktype-197 pcap/pcapng records) and the
raw ERF file reader (Endace ERF, EDM11-01: generic 16-byte header, optional 8-byte extension
headers flagged by bit 7 of the type, a 2-byte pad before Ethernet frames).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tokenpcap.errors import CaptureError
from tokenpcap.pcap.capture import RECORD_DTYPE, Capture, InterfaceInfo, located_error
from tokenpcap.pcap.chain import ByteViews, Chain
from tokenpcap.pcap.formats import (
    ERF_ETH_TYPES, ERF_LINKTYPE, ERF_RECORD, ERF_TYPE_PAD, LINKTYPE_ERF)
from tokenpcap.pcap.timestamps import erf_to_ns

__all__ = ["unwrap_erf", "ErfCapture", "looks_like_erf"]


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
        raise located_error(CaptureError, int(rec["record"][i]), f"{file}: ERF record: length got "
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
            raise located_error(CaptureError, int(rec["record"][i]),
                         f"{file}: ERF extension headers run past the record")
        flag = u1[d[more] + hdr[more]] & 0x80
        hdr[more] += 8
        more = more[flag != 0]
    base = typ & 0x7F
    hdr += np.where(np.isin(base, ERF_ETH_TYPES), 2, 0)
    bad = (hdr > have) | (rlen < hdr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise located_error(CaptureError, int(rec["record"][i]), f"{file}: ERF header: got rlen "
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

    def advance(self, cur, out, at=None):
        np.add(cur, self.rlen_view[cur if at is None else at], out=out)

    def bad(self, pos, at=None):
        return self.rlen_view[pos if at is None else at] < self.header

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
        out, unpack, end, raw, n = [], self.struct.unpack_from, self.end, self.raw, max_count
        append, last = out.append, self.end - 16
        while p < limit and n:
            if p > last:
                raise self.truncated(p, 16, "ERF record header")
            r = unpack(raw, p + 10)[0]
            q = p + r
            if q > end or r < 16:
                if r < 16:
                    raise self.corrupt(p, f"ERF record: rlen got {r}, expected >= 16")
                raise self.truncated(p, r, "ERF record")
            append(p)
            p = q
            n -= 1
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


def looks_like_erf(data: np.ndarray) -> bool:
    if data.size < 16:
        return False
    rlen = int.from_bytes(data[10:12].tobytes(), "big")
    return bool(_ERF_TYPES[data[8] & 0x7F]) and 16 <= rlen <= data.size
