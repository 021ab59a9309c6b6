"""Headers-only frames by one compiled loop over the rows: the builder's fast path for captures
cut before the pad and CRCs (``--snaplen 64``/``74``).

A frame whose kept bytes end before its pad, ICRC and VCRC (and, over IPv6 with the UDP
checksum, before that checksum, which covers the ICRC) needs no CRC: its bytes are the header
(template constants, the varying fields, the NICs' addresses, the IPv4 header checksum) followed
by the first payload bytes: the context's pattern, or for NCCL LL/LL128 rows that pattern in
lines with the row's flag (:mod:`tokenpcap.wire.lines`). A frame with a short payload (ACKs,
CNPs, short last packets) is built whole, its ICRC and VCRC computed byte by byte (IBTA vol. 1
7.8.1-7.8.2). :class:`DirectTables` turns the
:class:`~tokenpcap.wire.layout.Layout` of every opcode met into integer tables (the layout's own
word plan: where each field's bits land in the header's big-endian 64-bit words, where each
value comes from, the per-NIC address words), and :func:`fill_rows` builds every such row of a
batch in one pass, whatever its opcode, straight into the writer's buffer: no grouping by
opcode, no per-field numpy pass. The bytes equal :func:`tokenpcap.wire.frame.build_frame`'s
(tested against it, and against the vectorized path, with Hypothesis).

The IPv4 header checksum is RFC 1071's: the template's sum plus the varying 16-bit words, folded
(the same sum :meth:`tokenpcap.wire.group.GroupBuild._header_words` takes); a CE mark adds ``3 - ECT`` to it
(RFC 1624, :func:`tokenpcap.wire.ecn.ipv4_checksum_delta`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import headers as H
from tokenpcap.wire.directrow import FIELD as _FIELD
from tokenpcap.wire.directrow import FLOW as _FLOW
from tokenpcap.wire.directrow import LP as _LP
from tokenpcap.wire.directrow import PAD as _PAD
from tokenpcap.wire.directrow import build_row
from tokenpcap.wire.ecn import ipv4_checksum_delta
from tokenpcap.wire.headcache import (
    OUTSIDE_HEADER_FIELDS,
    PER_PACKET_FIELDS,
    HeaderCache,
)
from tokenpcap.wire.layout import LP_DERIVED, Layout
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.lines import LINE_FORMATS, encode_lines
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES

__all__ = ["CRC_PAYLOAD_MAX_BYTES", "DirectTables", "fill_rows"]

_N_OPCODES = 256
#: Rows whose kept bytes reach their pad and CRCs are built here when their payload is at most
#: this (the CRCs byte by byte over the whole frame: a few hundred ns at most); the vectorized
#: path, CRCs by linearity, takes longer payloads.
CRC_PAYLOAD_MAX_BYTES = 256


_T32 = CRC32.table.astype(np.uint32)
_NO_INDEX = np.zeros(0, np.int64)       # pidx of a batch whose payloads are all the pattern
_T16 = CRC16_VCRC.table.astype(np.uint32)


def _offset(name: str) -> int:
    return int(PACKET_DTYPE.fields[name][1])


class DirectTables:
    """The tables :func:`fill_rows` reads, for the opcodes added so far.

    Args:
        ctx: the builder's :class:`~tokenpcap.wire.context.WireContext`.
        pattern: uint8 ``(m,)``, the payload bytes (payload byte j = element j).

    Attributes (all indexed by opcode where ``(256,)``): ``hb`` int64 header bytes (-1: not
    added), ``nw`` words per header, ``const`` uint64 ``(256, W)`` template words,
    ``ent`` uint64 ``(e, 10)`` field parts (kind, a, b, add, rshift, mask, word, part rshift,
    part mask, part lshift) with ``ent_lo``/``ent_hi`` their range per opcode, ``nic_ent`` int64
    ``(q, 2)`` (0 = ``nic`` / 1 = ``peer_nic``, word) and ``nic_tab`` uint64 ``(q, n_nics)``
    per-NIC address words with ``nic_lo``/``nic_hi``, ``ce_word`` int64 (-1: none) and
    ``ce_bits`` uint64, ``ip4_col`` int64 (-1: no IPv4 header, else the checksum's first byte),
    ``ip4_base`` int64 (the template's RFC 1071 sum plus the IPv4 header size) and ``udp_add``
    (the UDP length is ``lp + udp_add``).
    """

    def __init__(self, ctx, pattern: np.ndarray):
        self.ctx = ctx
        self.pattern = np.ascontiguousarray(pattern, dtype=np.uint8)
        self.l4_checksum_end = -1      # IPv6 with the UDP checksum: a row must end before it
        self.hb = np.full(_N_OPCODES, -1, np.int64)
        self._layouts: dict[int, Layout] = {}
        roce4 = ctx.transport == "rocev2" and ctx.ip_version == 4
        a = ctx.ipv4.astype(np.int64) if roce4 else np.zeros((ctx.n_nics, 4), np.int64)
        self.ip4_nic_sum = ((a[:, 0] << 8) | a[:, 1]) + ((a[:, 2] << 8) | a[:, 3])
        self.ce_delta = int(ipv4_checksum_delta(ctx, np.ones(1, np.uint8))[0]) if roce4 else 0
        self.offsets = np.array([_offset(f) for f in (
            "opcode", "payload_bytes", "nic", "peer_nic", "ce", "ip_id", "src_qp", "dest_qp")],
            np.int64)

    def add(self, lay: Layout) -> None:
        """Make the tables of ``lay``'s opcode (once per opcode)."""
        if lay.opcode in self._layouts:
            return
        self._layouts[lay.opcode] = lay
        if lay.roce and self.ctx.ip_version == 6 and self.ctx.ipv6_udp_checksum:
            self.l4_checksum_end = lay.l4 + H.UDP.slot("Checksum").first_byte
        self._build()

    def _build(self) -> None:
        lays = sorted(self._layouts.values(), key=lambda x: x.opcode)
        width = max(x.n_words for x in lays)
        n = _N_OPCODES
        self.nw = np.zeros(n, np.int64)
        self.const = np.zeros((n, width), np.uint64)
        self.ent_lo, self.ent_hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.ent_mid = np.zeros(n, np.int64)
        per_packet = {_offset(f) for f in PER_PACKET_FIELDS}
        outside = {_offset(f) for f in OUTSIDE_HEADER_FIELDS}
        self.cacheable = True
        self.nic_lo, self.nic_hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.ce_word, self.ce_bits = np.full(n, -1, np.int64), np.zeros(n, np.uint64)
        self.ip4_col, self.ip4_base = np.full(n, -1, np.int64), np.zeros(n, np.int64)
        self.udp_add = np.zeros(n, np.int64)
        ent, nic_ent, nic_tab = [], [], []
        for lay in lays:
            op = lay.opcode
            self.hb[op], self.nw[op] = lay.header_bytes, lay.n_words
            self.const[op, :lay.n_words] = lay.word_const
            terms = lay.derived_terms()
            self.ent_lo[op] = len(ent)
            mine = []
            for i, j, rshift, mask, lshift, _ in lay.word_plan:
                src = lay.writes[i].src
                if src.key in LP_DERIVED:
                    kind, a, b = _LP, *terms[src.key]
                elif src.key == "pad":
                    kind, a, b = _PAD, 0, 0
                elif src.key == "flow_label":
                    kind, a, b = _FLOW, 0, 0
                else:
                    kind, a, b = _FIELD, _offset(src.key), PACKET_DTYPE.fields[src.key][0].itemsize
                mine.append([kind, a, b, src.add, src.rshift, src.mask, j, rshift, int(mask), lshift])
            # the per-packet parts last (tokenpcap.wire.headcache): from ent_mid on
            per = [e[0] == _FIELD and e[1] in per_packet for e in mine]
            self.cacheable &= not any(e[0] == _FIELD and e[1] in outside for e in mine)
            ent += [e for e, x in zip(mine, per) if not x]
            self.ent_mid[op] = len(ent)
            ent += [e for e, x in zip(mine, per) if x]
            self.ent_hi[op] = len(ent)
            self.nic_lo[op] = len(nic_ent)
            for key, j, table in lay.word_nic:
                nic_ent.append([0 if key == "nic" else 1, j])
                nic_tab.append(table)
            self.nic_hi[op] = len(nic_ent)
            if lay.ce_word is not None:
                self.ce_word[op], self.ce_bits[op] = lay.ce_word[0], lay.ce_word[1]
            if lay.roce and self.ctx.ip_version == 4:
                self.ip4_col[op] = lay.l3 + H.IPV4.slot("HeaderChecksum").first_byte
                self.ip4_base[op] = lay.ip4_const + H.IPV4.size      # TotalLength = UDP length + 20
                self.udp_add[op] = terms["udp_len"][0]
        first = lays[0]
        self.crc_start, self.ib = first.crc_start, not first.roce
        self.ormask = np.ascontiguousarray(first.ormask[:first.bth + H.BTH.size])
        self.crc_reg0 = np.uint64(CRC32.register(first.prefix, CRC32.init))
        self.min_frame = 0 if self.ib else ETH_MIN_FRAME_BYTES
        self.frame = np.zeros(-(-(width * 8 + CRC_PAYLOAD_MAX_BYTES + 64) // 8) * 8, np.uint8)
        self.ent = np.array(ent, np.uint64).reshape(-1, 10)
        self.nic_ent = np.array(nic_ent, np.int64).reshape(-1, 2)
        self.nic_tab = np.array(nic_tab, np.uint64).reshape(len(nic_tab), -1) if nic_tab \
            else np.zeros((0, 1), np.uint64)
        self.scratch = np.zeros(width, np.uint64)
        self.cache = HeaderCache(width)

    def eligible(self, p: np.ndarray, caplen: np.ndarray) -> np.ndarray:
        """bool ``(n,)``: rows :func:`fill_rows` builds: those whose kept bytes end before the
        pad and CRCs or whose payload is at most :data:`CRC_PAYLOAD_MAX_BYTES` (ACKs, CNPs, short last packets: their CRCs are
        computed byte by byte), in either case before an IPv6 UDP checksum (it covers the ICRC);
        PFC rows and opcodes not added are never eligible."""
        hb = self.hb[p["opcode"]]
        pay = p["payload_bytes"]
        ok = (hb >= 0) & ((caplen <= hb + pay) | (pay <= CRC_PAYLOAD_MAX_BYTES))
        if self.l4_checksum_end >= 0:
            ok &= caplen <= self.l4_checksum_end
        return ok

    def fill(self, p: np.ndarray, rows: np.ndarray, out: np.ndarray, offsets: np.ndarray,
             caplen: np.ndarray) -> None:
        """Build rows ``rows`` (int64 ``(k,)`` indices into ``p``, each eligible) of ``p``
        (``PACKET_DTYPE`` ``(n,)``, C-contiguous) at ``out[offsets[i]:][:caplen[i]]``."""
        pats, pidx = self._payloads(p, rows, caplen)
        self._fill(p, rows, out, offsets, caplen, pats, pidx)

    def fill_pattern(self, p: np.ndarray, rows: np.ndarray, out: np.ndarray,
                     offsets: np.ndarray, caplen: np.ndarray) -> None:
        """:meth:`fill` of rows none of which carries NCCL lines (``line_protocol`` 0: every
        payload is the pattern), without looking for them."""
        self._fill(p, rows, out, offsets, caplen, self.pattern[None, :], _NO_INDEX)

    def _fill(self, p, rows, out, offsets, caplen, pats, pidx) -> None:
        rec = p.view(np.uint8).reshape(len(p), PACKET_DTYPE.itemsize)
        fill_rows(rec, rows, out, offsets, caplen, pats, pidx, *self.tables())

    @property
    def ready(self) -> bool:
        """Whether an opcode was added: the tables exist (:meth:`tables`)."""
        return bool(self._layouts)

    def tables(self) -> tuple[tuple, tuple, tuple]:
        """The tables :func:`~tokenpcap.wire.directrow.build_row` reads after a row's own
        arguments: ``(header, crc, cache)``, three tuples in the order it unpacks them."""
        c = self.cache
        return ((self.offsets, self.hb, self.nw, self.const, self.ent, self.ent_lo,
                 self.ent_mid, self.ent_hi, self.nic_ent, self.nic_tab, self.nic_lo,
                 self.nic_hi, self.ce_word, self.ce_bits, self.ip4_col, self.ip4_base,
                 self.udp_add, self.ip4_nic_sum, self.ce_delta),
                (self.scratch, self.scratch.view(np.uint8), self.frame, self.crc_start,
                 self.ormask, self.crc_reg0, _T32, self.ib, _T16, self.min_frame),
                (self.cacheable, c.op, c.key, c.words, c.sum, c.at, c.mask, c.row))

    def _payloads(self, p: np.ndarray, rows: np.ndarray, caplen: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """The payload bytes the rows keep: ``(pats uint8 (k, m), pidx int64 (n,) or (0,))``,
        row ``i``'s payload ``pats[pidx[i]]`` (``pidx`` empty: every row ``pats[0]``). Row 0 is
        the pattern; NCCL LL/LL128 rows (``line_protocol`` 1, 2) get the pattern in their
        lines with their flag (:func:`tokenpcap.wire.lines.encode_lines`), one row per
        distinct (protocol, flag), as long as the longest payload any row keeps."""
        code = p["line_protocol"][rows]
        lines = rows[code != 0]
        if lines.size == 0:
            return self.pattern[None, :], np.zeros(0, np.int64)
        pay = p["payload_bytes"][rows].astype(np.int64)
        keep = caplen[rows] - self.hb[p["opcode"][rows]]
        need = max(int(np.where(keep > pay, pay, np.maximum(keep, 0)).max()), 1)
        key = (p["line_protocol"][lines].astype(np.int64) << 32) | p["line_flag"][lines]
        uk, inv = np.unique(key, return_inverse=True)
        pats = np.empty((uk.size + 1, need), np.uint8)
        pats[0] = self.pattern[:need]
        for i, k in enumerate(uk.tolist()):
            size = LINE_FORMATS[k >> 32][0]
            pats[i + 1] = encode_lines(k >> 32, self.pattern, k & 0xFFFFFFFF, -(-need // size))[:need]
        pidx = np.zeros(len(p), np.int64)
        pidx[lines] = inv.reshape(-1) + 1
        return pats, pidx


@njit(cache=True, _nrt=False)
def fill_rows(rec, rows, out, offsets, caplen, pats, pidx, header, crc, cache):
    """Build the kept bytes of rows ``rows`` (int64 ``(k,)``) of ``rec`` (uint8 ``(n,
    PACKET_DTYPE.itemsize)``) into ``out`` at ``offsets``, ``caplen`` bytes each (int64
    ``(n,)``), row ``r``'s payload ``pats[pidx[r]]`` (``pidx`` empty: ``pats[0]``;
    :meth:`DirectTables._payloads`): :func:`~tokenpcap.wire.directrow.build_row` of each with
    the tables ``header``, ``crc``, ``cache`` (:meth:`DirectTables.tables`). The caller
    checked every row (field widths, NIC indices, eligibility)."""
    for t in range(rows.size):
        r = rows[t]
        at = (pidx[r] if pidx.size else 0) * pats.shape[1]      # the row's payload in pats
        build_row(rec, r, out, offsets[r], caplen[r], at, pats, header, crc, cache)
