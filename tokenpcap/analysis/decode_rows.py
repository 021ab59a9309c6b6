"""RoCEv2 rows decoded by one compiled loop (the fast path of :func:`tokenpcap.analysis.decode.decode_batch`).

A headers-only capture of tens of millions of frames is almost all Ethernet [802.1Q] IPv4/IPv6
UDP 4791 BTH [RETH] rows. :func:`decode_rows` reads every field of such a row in one pass over
its bytes, writing all :data:`~tokenpcap.analysis.columns.DECODED_DTYPE` columns at once, where
the numpy decode makes a few passes per field over the batch (~170 ns a row against a few ns
here). Every row the loop does not take (any other linktype, EtherType or IP protocol, a
fragment, too few captured bytes for the IP, UDP or BTH header, another UDP port) is decoded by
the numpy path, which stays the reference: the columns of a row are the same whichever path
decodes it (tested row by row with Hypothesis on built and mutated frames). Where a row's
headers are (:func:`locate`) and its BTH facts (:func:`transport`, :func:`dest_qp`,
:func:`bth_marks`) are inlined into the loop, and into :mod:`tokenpcap.analysis.pcap_pass`'s
pass over a classic pcap's bytes, so both read a row the same way.

What a taken row gets is :mod:`tokenpcap.analysis.decode`'s definitions: the byte span, shift
and width of every field from the header declarations (:meth:`tokenpcap.wire.fields.Header.slot`,
frozen into the loop as constants), the RDMA payload ``UDP length - 8 - 12 - extended headers -
pad - 4`` (case C7), and the ``why`` bits of
:data:`~tokenpcap.analysis.decode.MALFORMED_REASONS`.

Loading the compiled loop costs a process about 0.3-0.4 s once (numba's code generator and the
cached machine code); :func:`worth_compiling` keeps small captures on the numpy path.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.analysis.columns import DECODED_DTYPE, Decoded
from tokenpcap.analysis.decode import KIND_ROCEV2, LINKTYPE_ETHERNET, MALFORMED_REASONS
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header
from tokenpcap.wire.rdma import EXT_BYTES, HAS_PAYLOAD, HAS_RETH

__all__ = ["decode_rows", "worth_compiling", "COMPILED_MIN_RECORDS", "locate", "transport",
           "dest_qp", "bth_marks"]

#: Records a capture must hold (estimated from its size and the batch's record size) before its
#: batches take the compiled loop: its one-off load (~0.35 s) is then repaid by ~160 ns a row.
COMPILED_MIN_RECORDS = 2_000_000
_RECORD_OVERHEAD_BYTES = 16          # a pcap record header; an EPB's is larger (a safe guess)


def _slot(header: Header, name: str) -> tuple[int, int, int, int]:
    """(first byte, bytes spanned, shift, mask) of a declared big-endian field up to 64 bits."""
    s = header.slot(name)
    return s.first_byte, s.nbytes, s.shift, (1 << s.field.bits) - 1


_E_TYPE = _slot(H.ETHERNET, "EtherType")
_E_DST = _slot(H.ETHERNET, "Destination")
_E_SRC = _slot(H.ETHERNET, "Source")
_Q_PCP, _Q_VID, _Q_TYPE = (_slot(H.DOT1Q, k) for k in ("PCP", "VID", "EtherType"))
_4_IHL, _4_TOTAL, _4_DSCP, _4_ECN, _4_FRAG, _4_MF, _4_PROTO, _4_SRC, _4_DST = (
    _slot(H.IPV4, k) for k in ("IHL", "TotalLength", "DSCP", "ECN", "FragmentOffset", "MF",
                               "Protocol", "SourceAddress", "DestinationAddress"))
_6_TC, _6_PLEN, _6_NEXT = (_slot(H.IPV6, k) for k in ("TrafficClass", "PayloadLength",
                                                      "NextHeader"))
_6_SRC = H.IPV6.slot("SourceAddress").first_byte            # 128-bit: two 64-bit halves
_6_DST = H.IPV6.slot("DestinationAddress").first_byte
_U_SPORT, _U_DPORT, _U_LEN = (_slot(H.UDP, k) for k in ("SourcePort", "DestinationPort",
                                                         "Length"))
_B_OP, _B_PAD, _B_FECN, _B_BECN, _B_ACK, _B_PKEY, _B_QP, _B_PSN = (
    _slot(H.BTH, k) for k in ("OpCode", "PadCnt", "FECN", "BECN", "AckReq", "P_Key", "DestQP",
                              "PSN"))
_R_DMALEN = _slot(H.RETH, "DMALen")
_ETH, _DOT1Q, _IPV4, _IPV6, _UDP, _BTH, _RETH = (
    H.ETHERNET.size, H.DOT1Q.size, H.IPV4.size, H.IPV6.size, H.UDP.size, H.BTH.size,
    H.RETH.size)
_ICRC = H.ICRC.size
_VLAN, _TYPE4, _TYPE6 = H.ETHERTYPE_VLAN, H.ETHERTYPE_IPV4, H.ETHERTYPE_IPV6
_UDP_PROTO, _ROCE_PORT = H.IP_PROTO_UDP, H.ROCEV2_UDP_PORT
_BIT = {name: 1 << k for k, (name, _) in enumerate(MALFORMED_REASONS)}
_LENGTHS, _OPCODE, _SHORT, _JUNK, _PAD = (_BIT[k] for k in ("lengths", "opcode", "short",
                                                               "junk", "padcnt"))
_KIND_ROCEV2, _LINK_ETHERNET = KIND_ROCEV2, LINKTYPE_ETHERNET


@njit(cache=True, nogil=True, inline="always")
def _get(data, p, slot):
    first, nbytes, shift, mask = slot
    v = np.uint64(0)
    for k in range(nbytes):
        v = (v << np.uint64(8)) | np.uint64(data[np.uint64(p + first + k)])
    return np.int64((v >> np.uint64(shift)) & np.uint64(mask))


@njit(cache=True, nogil=True, inline="always")
def _u64(data, p):
    v = np.uint64(0)
    for k in range(8):
        v = (v << np.uint64(8)) | np.uint64(data[np.uint64(p + k)])
    return v


@njit(cache=True, nogil=True, inline="always")
def locate(data, off, cap, linktype):
    """Where the RoCEv2 headers of the frame at byte ``off`` (``cap`` bytes captured, of link
    type ``linktype``) are, and its addressing: ``(taken, l3, udp, ip_end, version, dscp, ecn,
    src_hi, src_lo, dst_hi, dst_lo, vid, pcp)`` (offsets from ``off``; ``taken`` False: not a
    row this loop decodes, module docstring; the other values are then meaningless)."""
    z = np.uint64(0)
    no = (False, 0, 0, 0, 0, 0, 0, z, z, z, z, -1, 0)
    if linktype != _LINK_ETHERNET or cap < _ETH:
        return no
    etype = _get(data, off, _E_TYPE)
    l3 = _ETH
    vid = -1
    prio = 0
    if etype == _VLAN and cap >= _ETH + _DOT1Q:
        vid = _get(data, off + _ETH, _Q_VID)
        prio = _get(data, off + _ETH, _Q_PCP)
        etype = _get(data, off + _ETH, _Q_TYPE)
        l3 = _ETH + _DOT1Q
    pos = off + l3
    if etype == _TYPE4 and cap >= l3 + _IPV4:
        ihl = _get(data, pos, _4_IHL) * 4
        if (_get(data, pos, _4_PROTO) != _UDP_PROTO or _get(data, pos, _4_FRAG) != 0
                or _get(data, pos, _4_MF) != 0 or ihl < _IPV4 or cap < l3 + ihl + _UDP):
            return no
        udp = l3 + ihl
        ip_end = l3 + _get(data, pos, _4_TOTAL)
        version = 4
        ds = _get(data, pos, _4_DSCP)
        ec = _get(data, pos, _4_ECN)
        s_hi = z
        s_lo = np.uint64(_get(data, pos, _4_SRC))
        d_hi = z
        d_lo = np.uint64(_get(data, pos, _4_DST))
    elif etype == _TYPE6 and cap >= l3 + _IPV6:
        if _get(data, pos, _6_NEXT) != _UDP_PROTO or cap < l3 + _IPV6 + _UDP:
            return no
        udp = l3 + _IPV6
        ip_end = l3 + _IPV6 + _get(data, pos, _6_PLEN)
        version = 6
        tc = _get(data, pos, _6_TC)
        ds = tc >> 2
        ec = tc & 3
        s_hi = _u64(data, pos + _6_SRC)
        s_lo = _u64(data, pos + _6_SRC + 8)
        d_hi = _u64(data, pos + _6_DST)
        d_lo = _u64(data, pos + _6_DST + 8)
    else:
        return no
    if _get(data, off + udp, _U_DPORT) != _ROCE_PORT or cap < udp + _UDP + _BTH:
        return no
    return (True, l3, udp, ip_end, version, ds, ec, s_hi, s_lo, d_hi, d_lo, vid, prio)


@njit(cache=True, nogil=True, inline="always")
def transport(data, off, udp, ip_end, orig_len, ext_bytes, has_payload):
    """The BTH facts of a row :func:`locate` took: ``(end, opcode, padcnt, payload, why)``:
    ``end`` one past the ICRC (from the UDP length, offset from ``off``), the payload of case
    C7 and the ``why`` bits of :data:`~tokenpcap.analysis.decode.MALFORMED_REASONS` (0: well
    formed; the payload is then meaningful)."""
    ulen = _get(data, off + udp, _U_LEN)
    bth = udp + _UDP
    end = udp + ulen
    p = off + bth
    op = _get(data, p, _B_OP)
    pad = _get(data, p, _B_PAD)
    ext = np.int64(ext_bytes[op])
    pay = end - bth - _BTH - ext - pad - _ICRC
    w = 0
    if end != ip_end or ulen < _UDP or end > orig_len:
        w |= _LENGTHS
    if ext < 0:
        w |= _OPCODE
    else:
        if pay < 0:
            w |= _SHORT
        if pay > 0 and not has_payload[op]:
            w |= _JUNK
        if pay >= 0 and ((pay + pad) & 3) != 0:
            w |= _PAD
    return end, op, pad, pay, w


@njit(cache=True, nogil=True, inline="always")
def dest_qp(data, off, udp):
    """The BTH DestQP of a row :func:`locate` took."""
    return _get(data, off + udp + _UDP, _B_QP)


@njit(cache=True, nogil=True, inline="always")
def bth_marks(data, off, udp):
    """``(udp source port, FECN, BECN, PSN)`` of a row :func:`locate` took."""
    p = off + udp + _UDP
    return (_get(data, off + udp, _U_SPORT), _get(data, p, _B_FECN), _get(data, p, _B_BECN),
            _get(data, p, _B_PSN))


@njit(cache=True, nogil=True)
def _rows(data, offset, caplen, orig_len, linktype, ext_bytes, has_payload, has_reth,
          kind, ipver, l3c, bthc, endc, complete, src_hi, src_lo, dst_hi, dst_lo, smac, dmac,
          vlan, pcp, dscp, ecn, sport, opcode, padcnt, fecn, becn, ackreq, pkey, destqp, psn,
          payload, malformed, why, pfc_cev, pfc_max, dmalen, taken):
    """Decode the RoCEv2 rows (module docstring); ``taken[i]`` says whether row i was."""
    for i in range(offset.size):
        cap = np.int64(caplen[i])
        off = offset[i]
        (ok, l3, udp, ip_end, version, ds, ec, s_hi, s_lo, d_hi, d_lo, vid,
         prio) = locate(data, off, cap, linktype[i])
        taken[i] = ok
        if not ok:
            continue
        end, op, pad, pay, w = transport(data, off, udp, ip_end, np.int64(orig_len[i]),
                                         ext_bytes, has_payload)
        bth = udp + _UDP
        p = off + bth
        kind[i] = _KIND_ROCEV2
        ipver[i] = version
        l3c[i] = l3
        bthc[i] = bth
        endc[i] = end
        complete[i] = w == 0 and end <= cap
        src_hi[i] = s_hi
        src_lo[i] = s_lo
        dst_hi[i] = d_hi
        dst_lo[i] = d_lo
        dmac[i] = _get(data, off, _E_DST)
        smac[i] = _get(data, off, _E_SRC)
        vlan[i] = vid
        pcp[i] = prio
        dscp[i] = ds
        ecn[i] = ec
        sport[i] = _get(data, off + udp, _U_SPORT)
        opcode[i] = op
        padcnt[i] = pad
        fecn[i] = _get(data, p, _B_FECN)
        becn[i] = _get(data, p, _B_BECN)
        ackreq[i] = _get(data, p, _B_ACK)
        pkey[i] = _get(data, p, _B_PKEY)
        destqp[i] = _get(data, p, _B_QP)
        psn[i] = _get(data, p, _B_PSN)
        payload[i] = -1 if w else pay
        malformed[i] = w != 0
        why[i] = w
        pfc_cev[i] = 0
        pfc_max[i] = 0
        dmalen[i] = _get(data, p + _BTH, _R_DMALEN) if has_reth[op] and \
            cap >= bth + _BTH + _RETH else -1


_COPIED = ("time_ns", "orig_len", "caplen", "interface", "comment")
_TABLES = (EXT_BYTES.astype(np.int64), HAS_PAYLOAD.astype(np.bool_), HAS_RETH.astype(np.bool_))


def worth_compiling(data: np.ndarray, rec: np.ndarray) -> bool:
    """Whether the capture ``data`` (uint8, the whole file) holds at least
    :data:`COMPILED_MIN_RECORDS` records of the size of batch ``rec``'s
    (:data:`~tokenpcap.pcap.capture.RECORD_DTYPE` (n,)) on average."""
    if rec.size == 0:
        return False
    mean = int(rec["caplen"].sum(dtype=np.int64)) // rec.size + _RECORD_OVERHEAD_BYTES
    return data.size >= COMPILED_MIN_RECORDS * mean


def decode_rows(data: np.ndarray, rec: np.ndarray, rest) -> Decoded:
    """The :class:`Decoded` columns of batch ``rec`` (:data:`~tokenpcap.pcap.capture.RECORD_DTYPE`
    (n,) rows of the capture ``data``, uint8 (file size,)): RoCEv2 rows by the compiled loop,
    every other row by ``rest(data, rows)`` (the numpy decode of those rows). Raises nothing."""
    n = rec.size
    cols = {k: np.empty(n, DECODED_DTYPE[k]) for k in DECODED_DTYPE.names}
    for k in _COPIED:
        cols[k][:] = rec[k]
    taken = np.empty(n, np.bool_)
    c = cols
    _rows(data, rec["offset"], rec["caplen"], rec["orig_len"], rec["linktype"],   # (strided)
          *_TABLES, c["kind"], c["ipver"], c["l3"], c["bth"], c["end"], c["complete"],
          c["src_hi"], c["src_lo"], c["dst_hi"], c["dst_lo"], c["smac"], c["dmac"], c["vlan"],
          c["pcp"], c["dscp"], c["ecn"], c["sport"], c["opcode"], c["padcnt"], c["fecn"],
          c["becn"], c["ackreq"], c["pkey"], c["destqp"], c["psn"], c["payload"],
          c["malformed"], c["why"], c["pfc_cev"], c["pfc_max"], c["dmalen"], taken)
    other = np.flatnonzero(~taken)
    if other.size:
        sub = rest(data, rec[other])
        for k in DECODED_DTYPE.names:
            if k not in _COPIED:
                cols[k][other] = sub[k]
    return Decoded(cols, n)
