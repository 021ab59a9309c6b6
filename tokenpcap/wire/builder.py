"""Vectorized frame building: a batch of ``PACKET_DTYPE`` rows → frame bytes in the caller's buffer.

No Python loop per packet. Each chunk of the batch is checked first
(:mod:`tokenpcap.wire.checks`), then built:

1. rows are grouped by opcode (a stable radix sort); each group has a :class:`~tokenpcap.wire.layout.Layout`;
2. a group's headers are built as big-endian 64-bit words, IPv4 header checksums included;
3. the ICRC (and VCRC, or the IPv6 UDP checksum) of every packet comes by CRC linearity from
   per-byte contribution tables (steps 2-3: :mod:`tokenpcap.wire.group`);
4. ``out[offsets[i]:]`` receives, for every frame at once, the header rows (straight from the
   header words), the payload straight from the pattern, and the bytes after it (pad, ICRC, VCRC
   or Ethernet padding: two little-endian words per row), each cut at ``caplen[i]``. A set of
   pieces of equal length is one fancy-indexed row copy through a sliding-window view of ``out``;
   pieces of mixed lengths are split by the binary digits of their length, one copy per digit.
   With ``skip`` the first payload bytes are left to a gather writer (:mod:`tokenpcap.wire.gather`).
   A group whose frames are all cut at one length before the pad and CRCs (headers only) skips
   steps 3-4: its header words ORed with the kept pattern bytes go straight to ``out`` (word
   stores at 8-byte-aligned offsets, else one row copy).

Before all this, the rows whose kept bytes end before their pad and CRCs (headers-only captures)
are built by one compiled loop over the rows, whatever their opcode (:mod:`tokenpcap.wire.direct`);
the steps above build the others (full frames and long frames cut in their CRCs, PFC).

Rows with ``line_protocol`` 1 or 2 carry NCCL LL/LL128 lines (:mod:`tokenpcap.wire.lines`): each
distinct (protocol, flag) is built by a view of the builder whose pattern and payload tables are
those lines', made by linearity from per-bit tables; a gather writer takes none of their payload.

The result equals :func:`tokenpcap.wire.frame.build_frame` byte for byte (tested), including the
ICRC of frames that ``caplen`` truncates (a snaplen never changes the bytes that are kept).
Rows with ``ce`` set leave with ECN CE and their IPv4 checksum adjusted (:mod:`tokenpcap.wire.ecn`).

Rows with ``opcode == OPCODE_PFC`` (:data:`tokenpcap.records.PACKET_DTYPE`: a switch port's
802.1Qbb frame) form one more group, built whole by :func:`tokenpcap.wire.pfc.build_pfc_frames`
(60 bytes, source MAC from :attr:`WireContext.switch_port_macs`, never tagged, no payload);
InfiniBand has no PFC and refuses them.
"""
from __future__ import annotations

import copy

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.records import OPCODE_PFC, PACKET_DTYPE
from tokenpcap.records.rows import take_rows
from tokenpcap.wire.checks import check_buffer, check_rows
from tokenpcap.wire.context import PAYLOAD_PATTERN_BYTES, WireContext
from tokenpcap.wire.direct import DirectTables
from tokenpcap.wire.group import GroupBuild
from tokenpcap.wire.heap import keep_heap
from tokenpcap.wire.layout import Layout
from tokenpcap.wire.lines import LinePatterns
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.pfc import PFC_FRAME_BYTES, check_pfc_rows, fill_pfc_rows
from tokenpcap.wire.placement import aligned, copy_pieces, store_words
from tokenpcap.wire.rdma import EXT_BYTES, frame_bytes, header_bytes

__all__ = ["FrameBuilder"]

_MAX_ROWS = 16384          # rows per chunk: flat memory, per-row arrays stay in the L2/L3 caches


