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
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import headers as H
from tokenpcap.wire.ecn import ipv4_checksum_delta
from tokenpcap.wire.headcache import (OUTSIDE_HEADER_FIELDS, PER_PACKET_FIELDS, HeaderCache,
                                      row_key, same_key, slot_of)
from tokenpcap.wire.layout import LP_DERIVED, Layout
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.lines import LINE_FORMATS, encode_lines
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES

__all__ = ["DirectTables", "fill_rows", "CRC_PAYLOAD_MAX_BYTES"]

# source kinds of a field part (column 0 of DirectTables.ent)
_FIELD, _LP, _PAD, _FLOW = 0, 1, 2, 3
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
        fill_rows(rec, rows, out, offsets, caplen, self.offsets, self.hb, self.nw, self.const,
                  self.ent, self.ent_lo, self.ent_hi, self.nic_ent, self.nic_tab, self.nic_lo,
                  self.nic_hi, self.ce_word, self.ce_bits, self.ip4_col, self.ip4_base,
                  self.udp_add, self.ip4_nic_sum, self.ce_delta, pats, pidx, self.scratch,
                  self.scratch.view(np.uint8), self.frame, self.crc_start, self.ormask,
                  self.crc_reg0, _T32, self.ib, _T16, self.min_frame, self.ent_mid,
                  self.cacheable, *self._cache_args())

    def _cache_args(self) -> tuple:
        c = self.cache
        return c.op, c.key, c.words, c.sum, c.at, c.mask, c.row

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


@intrinsic
def _load_u64(typingctx, arr, at):
    """The 8 bytes of the uint8 array ``arr`` (any dimensions, C-contiguous) from flat byte
    ``at`` on, as a little-endian uint64 (an unaligned load)."""
    sig = types.uint64(arr, at)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(a.data, [args[1]])
        ptr = builder.bitcast(ptr, ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)
    return sig, codegen


@intrinsic
def _copy(typingctx, dst, dst_at, src, src_at, n):
    """``dst.flat[dst_at:dst_at + n] = src.flat[src_at:src_at + n]`` (uint8 arrays, C-contiguous,
    not overlapping): one memcpy."""
    sig = types.void(dst, dst_at, src, src_at, n)

    def codegen(context, builder, signature, args):
        d = context.make_array(signature.args[0])(context, builder, args[0])
        s = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(d.data, [args[1]]),
                           builder.gep(s.data, [args[3]]), args[4], 1)
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, _nrt=False)
def _read_le(rec, r, at, nbytes):
    v = _load_u64(rec, r * rec.shape[1] + at)
    return v if nbytes == 8 else v & ((np.uint64(1) << np.uint64(8 * nbytes)) - np.uint64(1))


@njit(cache=True, _nrt=False)
def fill_rows(rec, rows, out, offsets, caplen, fo, hb_t, nw_t, const, ent, ent_lo, ent_hi,
              nic_ent, nic_tab, nic_lo, nic_hi, ce_word, ce_bits, ip4_col, ip4_base, udp_add,
              ip4_nic_sum, ce_delta, pats, pidx, w, wb, f, crc_start, ormask, reg0, t32, ib, t16,
              min_frame, ent_mid, cached, c_op, c_key, c_words, c_sum, k_at, k_mask, key):
    """Build the kept bytes of rows ``rows`` of ``rec`` (uint8 ``(n, PACKET_DTYPE.itemsize)``)
    into ``out`` at ``offsets``, ``caplen`` bytes each, from :class:`DirectTables`' tables
    (``fo``: byte offsets of opcode, payload_bytes, nic, peer_nic, ce, ip_id, src_qp, dest_qp
    in a row; ``pats``, ``pidx``: the payloads, :meth:`DirectTables._payloads`; ``w``: uint64
    scratch words, ``wb`` the same memory as uint8). A row whose kept
    bytes reach its pad and CRCs is laid out whole in ``f`` (uint8 scratch) first: the ICRC is
    CRC-32 (``t32``, from register ``reg0`` after the ICRC's prefix) over bytes ``crc_start..``
    with ``ormask`` (indexed by frame byte) ORed in (IBTA vol. 1 7.8.1, RoCEv2 Annex A17.4.1.3), then (``ib``) the VCRC,
    CRC-16 (``t16``) over everything before it (7.8.2), else Ethernet zero padding up to
    ``min_frame`` bytes. With ``cached``, a row whose key equals its slot's in the
    :class:`~tokenpcap.wire.headcache.HeaderCache` (``c_*``, ``k_at``, ``k_mask``, ``key`` its
    arrays) takes the slot's header words and checksum sum and has only its per-packet parts
    (entries ``ent_mid[op]..ent_hi[op]``) written; others are assembled whole and take the
    slot. The caller checked every row (field widths, NIC indices, eligibility)."""
    m8 = np.uint64(0xFF)
    for t in range(rows.size):
        r = rows[t]
        op = rec[r, fo[0]]
        nw = nw_t[op]
        pay = _read_le(rec, r, fo[1], 4)
        lp = (pay + np.uint64(3)) & ~np.uint64(3)
        nic = np.int64(np.int32(_read_le(rec, r, fo[2], 4)))
        peer = np.int64(np.int32(_read_le(rec, r, fo[3], 4)))
        ce = rec[r, fo[4]] != 0
        col = ip4_col[op]
        slot = -1
        if cached:
            row_key(rec, r, k_at, k_mask, key)
            slot = slot_of(key)
        if slot >= 0 and c_op[slot] == op and same_key(c_key, slot, key):
            for j in range(nw):
                w[j] = c_words[slot, j]
            s0 = c_sum[slot]
        else:
            for j in range(nw):
                w[j] = const[op, j]
            for e in range(ent_lo[op], ent_mid[op]):
                _entry(w, rec, r, ent, e, pay, lp, fo)
            for q in range(nic_lo[op], nic_hi[op]):
                w[nic_ent[q, 1]] |= nic_tab[q, nic if nic_ent[q, 0] == 0 else peer]
            if ce and ce_word[op] >= 0:
                w[ce_word[op]] |= ce_bits[op]
            s0 = 0      # RFC 1071: template sum + varying words but the IP ID
            if col >= 0:
                s0 = ip4_base[op] + np.int64(lp) + udp_add[op] + ip4_nic_sum[nic] \
                    + ip4_nic_sum[peer] + (ce_delta if ce else 0)
            if slot >= 0:
                c_op[slot] = op
                c_sum[slot] = s0
                for j in range(nw):
                    c_words[slot, j] = w[j]
                for i in range(key.size):
                    c_key[slot, i] = key[i]
        for e in range(ent_mid[op], ent_hi[op]):
            _entry(w, rec, r, ent, e, pay, lp, fo)
        if col >= 0:                    # RFC 1071: the sum with the IP ID, folded
            s = s0 + np.int64(_read_le(rec, r, fo[5], 2))
            for _ in range(3):
                s = (s & 0xFFFF) + (s >> 16)
            csum = np.uint64(~s & 0xFFFF)
            j, b = col // 8, col % 8
            if b <= 6:
                w[j] |= csum << np.uint64(8 * (6 - b))
            else:
                w[j] |= csum >> np.uint64(8)
                w[j + 1] |= (csum & m8) << np.uint64(56)
        for j in range(nw):             # big-endian: byte-swapped into the scratch's bytes
            x = w[j]
            x = ((x & np.uint64(0x00FF00FF00FF00FF)) << np.uint64(8)) \
                | ((x >> np.uint64(8)) & np.uint64(0x00FF00FF00FF00FF))
            x = ((x & np.uint64(0x0000FFFF0000FFFF)) << np.uint64(16)) \
                | ((x >> np.uint64(16)) & np.uint64(0x0000FFFF0000FFFF))
            w[j] = (x << np.uint64(32)) | (x >> np.uint64(32))
        o, c, hb = offsets[r], caplen[r], hb_t[op]
        at = (pidx[r] if pidx.size else 0) * pats.shape[1]      # the row's payload in pats
        if c > hb + np.int64(pay):
            _whole_frame(f, wb, hb, pats, at, np.int64(pay), np.int64(lp), crc_start, ormask,
                         reg0, t32, ib, t16, min_frame)
            _copy(out, o, f, 0, c)
            continue
        if c > 0:
            _copy(out, o, wb, 0, min(c, hb))
        if c > hb:
            _copy(out, o + hb, pats, at, c - hb)


