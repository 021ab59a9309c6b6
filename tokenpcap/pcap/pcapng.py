"""Streaming pcapng writer: one Interface Description Block per NIC, Enhanced Packet Blocks with
a per-packet ``opt_comment``, built batch by batch with numpy (draft-ietf-opsawg-pcapng).

Layout of one EPB (§4.3), all 32-bit words in the section's byte order::

    block_type=6 | block_length | interface_id | ts_high | ts_low | caplen | orig_len
    [ERF header, 16 bytes, on an ERF (InfiniBand) interface] frame bytes, zero pad to 4
    [opt_comment code=1 | length | UTF-8 text, zero pad to 4 | opt_endofopt 0,0]   (optional)
    block_length

Timestamps are written with ``if_tsresol`` = 9: the 64-bit EPB timestamp is integer ns.
Comments are factorized: each distinct text is encoded once per writer. A batch whose frame bytes
all go into the buffer is laid out by one compiled pass (:mod:`tokenpcap.pcap.layout`), each
block's option bytes copied from the encoded labels; around a gather fill's payload holes the
option bytes are scattered with one numpy assignment per distinct encoded length.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tokenpcap import __version__
from tokenpcap.errors import EncodeError
from tokenpcap.pcap.formats import (
    EPB, EPB_OPTIONS, ERF_RECORD, IDB, IDB_OPTIONS, MAX_SNAPLEN, OPT_COMMENT, SHB, SHB_OPTIONS,
    TRAILER, encode_options, pad4, stacked_dtype)
from tokenpcap.pcap.gather import gather_holes, iovecs
from tokenpcap.pcap.output import check_batch, check_caplen, scatter
from tokenpcap.pcap.writer import Fill, fill_erf_header, RecordWriter, check_link, check_snaplen

__all__ = ["Interface", "Comments", "PcapngWriter"]

_EPB_FIXED = EPB.size + 4            # 28-byte header + trailing block_length
#: the previous block's trailing block_length followed by an EPB header (see write_batch)
_TRAILER_EPB = {o: stacked_dtype([("prev_", TRAILER), ("", EPB)], o) for o in "<>"}
_I64_MAX = np.iinfo(np.int64).max
_NO_CODES = np.zeros(0, np.int64)
_NO_WORDS = np.zeros(0, np.uint32)
_SWAP = {"<": sys.byteorder != "little", ">": sys.byteorder != "big"}   # file order vs machine


@dataclass(frozen=True)
class Interface:
    """One capture interface (a NIC) of a pcapng section.

    Attributes:
        name: ``if_name`` (e.g. ``"node0/nic3"``).
        description: ``if_description`` or None.
        speed_bps: ``if_speed`` in bits per second, or None.
        link: ``"ethernet"`` (IDB linktype 1) or ``"infiniband"`` (linktype 197, ERF type 21).
        snaplen: frame bytes kept per packet on this interface; None takes the writer's.
    """

    name: str
    description: str | None = None
    speed_bps: int | None = None
    link: str = "ethernet"
    snaplen: int | None = None


@dataclass(frozen=True)
class Comments:
    """Per-packet comments as categories: ``labels[codes[i]]`` is packet i's comment.

    ``codes`` int (n,); ``-1`` or a ``None`` label means no comment. Cheaper than a list of n
    strings: the generator has phase/collective codes per packet already.
    """

    labels: Sequence[str | None]
    codes: np.ndarray

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, rows) -> "Comments":
        """The comments of a slice (or index array) of the packets; labels are shared."""
        return Comments(self.labels, np.asarray(self.codes)[rows])

    @classmethod
    def from_strings(cls, comments: Sequence[str | None]) -> "Comments":
        """Factorize a sequence of strings (one dict lookup per element, in C via ``map``)."""
        index: dict[str | None, int] = {}
        codes = np.fromiter(map(lambda c: index.setdefault(c, len(index)), comments),
                            np.int64, count=len(comments))
        return cls(tuple(index), codes)


class PcapngWriter(RecordWriter):
    """pcapng writer: SHB, one IDB per interface, EPBs; more sections with :meth:`new_section`.

    Args:
        path: output file (temporary file renamed at :meth:`close`).
        interfaces: the interfaces (NICs) of the first section; packet ``interface`` indexes it.
        snaplen: default frame bytes kept per packet (1..262144).
        byte_order: ``"<"`` or ``">"`` for the first section (readers take it from each SHB).
        userappl: ``shb_userappl`` text. No host name or date is written, so the same input gives
            byte-identical files.
        section_comment: ``opt_comment`` of the SHB, or None.
        overwrite, threaded: as :class:`~tokenpcap.pcap.writer.PcapWriter`.

    Raises:
        EncodeError: bad interfaces, snaplen or byte order. OutputError: cannot create the file.
    """

    _where = "pcapng writer"

    def __init__(self, path: str | os.PathLike, interfaces: Sequence[Interface], *,
                 snaplen: int = MAX_SNAPLEN, byte_order: str = "<",
                 userappl: str = f"tokenpcap {__version__}", section_comment: str | None = None,
                 overwrite: bool = True, threaded: bool = True):
        self.snaplen = check_snaplen(snaplen, self._where)
        self._userappl = userappl
        section = self._section_bytes(interfaces, byte_order, section_comment)
        super().__init__(path, overwrite=overwrite, threaded=threaded)
        self._out.write(section)
        self._blobs: dict[str | None, bytes] = {}

    def new_section(self, interfaces: Sequence[Interface], *, byte_order: str | None = None,
                    section_comment: str | None = None) -> None:
        """Start a new section (SHB + IDBs); later ``interface`` ids index ``interfaces``.

        Raises:
            EncodeError: bad interfaces or byte order.
        """
        section = self._section_bytes(interfaces, byte_order or self.byte_order, section_comment)
        self._blobs = {}
        self._out.write(section)

    def _section_bytes(self, interfaces, order: str, comment) -> bytes:
        if order not in ("<", ">"):
            raise EncodeError(f"{self._where}: byte_order: got {order!r}, expected '<' or '>'")
        if not interfaces:
            raise EncodeError(f"{self._where}: interfaces: got none, expected at least one")
        self.byte_order = order
        self.interfaces = tuple(interfaces)
        opts = [(4, self._userappl)] + ([(OPT_COMMENT, comment)] if comment else [])
        out = [_block(SHB, order, encode_options(opts, SHB_OPTIONS, order))]
        self._snap = np.empty(len(interfaces), np.int64)
        self._erf = np.empty(len(interfaces), np.int64)
        for i, itf in enumerate(interfaces):
            linktype = check_link(itf.link, f"{self._where}: interface {i}")
            snap = check_snaplen(itf.snaplen or self.snaplen, f"{self._where}: interface {i}")
            self._snap[i] = snap
            self._erf[i] = ERF_RECORD.size if itf.link == "infiniband" else 0
            opts = [(2, itf.name)]
            if itf.description:
                opts.append((3, itf.description))
            if itf.speed_bps is not None:
                if not 0 <= int(itf.speed_bps) < 1 << 64:
                    raise EncodeError(f"{self._where}: interface {i}: speed_bps: got "
                                      f"{itf.speed_bps}, expected 0..2**64-1")
                opts.append((8, int(itf.speed_bps)))
            opts.append((9, 9))                       # if_tsresol: 10**-9 s
            if linktype == 1:
                opts.append((13, 0))                  # if_fcslen: frames carry no FCS
            out.append(_block(IDB, order, encode_options(opts, IDB_OPTIONS, order),
                              linktype=linktype, snaplen=min(snap + int(self._erf[i]), MAX_SNAPLEN)))
        return b"".join(out)

    def _comment_codes(self, comments, n: int) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
        """(codes int64 (n,), option length per label + [0], option bytes per label)."""
        if not isinstance(comments, Comments):
            if len(comments) != n:
                raise EncodeError(f"{self._where}: comments: got {len(comments)} entries, expected {n}")
            comments = Comments.from_strings(comments)
        codes = np.asarray(comments.codes)
        if codes.shape != (n,) or codes.dtype.kind not in "iu":
            raise EncodeError(f"{self._where}: comments.codes: got {codes.dtype} {codes.shape}, "
                              f"expected int ({n},)")
        k = len(comments.labels)
        if n and (int(codes.min()) < -1 or int(codes.max()) >= k):
            raise EncodeError(f"{self._where}: comments.codes: got values outside -1..{k - 1}")
        if len(self._blobs) > 4096:                 # unique texts per packet: keep memory flat
            self._blobs = {}
        blobs = []
        for label in comments.labels:
            blob = self._blobs.get(label)
            if blob is None:
                opts = [(OPT_COMMENT, label)] if label is not None else []
                blob = self._blobs[label] = encode_options(opts, EPB_OPTIONS, self.byte_order)
            blobs.append(blob)
        lengths = np.array([len(b) for b in blobs] + [0], np.int64)   # code -1 -> last -> 0
        return codes.astype(np.int64, copy=False), lengths, blobs

    def write_batch(self, time_ns: np.ndarray, frame_bytes: np.ndarray, fill: Fill,
                    interface: np.ndarray | int = 0,
                    comments: Sequence[str | None] | Comments | None = None,
                    caplen: np.ndarray | None = None) -> None:
        """Append n EPBs.

        Args:
            time_ns: int64 (n,) ns since the epoch (written as the 64-bit EPB timestamp).
            frame_bytes: int64 (n,) frame length on the wire without FCS.
            fill: ``fill(out, offsets, caplen)`` writes frame bytes (see module doc).
            interface: int or int (n,): interface index in the current section.
            comments: None, n strings (None = no comment), or :class:`Comments`.
            caplen: int64 (n,) frame bytes kept per record (a copy of a capture cut shorter than
                its snaplen), or None for ``min(frame_bytes, interface snaplen)``.

        Raises:
            EncodeError: bad arrays, negative time, unknown interface, bad comments, a
                ``caplen`` above the frame or its interface's snaplen.
            OutputError: the write failed (the temporary file is removed).
        """
        t, fb = check_batch(time_ns, frame_bytes, where=self._where, max_time_ns=_I64_MAX,
                            max_frame=0xFFFFFFFF - ERF_RECORD.size)
        n = t.size
        if n == 0:
            return
        iface = np.asarray(interface, dtype=np.int64)
        nif = len(self.interfaces)
        if iface.ndim == 0:
            if not 0 <= int(iface) < nif:
                raise EncodeError(f"{self._where}: interface: got {int(iface)}, expected 0..{nif - 1}")
            snap, erf = int(self._snap[iface]), int(self._erf[iface])
        else:
            if iface.shape != (n,) or int(iface.min()) < 0 or int(iface.max()) >= nif:
                raise EncodeError(f"{self._where}: interface: got values outside 0..{nif - 1} "
                                  f"or shape {iface.shape}, expected ({n},)")
            snap, erf = self._snap[iface], self._erf[iface]
        if caplen is not None:
            caplen = check_caplen(caplen, fb, snap, self._where)
        elif iface.ndim == 0 and int(fb.min()) >= snap:     # every frame cut at the snaplen
            caplen = self._cut(n, snap)
        else:
            caplen = np.minimum(fb, snap)
        holes = gather_holes(fill, caplen)    # payload left out of the buffer (gather.py)
        if holes is None:
            self._blocks(t, fb, caplen, fill, iface.reshape(-1), comments)
            return
        if iface.ndim == 0:
            iface = np.full(n, int(iface), np.int64)
        data_len = caplen + erf
        padded = pad4(data_len)
        blen = padded + _EPB_FIXED
        if comments is not None:
            codes, lengths, blobs = self._comment_codes(comments, n)
            optlen = lengths[codes]
            blen += optlen
        gap = holes[1]
        ends = np.cumsum(blen - gap)          # block ends in the buffer; holes are multiples of 8
        starts = ends - blen + gap
        out = self._scratch.take(int(ends[-1]))
        words = out.view(self.byte_order + "u4")
        data_at = starts + EPB.size
        opt_at = data_at + padded - gap
        odd = np.flatnonzero(padded != data_len)      # zero the pad bytes before fill
        words[opt_at[odd] // 4 - 1] = 0
        # Block i's trailing length and block i+1's EPB header are adjacent: write them as one
        # 32-byte record at starts[i+1] - 4 (the last trailer and the first header alone).
        h = np.empty(n, _TRAILER_EPB[self.byte_order])
        h["prev_length"][1:] = blen[:-1]
        h["block_type"] = 6
        h["block_length"] = blen
        h["interface_id"] = iface
        h["ts_high"] = t >> 32
        h["ts_low"] = t & 0xFFFFFFFF
        h["caplen"] = data_len
        h["orig_len"] = fb + erf
        out[:EPB.size] = h[:1].view(np.uint8)[4:]
        room = blen - gap                     # bytes of each block in the buffer
        b0 = int(room[0])
        step = b0 if int(ends[-1]) == b0 * n and int(room.min()) == b0 else 0
        scatter(out, starts[1:] - 4, h[1:], 4, step)
        words[-1] = blen[-1]
        if np.any(erf):
            sel = np.flatnonzero(self._erf[iface])
            e = np.empty(sel.size, ERF_RECORD.dtype(self.byte_order))
            fill_erf_header(e, "", t[sel], fb[sel], caplen[sel], iface[sel])
            scatter(out, data_at[sel], e, 4)
        if comments is not None:
            _scatter_blobs(out, opt_at, codes, optlen, lengths, blobs)
        fill.fill_around(out, data_at + erf, caplen, gap)
        self._out.write_gather(iovecs(out, data_at + erf + holes[0], gap, fill.source), (out, fill))
        self.packets += n

    def _blocks(self, t: np.ndarray, fb: np.ndarray, caplen: np.ndarray, fill: Fill,
                iface: np.ndarray, comments) -> None:
        """Every EPB of the batch laid out by one compiled pass
        (:func:`~tokenpcap.pcap.layout.pcapng_blocks`), the frames by ``fill``, one write.
        ``iface`` int64 (n,) or (1,); the arrays are checked by :meth:`write_batch`.

        Raises:
            EncodeError: bad comments.
        """
        from tokenpcap.pcap.layout import pcapng_blocks, pcapng_size   # numba: first batch

        n = t.size
        if comments is None:
            codes, lengths, blob = _NO_CODES, _NO_CODES, _NO_WORDS
        else:
            codes, lengths, blobs = self._comment_codes(comments, n)
            joined = b"".join(blobs)         # every encoded option list is whole 32-bit words
            blob = np.frombuffer(joined, np.uint32) if joined else _NO_WORDS
        blob_at = np.zeros(lengths.size, np.int64)
        np.cumsum(lengths[:-1], out=blob_at[1:])
        iface = np.ascontiguousarray(iface, np.int64)
        caplen = np.ascontiguousarray(caplen, np.int64)
        codes = np.ascontiguousarray(codes, np.int64)
        out = self._scratch.take(pcapng_size(caplen, iface, self._erf, codes, lengths))
        offsets = np.empty(n, np.int64)
        pcapng_blocks(out, out.view(np.uint32), np.ascontiguousarray(t),
                      np.ascontiguousarray(fb), caplen, iface, self._erf, codes, lengths,
                      blob_at, blob, _SWAP[self.byte_order], offsets)
        fill(out, offsets, caplen)
        self._out.write(out)
        self.packets += n


def _scatter_blobs(out, opt_at, codes, optlen, lengths, blobs) -> None:
    """Copy each packet's option bytes ``blobs[codes[i]]`` to ``out[opt_at[i]:]``: one
    broadcast assignment per distinct comment when there are few, else one gather-and-scatter per
    distinct encoded length."""
    if len(blobs) <= 16:
        for k, blob in enumerate(blobs):
            if blob:
                sel = np.flatnonzero(codes == k)
                if sel.size:
                    scatter(out, opt_at[sel], np.frombuffer(blob, f"V{len(blob)}"), 4)
        return
    for size in np.unique(lengths[lengths > 0]):
        labels = [i for i, b in enumerate(blobs) if len(b) == size]
        table = np.frombuffer(b"".join(blobs[i] for i in labels), f"V{size}")
        local = np.zeros(len(blobs) + 1, np.int64)
        local[labels] = np.arange(len(labels))
        sel = np.flatnonzero(optlen == size)
        scatter(out, opt_at[sel], table[local[codes[sel]]], 4)


def _block(header, order: str, options: bytes, **fields: int) -> bytes:
    """A whole non-packet block: fixed part + options + trailing block_length (§3.1)."""
    length = header.size + len(options) + 4
    return (header.pack(order, block_length=length, **fields) + options
            + np.array(length, order + "u4").tobytes())