class FrameBuilder(GroupBuild):
    """Builds the frames of ``PACKET_DTYPE`` batches under one :class:`WireContext`.

    Args:
        ctx: transport, marking, per-NIC addresses and payload pattern.
    """

    def __init__(self, ctx: WireContext):
        keep_heap()              # reuse chunk temporaries instead of faulting them in (heap.py)
        self.ctx = ctx
        self._layouts: dict[int, Layout] = {}
        self._const_words: dict[tuple[int, int], list[int]] = {}
        pat = ctx.pattern[:PAYLOAD_PATTERN_BYTES]
        self._pattern = pat
        self._pay32 = CRC32.prefix_registers(pat)
        self._c32 = CRC32.contributions(PAYLOAD_PATTERN_BYTES + 256).reshape(-1)
        if ctx.transport == "infiniband":
            self._pay16 = CRC16_VCRC.prefix_registers(pat, tail_zeros=4)
            c16 = CRC16_VCRC.contributions(PAYLOAD_PATTERN_BYTES + 256)
            self._c16 = c16.reshape(-1)
            self._c16_icrc = c16[3::-1]           # distance 3..0 for ICRC bytes 0..3
        # bytes before the payload per opcode (-1: unknown), as rdma.header_bytes gives them
        known = np.flatnonzero(EXT_BYTES >= 0)
        self._hb = np.full(256, -1, np.int64)
        self._hb[known] = header_bytes(known.astype(np.uint8), transport=ctx.transport,
                                       ip_version=ctx.ip_version, vlan=ctx.vlan, grh=ctx.grh)
        self._hb[OPCODE_PFC] = PFC_FRAME_BYTES            # a PFC frame is all header, no payload
        words = (pat[0::2].astype(np.int64) << 8) | pat[1::2]
        cum = np.concatenate([[0], np.cumsum(words)])
        p = np.arange(PAYLOAD_PATTERN_BYTES + 1)
        odd_byte = np.concatenate([[0], pat.astype(np.int64)])[p] << 8  # pattern[p-1] if p odd
        self._paysum = cum[p // 2] + np.where(p % 2 == 1, odd_byte, 0)
        self._lines: LinePatterns | None = None       # NCCL LL/LL128 payloads, made on first use
        self._direct = DirectTables(ctx, pat)          # headers-only rows, compiled (direct.py)

    # ------------------------------------------------------------------ public API
    def frame_bytes(self, packets: np.ndarray) -> np.ndarray:
        """Frame length without FCS of every packet: int64 ``(n,)`` (see :func:`rdma.frame_bytes`).

        Raises:
            EncodeError: an unknown opcode.
        """
        c = self.ctx
        op = packets["opcode"]
        pfc = op == OPCODE_PFC
        unknown = (EXT_BYTES[op] < 0) & ~pfc
        if unknown.any():
            i = int(np.flatnonzero(unknown)[0])
            raise EncodeError(f"packets[{i}].opcode: got {packets['opcode'][i]}, expected a known BTH opcode "
                              f"(tokenpcap.wire.rdma.OPCODES) or OPCODE_PFC")
        if pfc.any():
            check_pfc_rows(self.ctx, packets, pfc, 0)
            fb = np.full(len(packets), PFC_FRAME_BYTES, np.int64)
            rdma_rows = ~pfc
            fb[rdma_rows] = frame_bytes(op[rdma_rows], packets["payload_bytes"][rdma_rows],
                                        transport=c.transport, ip_version=c.ip_version, vlan=c.vlan,
                                        grh=c.grh)
            return fb
        return frame_bytes(op, packets["payload_bytes"], transport=c.transport,
                           ip_version=c.ip_version, vlan=c.vlan, grh=c.grh)

    def fill(self, packets: np.ndarray, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray,
             skip: np.ndarray | None = None) -> None:
        """Write the first ``caplen[i]`` bytes of frame ``i`` at ``out[offsets[i]:]``.

        The capture writers' batch interface (:mod:`tokenpcap.pcap.writer`, docs/wire.md). Bytes of ``out`` outside
        those ranges are not touched.

        Args:
            packets: ``PACKET_DTYPE`` ``(n,)``.
            out: uint8 ``(m,)`` with unit stride.
            offsets: int64 ``(n,)`` byte offsets into ``out``.
            caplen: int64 ``(n,)``, ``0 <= caplen[i] <= frame_bytes[i]``.
            skip: None, or int64 ``(n,)`` payload bytes to leave out, counted from the start of
                the payload (at most the payload bytes ``caplen`` keeps): frame ``i`` then takes
                ``caplen[i] - skip[i]`` bytes, its headers followed directly by payload byte
                ``skip[i]`` onwards (a gather writer adds ``pattern[:skip[i]]``; see
                :meth:`payload_holes`).

        Raises:
            EncodeError: a packet field out of range (names the row, field, value and range), a
                caplen longer than its frame, a skip longer than the kept payload, a range
                outside ``out``.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        caplen = np.asarray(caplen, dtype=np.int64)
        if skip is not None:
            skip = np.asarray(skip, dtype=np.int64)
            if skip.shape != caplen.shape:
                raise EncodeError(f"skip: got shape {skip.shape}, expected {caplen.shape}")
        check_buffer(packets, out, offsets, caplen if skip is None else caplen - skip)
        n = len(packets)
        if n == 0:
            return
        step = _MAX_ROWS
        for a in range(0, n, step):
            p, cap = packets[a:a + step], caplen[a:a + step]
            sk = None if skip is None else skip[a:a + step]
            check_rows(self.ctx, self._hb, p, cap, a, sk)   # per chunk: the rows are still in the cache
            self._fill_chunk(p, out, offsets[a:a + step], cap, sk)

    @property
    def direct(self) -> DirectTables:
        """The tables of the compiled headers-only loop (:mod:`tokenpcap.wire.direct`): ``hb``
        int64 ``(256,)`` the header bytes of each opcode it builds (-1: not yet added, which
        :meth:`fill` does when it meets the opcode), ``l4_checksum_end`` (-1, or the byte a
        row must end before over IPv6 with the UDP checksum)."""
        return self._direct

    @property
    def header_bytes_by_opcode(self) -> np.ndarray:
        """int64 ``(256,)``: bytes before the payload per opcode (-1: unknown; ``OPCODE_PFC``:
        the PFC frame's): the table :func:`~tokenpcap.wire.checks.check_rows` checks rows
        against."""
        return self._hb

    def payload_holes(self, packets: np.ndarray, caplen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each frame's kept payload starts and how much of it a gather writer may take
        from :attr:`payload_source` instead: ``(at, length)``, int64 ``(n,)`` each, ``length`` the
        kept payload bytes rounded down to a multiple of 8 (frame ``i``'s bytes
        ``[at[i], at[i] + length[i])`` equal ``payload_source[:length[i]]``).

        Raises:
            EncodeError: an unknown opcode.
        """
        op = packets["opcode"]
        at = self._hb[op]
        if int(at.min()) < 0:
            self.frame_bytes(packets)           # raises, naming the unknown opcode
        kept = np.minimum(np.asarray(caplen, dtype=np.int64) - at, packets["payload_bytes"])
        kept = np.where(packets["line_protocol"] != 0, 0, kept)   # NCCL lines: not the pattern
        return at, np.maximum(kept, 0) & ~7

    @property
    def payload_source(self) -> np.ndarray:
        """uint8 ``(PAYLOAD_PATTERN_BYTES,)``: every payload's bytes (payload byte j = element j)."""
        return self._pattern

    def build(self, packets: np.ndarray, snaplen: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Frames back to back in a new buffer: ``(buf uint8, offsets int64 (n,), caplen int64 (n,))``."""
        flen = self.frame_bytes(packets)
        caplen = flen if snaplen is None else np.minimum(flen, snaplen)
        offsets = np.concatenate([[0], np.cumsum(caplen)[:-1]]).astype(np.int64) if len(caplen) else caplen
        buf = np.zeros(int(caplen.sum()), dtype=np.uint8)
        self.fill(packets, buf, offsets, caplen)
        return buf, offsets, caplen

    def frames(self, packets: np.ndarray, snaplen: int | None = None) -> list[bytes]:
        """Every frame as ``bytes`` (tests and small jobs; the writer uses :meth:`fill`)."""
        buf, offsets, caplen = self.build(packets, snaplen)
        return [buf[o:o + c].tobytes() for o, c in zip(offsets.tolist(), caplen.tolist())]

    # ------------------------------------------------------------------ building
    def _layout(self, opcode: int) -> Layout:
        lay = self._layouts.get(opcode)
        if lay is None:
            lay = self._layouts[opcode] = Layout(self.ctx, opcode)
        return lay

    def _fill_chunk(self, p: np.ndarray, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray,
                    skip: np.ndarray | None, lines_done: bool = False) -> None:
        if not lines_done and skip is None:
            rest = self._fill_direct(p, out, offsets, caplen)
            if rest is None:
                return
            p, offsets, caplen = rest
        if not lines_done and p["line_protocol"].any():
            self._fill_lines(p, out, offsets, caplen, skip)
            return
        op = p["opcode"]
        counts = np.bincount(op, minlength=256)
        codes = np.flatnonzero(counts).tolist()
        if len(codes) > 1:              # group rows by opcode: one row gather, then contiguous slices
            order = np.argsort(op, kind="stable")
            p = np.ascontiguousarray(p).view(f"V{PACKET_DTYPE.itemsize}").take(order).view(PACKET_DTYPE)
            offsets, caplen = offsets[order], caplen[order]
            skip = None if skip is None else skip[order]
        r0 = 0
        for code in codes:
            r1 = r0 + int(counts[code])
            off, cap = offsets[r0:r1], caplen[r0:r1]
            if code == OPCODE_PFC:
                fill_pfc_rows(self.ctx, p[r0:r1], out, off, cap)
                r0 = r1
                continue
            lay = self._layout(code)
            if self._store_direct(lay, p[r0:r1], out, off, cap, None if skip is None else skip[r0:r1]):
                r0 = r1
                continue
            hdr, tail, pay = self._build_group(lay, p[r0:r1], cap)
            hb = lay.header_bytes
            copy_pieces(out, off, np.minimum(cap, hb), None, None, hdr)                   # headers
            sk = 0 if skip is None else skip[r0:r1]                # payload bytes left to a gather
            if lay.payload:
                copy_pieces(out, off + hb, np.clip(cap - hb, 0, pay) - sk, self._pattern,
                             None if skip is None else sk)                               # payload
            if tail is not None:
                copy_pieces(out, off + hb + pay - sk, np.maximum(cap - hb - pay, 0), None, None,
                             tail)                                                       # pad, CRCs
            r0 = r1

    def _fill_direct(self, p: np.ndarray, out: np.ndarray, offsets: np.ndarray,
                     caplen: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Build the rows cut before their pad and CRCs by the compiled loop
        (:mod:`tokenpcap.wire.direct`); returns the other rows ``(p, offsets, caplen)``, or None
        when every row was built."""
        d = self._direct
        for code in np.flatnonzero(np.bincount(p["opcode"], minlength=256)).tolist():
            if code != OPCODE_PFC and d.hb[code] < 0:
                d.add(self._layout(code))
        ok = d.eligible(p, caplen)
        p = np.ascontiguousarray(p)
        if ok.all():
            d.fill(p, np.arange(len(p), dtype=np.int64), out, offsets, caplen)
            return None
        rows = np.flatnonzero(ok)
        if rows.size:
            d.fill(p, rows, out, offsets, caplen)
        rest = np.flatnonzero(~ok)
        return take_rows(p, rest), offsets[rest], caplen[rest]

    def _fill_lines(self, p: np.ndarray, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray,
                    skip: np.ndarray | None) -> None:
        """Rows whose payload is NCCL lines: each (protocol, flag) by a view of this builder
        whose pattern and payload tables are those lines' (:class:`LinePatterns`)."""
        key = (p["line_protocol"].astype(np.uint64) << np.uint64(32)) | p["line_flag"].astype(np.uint64)
        key[p["line_protocol"] == 0] = 0
        uk, inv = np.unique(key, return_inverse=True)
        inv = inv.reshape(-1)
        for i, k in enumerate(uk.tolist()):
            rows = np.flatnonzero(inv == i)
            sub = np.ascontiguousarray(p[rows])
            sk = None if skip is None else skip[rows]
            b = self if k == 0 else self._lines_view(k >> 32, k & 0xFFFFFFFF)
            b._fill_chunk(sub, out, offsets[rows], caplen[rows], sk, lines_done=True)

    def _lines_view(self, code: int, flag: int) -> "FrameBuilder":
        if self._lines is None:
            regs = [(CRC32, 0)] + ([(CRC16_VCRC, 4)] if self.ctx.transport == "infiniband" else [])
            self._lines = LinePatterns(self._pattern, regs)
        pat, regs, sums = self._lines.get(code, flag)
        view = copy.copy(self)
        view._pattern, view._pay32, view._paysum, view._const_words = pat, regs[0], sums, {}
        if self.ctx.transport == "infiniband":
            view._pay16 = regs[1]
        return view

    def _store_direct(self, lay: Layout, ps: np.ndarray, out: np.ndarray, off: np.ndarray,
                      cap: np.ndarray, skip: np.ndarray | None) -> bool:
        """Headers-only fast path: when every frame of the group is cut at the same length, before
        any pad or CRC byte (and, over IPv6, before the UDP checksum), the kept bytes are the header
        words with the kept payload bytes (the pattern's, constants) ORed in as constant words: at
        8-byte-aligned offsets and a multiple of 8 they are stored as big-endian words straight
        into ``out``, else as rows of one array copied by one row copy. No CRC is computed.
        Returns False when it does not apply."""
        c = int(cap[0])
        if c == 0 or c > lay.header_bytes + int(ps["payload_bytes"].min()) \
                or int(cap.min()) != c or int(cap.max()) != c or (skip is not None and skip.any()) \
                or (lay.roce and self.ctx.ip_version == 6 and self.ctx.ipv6_udp_checksum
                    and c > lay.l4 + 6):
            return False
        key = (lay.opcode, c)
        const = self._const_words.get(key)
        if const is None:         # the pattern bytes kept after the header, as big-endian words
            b = np.zeros(-(-c // 8) * 8, np.uint8)
            if c > lay.header_bytes:
                b[lay.header_bytes:c] = self._pattern[:c - lay.header_bytes]
            const = self._const_words[key] = b.view(">u8").astype(np.uint64).tolist()
        words = self._header_words(lay, ps, direct=True)[1]
        nw = words.shape[0]
        if c % 8 == 0 and aligned(out, off):
            store_words(out, off, [(words[j] | np.uint64(v) if v else words[j]) if j < nw else v
                                   for j, v in enumerate(const)])
            return True
        rows = np.empty((len(ps), len(const)), ">u8")     # big-endian word rows, cut at c below
        kept = min(nw, len(const))
        rows[:, :kept] = words[:kept].T
        rows[:, kept:] = np.array(const[kept:], dtype=np.uint64)
        for j, v in enumerate(const[:kept]):
            if v:
                rows[:, j] |= np.uint64(v)
        copy_pieces(out, off, cap, None, None, rows.view(np.uint8))
        return True