@njit(cache=True, _nrt=False)
def _entry(w, rec, r, ent, e, pay, lp, fo):
    """Write field part ``ent[e]`` of row ``r`` into the header words ``w`` (see
    :func:`fill_rows`)."""
    kind = np.int64(ent[e, 0])
    if kind == _FIELD:
        v = _read_le(rec, r, np.int64(ent[e, 1]), np.int64(ent[e, 2]))
    elif kind == _LP:
        v = (lp + ent[e, 1]) >> ent[e, 2]
    elif kind == _PAD:
        v = lp - pay
    else:                       # rdma.rocev2_flow_label of (src_qp, dest_qp)
        v = _read_le(rec, r, fo[6], 4) * _read_le(rec, r, fo[7], 4)
        v ^= v >> np.uint64(20)
        v ^= v >> np.uint64(40)
        v &= np.uint64(0xFFFFF)
    if ent[e, 4]:
        v >>= ent[e, 4]
    if ent[e, 5]:
        v &= ent[e, 5]
    v += ent[e, 3]
    w[ent[e, 6]] |= ((v >> ent[e, 7]) & ent[e, 8]) << ent[e, 9]


@njit(cache=True, _nrt=False)
def _whole_frame(f, wb, hb, pats, at, pay, lp, crc_start, ormask, reg0, t32, ib, t16, min_frame):
    """Lay a frame out in ``f``: header ``wb[:hb]``, payload (``pats``' flat bytes from ``at``),
    pad, ICRC, VCRC or zero padding (see :func:`fill_rows`)."""
    _copy(f, 0, wb, 0, hb)
    _copy(f, hb, pats, at, pay)
    for k in range(hb + pay, hb + lp):
        f[k] = 0
    m8 = np.uint64(0xFF)
    crc = reg0
    split = min(ormask.size, hb + lp)
    for k in range(crc_start, split):
        crc = np.uint64(t32[(crc ^ np.uint64(f[k] | ormask[k])) & m8]) ^ (crc >> np.uint64(8))
    for k in range(split, hb + lp):
        crc = np.uint64(t32[(crc ^ np.uint64(f[k])) & m8]) ^ (crc >> np.uint64(8))
    crc ^= np.uint64(0xFFFFFFFF)
    end = hb + lp
    for i in range(4):
        f[end + i] = (crc >> np.uint64(8 * i)) & m8
    end += 4
    if ib:
        v = np.uint64(0xFFFF)
        for k in range(end):
            v = np.uint64(t16[(v ^ np.uint64(f[k])) & m8]) ^ (v >> np.uint64(8))
        v ^= np.uint64(0xFFFF)
        f[end], f[end + 1] = v & m8, v >> np.uint64(8)
        end += 2
    for k in range(end, min_frame):
        f[k] = 0
