"""Vectorized frame building: a batch of ``PACKET_DTYPE`` rows → frame bytes in the caller's buffer.

No Python loop per packet. For each chunk of the batch:

1. rows are grouped by opcode (a stable radix sort); each group has a :class:`~tokenpcap.wire.layout.Layout`;
2. a group's headers are built as big-endian 64-bit words: template constants OR each varying
   field shifted to where the declaration puts it (:meth:`Layout.header_words`); IPv4 header
   checksums are the template's sum plus the varying words (RFC 1071 is linear too);
3. the ICRC (and VCRC) of every packet comes from the template's CRC register XOR per-byte
   contribution tables of the varying bytes, shifted over the payload (CRC linearity,
   :mod:`tokenpcap.wire.linear`); the payload is the context's fixed pattern, so its contribution
   is a table indexed by payload length; the IPv6 UDP checksum is summed the same way;
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
from tokenpcap.wire import headers as H
from tokenpcap.wire.context import PAYLOAD_PATTERN_BYTES, WireContext
from tokenpcap.wire.direct import DirectTables
from tokenpcap.wire.ecn import check_ce, ipv4_checksum_delta
from tokenpcap.wire.heap import keep_heap
from tokenpcap.wire.layout import Layout
from tokenpcap.wire.lines import LinePatterns
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.pfc import PFC_FRAME_BYTES, check_pfc_rows, fill_pfc_rows
from tokenpcap.wire.placement import aligned, copy_pieces, or_field16, store_words, xor_contributions
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES, EXT_BYTES, HAS_PAYLOAD, frame_bytes, header_bytes

__all__ = ["FrameBuilder"]

_MAX_ROWS = 16384          # rows per chunk: flat memory, per-row arrays stay in the L2/L3 caches


def _fold16(s: np.ndarray) -> np.ndarray:
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (s & 0xFFFF) + (s >> 16)


class FrameBuilder:
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
        self._check_buffer(packets, out, offsets, caplen if skip is None else caplen - skip)
        n = len(packets)
        if n == 0:
            return
        step = _MAX_ROWS
        for a in range(0, n, step):
            p, cap = packets[a:a + step], caplen[a:a + step]
            sk = None if skip is None else skip[a:a + step]
            self._check_rows(p, cap, a, sk)          # per chunk: the rows are still in the cache
            self._fill_chunk(p, out, offsets[a:a + step], cap, sk)

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

    # ------------------------------------------------------------------ checks
    @staticmethod
    def _bad(mask: np.ndarray, first: int, field: str, values: np.ndarray, expected: str) -> None:
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            raise EncodeError(f"packets[{first + i}].{field}: got {values[i]}, expected {expected}")

    def _check_buffer(self, p: np.ndarray, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
        """Types and shapes; every range inside ``out`` and no two ranges overlapping."""
        if not isinstance(p, np.ndarray) or p.dtype != PACKET_DTYPE:
            raise EncodeError(f"packets: got {getattr(p, 'dtype', type(p))}, expected a PACKET_DTYPE array")
        if out.dtype != np.uint8 or out.ndim != 1 or out.strides != (1,):
            raise EncodeError(f"out: got {out.dtype} {out.shape} strides {out.strides}, expected uint8 (m,) with unit stride")
        n = len(p)
        if offsets.shape != (n,) or caplen.shape != (n,):
            raise EncodeError(f"offsets/caplen: got shapes {offsets.shape}/{caplen.shape}, expected ({n},)")
        if n == 0:
            return
        bad = self._bad
        if caplen.min() < 0:
            bad(caplen < 0, 0, "caplen", caplen, "0..frame_bytes of the packet")
        ends = offsets + caplen
        if offsets.min() < 0 or ends.max() > out.size:
            bad((offsets < 0) | (ends > out.size), 0, "offset", offsets, f"a range inside out (size {out.size})")
        if n > 1 and not (offsets[1:] >= ends[:-1]).all():
            order = np.argsort(offsets, kind="stable")
            overlap = np.zeros(n, bool)
            overlap[order[1:]] = (offsets[order[1:]] < np.maximum.accumulate(ends[order])[:-1]) \
                & (caplen[order[1:]] > 0)
            bad(overlap, 0, "offset", offsets, "a range that does not overlap another frame's")

    def _check_rows(self, p: np.ndarray, caplen: np.ndarray, first: int, skip: np.ndarray | None) -> None:
        """Every field within its width, known opcodes, PadCnt, NIC indices, caplen <= frame length,
        0 <= skip <= kept payload."""
        bad = self._bad
        op = p["opcode"]
        pay = p["payload_bytes"]
        pfc = op == OPCODE_PFC
        ext = EXT_BYTES[op]
        if ext.min() < 0:
            bad((ext < 0) & ~pfc, first, "opcode", op,
                "a known BTH opcode (tokenpcap.wire.rdma.OPCODES) or OPCODE_PFC")
        any_pfc = bool(pfc.any())
        if any_pfc:
            check_pfc_rows(self.ctx, p, pfc, first)
        pay64 = pay.astype(np.int64)
        pad = (-pay64) & 3                      # BTH PadCnt, and the pad bytes of the frame
        if pay64.max() > PAYLOAD_PATTERN_BYTES or ((pay64 > 0) & ~HAS_PAYLOAD[op]).any() \
                or (p["pad"] != pad).any():
            bad(pay64 > PAYLOAD_PATTERN_BYTES, first, "payload_bytes", pay, f"0..{PAYLOAD_PATTERN_BYTES}")
            bad((pay64 > 0) & ~HAS_PAYLOAD[op], first, "payload_bytes", pay, "0 for an opcode without payload")
            bad(p["pad"] != pad, first, "pad", p["pad"], "(-payload_bytes) & 3 (BTH.PadCnt)")
        if ((p["psn"] | p["dest_qp"] | p["src_qp"]) >> 24).any() or ((p["ack_req"] | p["solicited"] | p["becn"]) > 1).any():
            for f, bits, hdr in (("psn", 24, "BTH.PSN"), ("dest_qp", 24, "BTH.DestQP"), ("src_qp", 24, "QPN"),
                                 ("ack_req", 1, "BTH.AckReq"), ("solicited", 1, "BTH.SE"), ("becn", 1, "BTH.BECN")):
                bad(p[f] >= (1 << bits), first, f, p[f], f"0..{(1 << bits) - 1} ({hdr}, {bits} bits)")
        check_ce(self.ctx, p["ce"], first)
        nn = self.ctx.n_nics
        for f in ("nic", "peer_nic"):
            if p[f].view(np.uint32).max() >= nn:          # a negative index reads as >= 2**31
                out_of = (p[f] < 0) | (p[f] >= nn)
                bad(out_of & ~pfc, first, f, p[f], f"0..{nn - 1} (rows of the WireContext address arrays)")
        hb = self._hb[op]                       # rdma.frame_bytes, from the per-opcode table
        flen = hb + pay64 + pad + H.ICRC.size
        flen = flen + H.VCRC.size if self.ctx.transport == "infiniband" else np.maximum(flen, ETH_MIN_FRAME_BYTES)
        if any_pfc:
            flen = np.where(pfc, PFC_FRAME_BYTES, flen)
        if (caplen > flen).any():
            bad(caplen > flen, first, "caplen", caplen, "0..frame_bytes of the packet")
        if skip is not None:
            kept = np.clip(caplen - hb, 0, pay64)
            bad((skip < 0) | (skip > kept), first, "skip", skip, "0..the payload bytes caplen keeps")

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

    def _header_words(self, lay: Layout, ps: np.ndarray, direct: bool = False):
        """Header rows and words of a group, IPv4 checksum included (into the words when
        ``direct``, else into the rows): ``(hdr uint8 (k, H), words uint64 (n_words, k),
        pay int64 (k,), d)``; ``d`` holds the derived per-packet values and NIC indices."""
        ctx = self.ctx
        pay = ps["payload_bytes"].astype(np.int64)
        pad = (-pay) & 3
        lp = pay + pad
        d = {"pad": pad}
        for key, (add, shift) in lay.derived_terms().items():
            d[key] = (lp + add) >> shift
        nic = {"nic": ps["nic"], "peer_nic": ps["peer_nic"]}
        d["nic_rows"], d["lp"] = nic, lp
        hdr, words = lay.header_words(ps, d, nic, rows=not direct)
        if lay.roce and ctx.ip_version == 4:        # RFC 1071 sum: template + varying words
            total = lay.ip4_const + d["udp_len"] + H.IPV4.size + ps["ip_id"] \
                + lay.ip4_nic_sum[nic["nic"]] + lay.ip4_nic_sum[nic["peer_nic"]] \
                + ipv4_checksum_delta(ctx, ps["ce"])
            csum = ~_fold16(total) & 0xFFFF
            if direct:
                or_field16(words, lay.l3 + H.IPV4.slot("HeaderChecksum").first_byte, csum)
            else:
                H.IPV4.put(hdr, lay.l3, "HeaderChecksum", csum)
        return hdr, words, pay, d

    def _build_group(self, lay: Layout, ps: np.ndarray, caplen: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Headers and the bytes after the payload of a group of one opcode.

        Returns:
            headers uint8 ``(k, H)`` (rows of a C-contiguous array); the bytes after the payload,
            uint8 ``(k, 16)`` C-contiguous (pad zeros, ICRC LE, then VCRC LE or Ethernet zero
            padding), or None when ``caplen`` keeps none of them; int64 ``(k,)`` payload bytes.
        """
        ctx = self.ctx
        k, hb = len(ps), lay.header_bytes
        hdr, words, pay, d = self._header_words(lay, ps)
        nic, lp, pad = d["nic_rows"], d["lp"], d["pad"]
        # The CRCs are needed when a kept byte shows them: the ICRC/VCRC themselves, or the IPv6
        # UDP checksum that covers the ICRC. A snaplen that cuts every frame before them skips them.
        udp6 = lay.roce and ctx.ip_version == 6 and ctx.ipv6_udp_checksum
        need_crc = bool((caplen > hb + pay).any()) or (udp6 and bool((caplen > lay.l4 + 6).any()))
        if not need_crc:
            return hdr, None, pay
        icrc, after = self._crcs(lay, ps, hdr, words, pay, lp, d, nic, udp6)
        # after the payload: pad zeros, ICRC (LE), then VCRC (LE) or Ethernet zero padding, as
        # two little-endian words per row: bytes 0..7, and byte 8 (the VCRC's high byte, pad 3)
        shift = (pad * 8).astype(np.uint64)
        tail = np.zeros((k, 2), "<u8")
        tail[:, 0] = (icrc.astype(np.uint64) << shift) | (after.astype(np.uint64) << (shift + np.uint64(32)))
        if (pad == 3).any():
            tail[:, 1] = np.where(pad == 3, after >> 8, 0)
        return hdr, tail.view(np.uint8), pay

    def _crcs(self, lay: Layout, ps: np.ndarray, hdr: np.ndarray, words: np.ndarray, pay: np.ndarray,
              lp: np.ndarray, d: dict, nic: dict, udp6: bool) -> tuple[np.ndarray, np.ndarray]:
        """ICRC and VCRC (or the IPv6 UDP checksum, written into ``hdr``) of a group by CRC linearity.

        Returns:
            ICRC uint32 ``(k,)`` (the value whose little-endian bytes follow the pad) and the
            16-bit value after it, int64 ``(k,)``: VCRC, or 0 (Ethernet zero padding).
        """
        k = len(ps)
        # ICRC by linearity
        reg = xor_contributions(self._c32, words, lay.icrc_cols, lay.icrc_or, lay.icrc_idx, lay.icrc_base)
        for nw, tab in zip(lay.nic_writes, lay.icrc_nic):
            if tab is not None:
                reg ^= tab[nic[nw.key]]
        icrc = CRC32.shift(reg.astype(np.uint32), lp) ^ self._pay32[pay] ^ np.uint32(0xFFFFFFFF)
        icrc_b = icrc.astype("<u4").view(np.uint8).reshape(k, 4)
        after = np.zeros(k, dtype=np.int64)          # VCRC, or Ethernet zero padding

        if not lay.roce:                                  # VCRC over LRH..ICRC
            r16 = xor_contributions(self._c16, words, lay.vcrc_cols, None, lay.vcrc_idx, lay.vcrc_base)
            for nw, tab in zip(lay.nic_writes, lay.vcrc_nic):
                if tab is not None:
                    r16 ^= tab[nic[nw.key]]
            r16 = CRC16_VCRC.shift(r16.astype(np.uint32), lp + H.ICRC.size) ^ self._pay16[pay]
            for i in range(4):
                r16 ^= self._c16_icrc[i][icrc_b[:, i]]
            after = (r16 ^ 0xFFFF).astype(np.int64)
        elif udp6:   # RFC 8200 8.1
            ic = icrc_b.astype(np.int64)      # addresses, UDP header (checksum 0), BTH, ext + the rest
            total = lay.word_sum16(words, lay.l3 + 8) + d["udp_len"] + H.IP_PROTO_UDP \
                + self._paysum[pay] + ((ic[:, 0] << 8) | ic[:, 1]) + ((ic[:, 2] << 8) | ic[:, 3])
            csum = ~_fold16(total) & 0xFFFF
            H.UDP.put(hdr, lay.l4, "Checksum", np.where(csum == 0, 0xFFFF, csum))

        return icrc, after
