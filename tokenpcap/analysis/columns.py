"""Columns of decoded header fields and how they are read (for :mod:`tokenpcap.analysis.decode`).

* :class:`Decoded`: one numpy array per :data:`DECODED_DTYPE` field;
* :func:`field_at`: one declared field (:meth:`tokenpcap.wire.fields.Header.slot`: byte span,
  shift, width) for many headers at once: through a strided view when the headers sit at the
  same column of regularly spaced rows, by a gather otherwise;
* :func:`header_block`: the first bytes of every frame of a batch as regularly spaced rows (the
  file itself when its records are of one size, one gathered block otherwise).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.pcap.chain import ByteViews
from tokenpcap.wire.fields import Header

__all__ = ["DECODED_DTYPE", "Decoded", "field_at", "fields_at", "u128_at", "header_block",
           "HEADER_BLOCK_BYTES"]

#: One row per packet. Shape (n,). Addresses are 128-bit keys split in two uint64: an IPv4
#: address or a LID sits in ``*_lo`` with ``*_hi`` 0; IPv6 addresses and GIDs use both.
#:
#: ========== ====== ===========================================================================
#: time_ns    int64  record time, ns since the epoch
#: orig_len   int64  frame length on the wire (no FCS); caplen int64: bytes in the file
#: interface  int32  capture interface; comment int32: pcapng comment code or -1
#: kind       uint8  KIND_OTHER / KIND_ROCEV2 / KIND_ROCEV1 / KIND_IB / KIND_PFC
#: ipver      uint8  4 or 6 (RoCE), 6 for IB with GRH, 0 otherwise
#: l3         int16  offset of the IP header / GRH (RoCE), 0 for IB (the LRH), -1 none
#: bth        int16  offset of the BTH, -1 none
#: end        int32  offset one past the ICRC (from the IP/GRH/LRH length), 0 when unknown
#: complete   bool   the captured bytes cover the whole transport packet (ICRC checkable)
#: src_hi/lo  uint64 source address key; dst_hi/lo uint64: destination
#: smac, dmac uint64 Ethernet addresses (48 bits), 0 for IB
#: vlan       int16  802.1Q VID or -1; pcp uint8
#: dscp, ecn  uint8  IPv4 DSCP/ECN, IPv6/GRH traffic class split the same way
#: sport      uint16 UDP source port (RoCEv2)
#: opcode ... BTH OpCode, PadCnt, FECN, BECN, AckReq, P_Key, DestQP, PSN
#: payload    int32  RDMA payload bytes (C7), -1 unknown; malformed bool: inconsistent lengths
#: why        uint8  why a row is malformed: bits of ``analysis_decode.MALFORMED_REASONS``
#: pfc_cev    uint16 PFC class-enable vector; pfc_max uint16: largest pause time of an enabled class
#: dmalen     int64  RETH DMA length (the whole message, on WRITE FIRST/ONLY, READ request), -1
#: ========== ====== ===========================================================================
DECODED_DTYPE = np.dtype([
    ("time_ns", "<i8"), ("orig_len", "<i8"), ("caplen", "<i8"), ("interface", "<i4"),
    ("comment", "<i4"), ("kind", "u1"), ("ipver", "u1"), ("l3", "<i2"), ("bth", "<i2"),
    ("end", "<i4"), ("complete", "?"), ("src_hi", "<u8"), ("src_lo", "<u8"), ("dst_hi", "<u8"),
    ("dst_lo", "<u8"), ("smac", "<u8"), ("dmac", "<u8"), ("vlan", "<i2"), ("pcp", "u1"),
    ("dscp", "u1"), ("ecn", "u1"), ("sport", "<u2"), ("opcode", "u1"), ("padcnt", "u1"),
    ("fecn", "u1"), ("becn", "u1"), ("ackreq", "u1"), ("pkey", "<u2"), ("destqp", "<u4"),
    ("psn", "<u4"), ("payload", "<i4"), ("malformed", "?"), ("why", "u1"), ("pfc_cev", "<u2"),
    ("pfc_max", "<u2"), ("dmalen", "<i8")])

_VIEW = {1: ">u1", 2: ">u2", 3: ">u4", 4: ">u4", 5: ">u8", 6: ">u8", 7: ">u8", 8: ">u8"}


class Decoded:
    """Columns of :data:`DECODED_DTYPE`, one numpy array per field (n,): contiguous columns keep
    every per-field pass a plain vector operation (a structured array would stride by its
    ~110-byte rows).

    ``d["psn"]`` is a column, ``d[rows]`` (index array or bool mask) a new :class:`Decoded` of
    those rows, ``d.size``/``len(d)`` the row count, ``d.to_records()`` the structured array
    (iteration yields its rows, for tests and small captures).
    """

    __slots__ = ("cols", "size")

    def __init__(self, cols: dict[str, np.ndarray], size: int):
        self.cols = cols
        self.size = size

    @classmethod
    def zeros(cls, n: int) -> "Decoded":
        return cls({k: np.zeros(n, DECODED_DTYPE[k]) for k in DECODED_DTYPE.names}, n)

    @classmethod
    def concat(cls, parts: list["Decoded"]) -> "Decoded":
        """The rows of ``parts`` one after the other (a new :class:`Decoded`)."""
        if len(parts) == 1:
            return parts[0]
        return cls({k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols},
                   sum(p.size for p in parts))

    def __getitem__(self, key):
        if isinstance(key, str):
            return self.cols[key]
        cols = {k: v[key] for k, v in self.cols.items()}
        return Decoded(cols, int(next(iter(cols.values())).size))

    def __len__(self) -> int:
        return self.size

    def to_records(self) -> np.ndarray:
        out = np.empty(self.size, DECODED_DTYPE)
        for k, v in self.cols.items():
            out[k] = v
        return out

    def __iter__(self):
        return iter(self.to_records())


def field_at(views: ByteViews, pos: np.ndarray, header: Header, name: str,
             checked: bool = False) -> np.ndarray:
    """Field ``name`` of ``header`` for headers starting at byte offsets ``pos`` of the buffer.

    The byte span, shift and width come from the declaration (:meth:`Header.slot`); fields of up
    to 64 bits. Offsets whose span would pass the end of the buffer read as 0 (callers mask
    those rows with their own length checks); ``checked=True`` promises every span is inside.

    Args:
        views: unaligned views over the capture bytes.
        pos: int64 (n,) offsets of the header's first byte.

    Returns:
        unsigned integers (n,), of the smallest numpy width that holds the span.
    """
    s = header.slot(name)
    f = s.field
    width = int(_VIEW[s.nbytes][-1])
    code = ("<" if f.little_endian else ">") + f"u{width}"
    raw = _read(views, np.asarray(pos, np.int64) + s.first_byte, code, width, checked)
    shift = 8 * (width - s.nbytes) + s.shift if not f.little_endian else 0
    if shift:
        raw = raw >> raw.dtype.type(shift)
    if f.bits < 8 * width:
        raw = raw & raw.dtype.type((1 << f.bits) - 1)
    return raw


def fields_at(views: ByteViews, pos: np.ndarray, header: Header, names: tuple[str, ...]
              ) -> dict[str, np.ndarray]:
    """Several fields of ``header`` at offsets ``pos``: each 32-bit word of the header that
    holds a requested field is read once and the fields are cut out of it (shift and mask from
    the declaration); fields wider than 32 bits, little-endian ones or ones that straddle a
    word boundary go through :func:`field_at`.

    Returns:
        ``{name: uint (n,)}`` (uint32 for the fields cut from words).
    """
    pos = np.asarray(pos, np.int64)
    out: dict[str, np.ndarray] = {}
    words: dict[int, np.ndarray] = {}
    regular = _regular(views, pos)          # then pos + constant is regular too
    for name in names:
        s = header.slot(name)
        f = s.field
        k = s.first_byte // 4
        if f.little_endian or f.bits > 32 or s.first_byte + s.nbytes > 4 * k + 4:
            out[name] = field_at(views, pos, header, name)
            continue
        w = words.get(k)
        if w is None:
            w = words[k] = _read(views, pos + 4 * k, ">u4", 4, False, regular)
        shift = 8 * (4 * k + 4 - s.first_byte - s.nbytes) + s.shift
        v = w >> np.uint32(shift) if shift else w
        out[name] = v & np.uint32((1 << f.bits) - 1) if f.bits < 32 else v
    return out


def _regular(views: ByteViews, at: np.ndarray) -> bool:
    """Whether offsets ``at`` are one column of the rows of a header block (a strided view)."""
    rows = getattr(views, "rows", None)
    return bool(rows is not None and at.size == rows and at.size
                and int(at[0]) >= views.first and (at - int(at[0]) == views.grid).all())


def _read(views: ByteViews, at: np.ndarray, code: str, width: int, checked: bool,
          regular: bool | None = None) -> np.ndarray:
    """Integers of type ``code`` (e.g. ``">u4"``) at byte offsets ``at``, native byte order.
    ``regular``: the result of :func:`_regular` for ``at`` when the caller knows it."""
    if regular is None:
        regular = _regular(views, at)
    if regular and int(at[0]) + (at.size - 1) * views.width + width <= views.data.size:
        return np.ndarray((at.size,), code, buffer=views.data, offset=int(at[0]),
                          strides=(views.width,)).astype(code[1:])   # a strided view
    v = views(code)
    if not checked and at.size and (int(at.min()) < 0 or int(at.max()) >= v.size):
        ok = (at >= 0) & (at < v.size)
        raw = v[np.where(ok, at, 0)]
        return np.where(ok, raw, 0).astype(raw.dtype)
    return v[at]


def u128_at(views: ByteViews, pos: np.ndarray, header: Header, name: str
          ) -> tuple[np.ndarray, np.ndarray]:
    """A 128-bit aligned field (IPv6 address, GID) as (high, low) uint64 at offsets ``pos``."""
    at = np.asarray(pos, np.int64) + header.slot(name).first_byte
    v = views(">u8")
    ok = (at >= 0) & (at + 8 < v.size)
    at = np.where(ok, at, 0)
    return np.where(ok, v[at], 0).astype(np.uint64), np.where(ok, v[at + 8], 0).astype(np.uint64)


#: bytes of each frame copied into the header block: Ethernet 14 + 802.1Q 4 + IPv4 with the
#: longest options 60 (or IPv6 40) + UDP 8 + BTH 12 + RETH 16 = 114; LRH + GRH + BTH + RETH = 76
HEADER_BLOCK_BYTES = 128


def header_block(data: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, ByteViews]:
    """Copy the first :data:`HEADER_BLOCK_BYTES` of every frame into one contiguous block (one
    gather of fixed-size records) so that the per-field gathers below stay in cache instead of
    touching the mapped file once per field. Returns (row offsets in the block, views).

    Bytes past a frame's caplen are whatever follows it in the file (zeros at the end of the
    file); every reader checks caplen before trusting a field.
    """
    w = HEADER_BLOCK_BYTES
    n = off.size
    if n == 0:
        return off, _BlockViews(np.zeros(w, np.uint8), 0, w)
    step = int(off[1] - off[0]) if n > 1 else w
    if n > 1 and step > 0 and int(off[0]) + (n - 1) * step + w <= data.size and \
            (off == np.arange(n, dtype=np.int64) * step + int(off[0])).all():
        # records of one size back to back (headers-only pcap): read the file in place
        return off, _BlockViews(data, n, step, first=int(off[0]))
    if int(off.max()) + w <= data.size:
        rows = np.ndarray((data.size - w + 1,), f"V{w}", buffer=data, strides=(1,))
        block = rows[off].view(np.uint8).reshape(n, w)
    else:
        block = np.zeros((n, w), np.uint8)
        inside = off + w <= data.size
        sel = np.flatnonzero(inside)
        if sel.size:
            rows = np.ndarray((data.size - w + 1,), f"V{w}", buffer=data, strides=(1,))
            block[sel] = rows[off[sel]].view(np.uint8).reshape(-1, w)
        for i in np.flatnonzero(~inside).tolist():      # the last frames of the file only
            tail = data[off[i]:]
            block[i, :tail.size] = tail
    return np.arange(n, dtype=np.int64) * w, _BlockViews(block.reshape(-1), n, w)


class _BlockViews(ByteViews):
    """:class:`ByteViews` over the header block, knowing its row count and row width."""

    def __init__(self, data: np.ndarray, rows: int, width: int, first: int = 0):
        super().__init__(data)
        self.rows, self.width, self.first = rows, width, first
        self.grid = np.arange(0, rows * width, width, dtype=np.int64)   # row starts - first


