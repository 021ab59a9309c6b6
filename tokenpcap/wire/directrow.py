"""One headers-only frame from one packet row, compiled: :func:`build_row`, the body of
:func:`tokenpcap.wire.direct.fill_rows` (a batch's rows into a frame buffer) and of the loops
that lay a file's records out around the frames (:mod:`tokenpcap.generate.inplace`). The
tables it reads are :class:`tokenpcap.wire.direct.DirectTables`' (:meth:`~DirectTables.
table_args`, in that order after the row's own arguments); the rules are the ones
:mod:`tokenpcap.wire.direct` describes.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tokenpcap.wire.headcache import row_key, same_key, slot_of

__all__ = ["FIELD", "FLOW", "LP", "PAD", "build_row"]

#: Source kinds of a field part (column 0 of :attr:`DirectTables.ent`): a row field, a value
#: derived from the padded payload length, the pad, the RoCEv2 flow label.
FIELD, LP, PAD, FLOW = 0, 1, 2, 3


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



@njit(cache=True, _nrt=False, inline="always")
def build_row(rec, r, out, o, c, at, pats, header, crc, cache):
    """Build the first ``c`` bytes of row ``r``'s frame of ``rec`` (uint8 ``(n,
    PACKET_DTYPE.itemsize)``) at ``out[o:]``, its payload ``pats``' flat bytes from ``at``
    (:meth:`DirectTables._payloads`), from :class:`DirectTables`' tables
    (:meth:`~DirectTables.tables`: three tuples, unpacked below). ``header``: ``fo`` (byte
    offsets of opcode, payload_bytes, nic, peer_nic, ce, ip_id, src_qp, dest_qp in a row) and
    the header's tables; ``crc``: ``w`` (uint64 scratch words, ``wb`` the same memory as
    uint8), ``f`` (uint8 scratch) and the CRCs' tables; ``cache``: the header cache. A row
    whose kept bytes reach its pad and CRCs is laid out whole in ``f`` first: the ICRC is
    CRC-32 (``t32``, from register ``reg0`` after the ICRC's prefix) over bytes ``crc_start..``
    with ``ormask`` (indexed by frame byte) ORed in (IBTA vol. 1 7.8.1, RoCEv2 Annex
    A17.4.1.3), then (``ib``) the VCRC, CRC-16 (``t16``) over everything before it (7.8.2),
    else Ethernet zero padding up to ``min_frame`` bytes. With ``cached``, a row whose key
    equals its slot's in the :class:`~tokenpcap.wire.headcache.HeaderCache` (``c_*``,
    ``k_at``, ``k_mask``, ``key`` its arrays) takes the slot's header words and checksum sum
    and has only its per-packet parts (entries ``ent_mid[op]..ent_hi[op]``) written; others
    are assembled whole and take the slot. The caller checked the row (field widths, NIC
    indices, eligibility). Inlined into its callers (a call would pass every table)."""
    (fo, hb_t, nw_t, const, ent, ent_lo, ent_mid, ent_hi, nic_ent, nic_tab, nic_lo, nic_hi,
     ce_word, ce_bits, ip4_col, ip4_base, udp_add, ip4_nic_sum, ce_delta) = header
    w, wb, f, crc_start, ormask, reg0, t32, ib, t16, min_frame = crc
    cached, c_op, c_key, c_words, c_sum, k_at, k_mask, key = cache
    m8 = np.uint64(0xFF)
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
    hb = hb_t[op]
    if c > hb + np.int64(pay):
        _whole_frame(f, wb, hb, pats, at, np.int64(pay), np.int64(lp), crc_start, ormask,
                     reg0, t32, ib, t16, min_frame)
        _copy(out, o, f, 0, c)
        return
    if c > 0:
        _copy(out, o, wb, 0, min(c, hb))
    if c > hb:
        _copy(out, o + hb, pats, at, c - hb)


@njit(cache=True, _nrt=False)
def _entry(w, rec, r, ent, e, pay, lp, fo):
    """Write field part ``ent[e]`` of row ``r`` into the header words ``w`` (see
    :func:`build_row`)."""
    kind = np.int64(ent[e, 0])
    if kind == FIELD:
        v = _read_le(rec, r, np.int64(ent[e, 1]), np.int64(ent[e, 2]))
    elif kind == LP:
        v = (lp + ent[e, 1]) >> ent[e, 2]
    elif kind == PAD:
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
    pad, ICRC, VCRC or zero padding (see :func:`build_row`)."""
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
