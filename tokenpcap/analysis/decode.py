"""Vectorized decoding of capture records into one row of header facts per packet (stage 8).

:func:`decode_batch` takes the records of a :class:`tokenpcap.pcap.reader.Capture` batch
(:data:`~tokenpcap.pcap.reader.RECORD_DTYPE`) and reads the fields every analysis needs for all
packets at once (strided views or gathers at byte offsets, :mod:`tokenpcap.analysis.columns`).
Every offset, width and shift comes from the header declarations in :mod:`tokenpcap.wire.headers`
(:meth:`Header.slot`); no layout is written down twice. Recognised:

* Ethernet [802.1Q] IPv4 (no fragments) | IPv6 → UDP destination port 4791 → BTH: RoCEv2
  (IBTA vol.1 Annex A17); Ethernet 0x8915 → GRH → BTH: RoCEv1 (Annex A16);
* Ethernet 0x8808 with MAC control opcode 0x0101: PFC (IEEE 802.1Qbb 36.1.3);
* native InfiniBand (linktype 247, from an ERF type-21 record): LRH [GRH] → BTH (IBTA 7.7, 8.3).

Anything else is ``KIND_OTHER`` and only counts in the capture totals. Fields a record's captured
bytes do not cover read as zero and the row's ``complete`` flag is false.

RDMA payload (case C7): ``UDP length - 8 - 12 - extended headers - pad - 4`` (RoCEv2);
``GRH PayLen - 12 - ext - pad - 4`` (RoCEv1); ``LRH PktLen*4 - 8 [- 40] - 12 - ext - pad - 4``
(native IB, PktLen counts LRH..ICRC in 4-byte words, IBTA 7.7.8). -1 when the opcode is unknown
or the lengths are inconsistent (``malformed``).

A malformed row (``malformed`` true) says why in ``why``, bits of :data:`MALFORMED_REASONS`:
``lengths`` (the UDP length disagrees with the IP length, or the IP/UDP, GRH PayLen or LRH
PktLen length runs past the frame's wire length), ``opcode`` (a BTH opcode the IBTA does not
define for RC/UC/UD), ``short`` (no room for the opcode's extended headers and ICRC, e.g. WRITE
FIRST without its RETH), ``junk`` (bytes after the headers of an opcode that carries no payload:
ACK, READ request, CNP ...) and ``padcnt`` (payload + PadCnt not a multiple of 4: IBTA vol.1
9.2 BTH PadCnt, the payload is padded to a 4-byte boundary; e.g. PadCnt 0 with a 5-byte
payload). Malformed rows carry no payload and are never ICRC-checked:
they are not "truncated" (``complete`` false for another reason).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.analysis.columns import (
    DECODED_DTYPE, HEADER_BLOCK_BYTES, Decoded, field_at, fields_at, header_block, u128_at)
from tokenpcap.pcap.chain import ByteViews
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header
from tokenpcap.wire.rdma import EXT_BYTES, HAS_PAYLOAD, HAS_RETH

__all__ = ["DECODED_DTYPE", "Decoded", "decode_batch", "field_at", "HEADER_BLOCK_BYTES",
           "KIND_OTHER", "KIND_ROCEV2", "KIND_ROCEV1", "KIND_IB", "KIND_PFC", "KIND_NAMES",
           "LINKTYPE_ETHERNET", "LINKTYPE_INFINIBAND", "MALFORMED_REASONS", "reason_counts"]

KIND_OTHER, KIND_ROCEV2, KIND_ROCEV1, KIND_IB, KIND_PFC = range(5)
KIND_NAMES = ("other", "RoCEv2", "RoCEv1", "InfiniBand", "PFC")
LINKTYPE_ETHERNET = 1
LINKTYPE_INFINIBAND = 247
_PFC_OPCODE = H.PFC.defaults()["Opcode"]

#: (name, meaning) of each ``why`` bit (bit k = ``1 << k``), module docstring.
MALFORMED_REASONS = (
    ("lengths", "IP/UDP (GRH, LRH) lengths disagree with each other or with the frame"),
    ("opcode", "unknown BTH opcode"),
    ("short", "no room for the opcode's extended headers and ICRC"),
    ("junk", "bytes after the headers of an opcode without payload"),
    ("padcnt", "PadCnt inconsistent with the payload length"),
)
_LENGTHS, _OPCODE, _SHORT, _JUNK, _PAD = (np.uint8(1 << k) for k in range(5))


def reason_counts(why: np.ndarray) -> np.ndarray:
    """int64 (len(MALFORMED_REASONS),): rows of ``why`` (uint8 (n,)) with each reason bit."""
    bits = (why.astype(np.uint8)[:, None] >> np.arange(len(MALFORMED_REASONS), dtype=np.uint8))
    return (bits & 1).sum(axis=0, dtype=np.int64)


def decode_batch(data: np.ndarray, rec: np.ndarray, views: ByteViews | None = None) -> Decoded:
    """Decode the packets of one record batch.

    Args:
        data: uint8 (file size,) the capture bytes (``Capture.data``).
        rec: :data:`tokenpcap.pcap.reader.RECORD_DTYPE` (n,) rows of that capture.
        views: accepted for symmetry with the readers; the decoder reads through its own
            header block (:func:`tokenpcap.analysis.columns.header_block`).

    Returns:
        :class:`Decoded` columns of :data:`DECODED_DTYPE`, n rows.

    The RoCEv2 rows of a capture of millions of records are decoded by one compiled loop
    (:mod:`tokenpcap.analysis.decode_rows`, the same columns), the rest here.
    """
    from tokenpcap.analysis.decode_rows import decode_rows, worth_compiling   # imports this

    if worth_compiling(data, rec):
        return decode_rows(data, rec, _decode)
    return _decode(data, rec)


def _decode(data: np.ndarray, rec: np.ndarray) -> Decoded:
    """:func:`decode_batch` by numpy passes over the batch's columns (the reference)."""
    n = rec.size
    out = Decoded.zeros(n)
    for name in ("time_ns", "orig_len", "caplen", "interface", "comment"):
        out[name][:] = rec[name]
    for name in ("l3", "bth", "vlan", "payload", "dmalen"):
        out[name][:] = -1
    off, views = header_block(data, rec["offset"].astype(np.int64))
    cap = rec["caplen"].astype(np.int64)
    lt = rec["linktype"]
    eth = (lt == LINKTYPE_ETHERNET) & (cap >= H.ETHERNET.size)
    if eth.all():
        _ethernet(views, out, ALL, off, cap)
    elif eth.any():
        e = np.flatnonzero(eth)
        _ethernet(views, out, e, off[e], cap[e])
    ib = np.flatnonzero((lt == LINKTYPE_INFINIBAND) & (cap >= H.LRH.size + H.BTH.size))
    if ib.size:
        _infiniband(views, out, ib, off[ib], cap[ib])
    return out


ALL = slice(None)   #: "every row": assignments through a slice copy instead of scattering


def _pick(idx, sel: np.ndarray, n: int):
    """Rows ``sel`` (indices into a subset of ``n`` rows) of the subset ``idx`` (a slice for all
    rows, or an index array); stays ``idx`` when ``sel`` is the whole subset."""
    if sel.size == n:
        return idx
    return sel if isinstance(idx, slice) else idx[sel]


def _sub(arrays, sel: np.ndarray, n: int):
    """The rows ``sel`` of each array (the arrays themselves when ``sel`` is every row)."""
    return arrays if sel.size == n else tuple(a[sel] for a in arrays)


def _ethernet(views, out, idx, off, cap) -> None:
    E, Q = H.ETHERNET, H.DOT1Q
    n = off.size
    out["dmac"][idx] = field_at(views, off, E, "Destination")
    out["smac"][idx] = field_at(views, off, E, "Source")
    etype = field_at(views, off, E, "EtherType")
    l3 = np.full(n, E.size, np.int64)
    tagged = (etype == H.ETHERTYPE_VLAN) & (cap >= E.size + Q.size)
    if tagged.any():
        t = off[tagged] + E.size
        rows = _pick(idx, np.flatnonzero(tagged), n)
        out["vlan"][rows] = field_at(views, t, Q, "VID")
        out["pcp"][rows] = field_at(views, t, Q, "PCP")
        etype[tagged] = field_at(views, t, Q, "EtherType")
        l3[tagged] += Q.size
    pos = off + l3
    v4 = np.flatnonzero((etype == H.ETHERTYPE_IPV4) & (cap >= l3 + H.IPV4.size))
    v6 = np.flatnonzero((etype == H.ETHERTYPE_IPV6) & (cap >= l3 + H.IPV6.size))
    v1 = np.flatnonzero((etype == H.ETHERTYPE_ROCEV1) & (cap >= l3 + H.GRH.size + H.BTH.size))
    pfc = np.flatnonzero((etype == H.ETHERTYPE_MAC_CONTROL) & (cap >= l3 + H.PFC.size))
    cols = (pos, l3, off, cap)
    if v4.size:
        _ipv4(views, out, _pick(idx, v4, n), *_sub(cols, v4, n))
    if v6.size:
        _ipv6(views, out, _pick(idx, v6, n), *_sub(cols, v6, n))
    if v1.size:
        _grh(views, out, _pick(idx, v1, n), *_sub(cols, v1, n), H.GRH, KIND_ROCEV1)
    if pfc.size:
        p = pos[pfc]
        is_pfc = np.flatnonzero(field_at(views, p, H.PFC, "Opcode") == _PFC_OPCODE)
        p, rows = p[is_pfc], _pick(_pick(idx, pfc, n), is_pfc, pfc.size)
        cev = field_at(views, p, H.PFC, "ClassEnableVector")
        quanta = np.stack([field_at(views, p, H.PFC, f"Time{k}") for k in range(8)], axis=1)
        enabled = ((cev[:, None] >> np.arange(8, dtype=np.uint64)[None, :]) & np.uint64(1)) == 1
        out["kind"][rows] = KIND_PFC
        out["pfc_cev"][rows] = cev
        out["pfc_max"][rows] = np.where(enabled, quanta, 0).max(axis=1, initial=0)


def _ipv4(views, out, idx, pos, l3, off, cap) -> None:
    I = H.IPV4
    F = fields_at(views, pos, I, ("IHL", "TotalLength", "DSCP", "ECN", "SourceAddress",
                                  "DestinationAddress", "FragmentOffset", "MF", "Protocol"))
    ihl = F["IHL"].astype(np.int64) * 4
    total = F["TotalLength"].astype(np.int64)
    out["ipver"][idx] = 4
    out["dscp"][idx] = F["DSCP"]
    out["ecn"][idx] = F["ECN"]
    out["src_lo"][idx] = F["SourceAddress"]
    out["dst_lo"][idx] = F["DestinationAddress"]
    frag = (F["FragmentOffset"] != 0) | (F["MF"] != 0)
    udp = ((F["Protocol"] == H.IP_PROTO_UDP) & ~frag & (ihl >= I.size)
           & (cap >= l3 + ihl + H.UDP.size))
    u = np.flatnonzero(udp)
    pos, ihl, l3, off, cap, total = _sub((pos, ihl, l3, off, cap, total), u, udp.size)
    _udp(views, out, _pick(idx, u, udp.size), pos + ihl, l3, off, cap, l3 + total)


def _v6_fields(views, out, idx, pos, hdr: Header, names: tuple[str, str, str]) -> None:
    """IPv6 and the GRH (its IBA counterpart) carry the same three fields under their own names:
    the 8-bit traffic class (DSCP 6 bits, ECN 2 bits; RFC 8200 Sec. 7, IBTA 8.3.1) and 128-bit
    source and destination addresses (GIDs)."""
    tc = field_at(views, pos, hdr, names[0])
    out["ipver"][idx] = 6
    out["dscp"][idx] = tc >> np.uint64(2)
    out["ecn"][idx] = tc & np.uint64(3)
    out["src_hi"][idx], out["src_lo"][idx] = u128_at(views, pos, hdr, names[1])
    out["dst_hi"][idx], out["dst_lo"][idx] = u128_at(views, pos, hdr, names[2])


def _ipv6(views, out, idx, pos, l3, off, cap) -> None:
    I = H.IPV6
    _v6_fields(views, out, idx, pos, I, ("TrafficClass", "SourceAddress", "DestinationAddress"))
    plen = field_at(views, pos, I, "PayloadLength").astype(np.int64)
    udp = (field_at(views, pos, I, "NextHeader") == H.IP_PROTO_UDP) & \
        (cap >= l3 + I.size + H.UDP.size)
    u = np.flatnonzero(udp)
    pos, l3, off, cap, plen = _sub((pos, l3, off, cap, plen), u, udp.size)
    _udp(views, out, _pick(idx, u, udp.size), pos + I.size, l3, off, cap, l3 + I.size + plen)


def _udp(views, out, idx, pos, l3, off, cap, ip_end) -> None:
    U = H.UDP
    F = fields_at(views, pos, U, ("SourcePort", "DestinationPort", "Length"))
    roce = (F["DestinationPort"] == H.ROCEV2_UDP_PORT) & (cap >= pos - off + U.size + H.BTH.size)
    r = np.flatnonzero(roce)
    idx = _pick(idx, r, roce.size)
    pos, l3, off, cap, ip_end, udp_len, sport = _sub(
        (pos, l3, off, cap, ip_end, F["Length"], F["SourcePort"]), r, roce.size)
    udp_len = udp_len.astype(np.int64)
    out["kind"][idx] = KIND_ROCEV2
    out["sport"][idx] = sport
    bth = pos - off + U.size
    end = pos - off + udp_len
    _bth(views, out, idx, off, l3, bth, end, cap, bad=(end != ip_end) | (udp_len < U.size))


def _grh(views, out, idx, pos, l3, off, cap, G: Header, kind: int) -> None:
    """RoCEv1 (Ethernet 0x8915) or IB with GRH: the GRH at ``pos``, the BTH right after it."""
    _v6_fields(views, out, idx, pos, G, ("TClass", "SGID", "DGID"))
    paylen = field_at(views, pos, G, "PayLen").astype(np.int64)
    k = np.flatnonzero(field_at(views, pos, G, "NxtHdr") == H.GRH_NXTHDR_IBA)
    rows = _pick(idx, k, pos.size)
    out["kind"][rows] = kind
    off, l3, cap, paylen = _sub((off, l3, cap, paylen), k, pos.size)
    bth = l3 + G.size
    _bth(views, out, rows, off, l3, bth, bth + paylen, cap, bad=np.zeros(k.size, bool))


def _infiniband(views, out, idx, off, cap) -> None:
    L = H.LRH
    lnh = field_at(views, off, L, "LNH")
    pktlen = field_at(views, off, L, "PktLen").astype(np.int64) * 4
    out["l3"][idx] = 0
    local = np.flatnonzero(lnh == 2)
    glob = np.flatnonzero((lnh == 3) & (cap >= L.size + H.GRH.size + H.BTH.size))
    for sel in (local, glob):
        out["kind"][idx[sel]] = KIND_IB
        out["src_lo"][idx[sel]] = field_at(views, off[sel], L, "SLID")
        out["dst_lo"][idx[sel]] = field_at(views, off[sel], L, "DLID")
        out["pcp"][idx[sel]] = field_at(views, off[sel], L, "SL")
    if local.size:
        s = local
        _bth(views, out, idx[s], off[s], np.zeros(s.size, np.int64), np.full(s.size, L.size),
             pktlen[s], cap[s], bad=np.zeros(s.size, bool))
    if glob.size:
        s = glob
        g = off[s] + L.size
        _grh(views, out, idx[s], g, np.full(s.size, L.size), off[s], cap[s], H.GRH, KIND_IB)
        out["l3"][idx[s]] = 0
        paylen = field_at(views, g, H.GRH, "PayLen").astype(np.int64)
        # the LRH length is authoritative for the ICRC; flag disagreeing GRH lengths
        disagree = pktlen[s] != L.size + H.GRH.size + paylen
        out["why"][idx[s]] |= np.where(disagree, _LENGTHS, 0).astype(np.uint8)
        out["malformed"][idx[s]] |= disagree
        out["payload"][idx[s]] = np.where(disagree, -1, out["payload"][idx[s]])
        out["end"][idx[s]] = pktlen[s]
        out["complete"][idx[s]] = (pktlen[s] + H.VCRC.size <= cap[s]) & (pktlen[s] >= 48 + 16) \
            & ~out["malformed"][idx[s]]
        out["src_lo"][idx[s]] = field_at(views, off[s], L, "SLID")   # LIDs key IB flows
        out["dst_lo"][idx[s]] = field_at(views, off[s], L, "DLID")
        out["src_hi"][idx[s]] = out["dst_hi"][idx[s]] = 0
    if local.size:
        out["complete"][idx[local]] &= pktlen[local] + H.VCRC.size <= cap[local]


def _bth(views, out, idx, off, l3, bth, end, cap, bad) -> None:
    """BTH at frame offsets ``bth``; ``end`` is one past the ICRC (frame offsets)."""
    B = H.BTH
    p = off + bth
    F = fields_at(views, p, B, ("OpCode", "PadCnt", "FECN", "BECN", "AckReq", "P_Key", "DestQP",
                                "PSN"))
    op = F["OpCode"].astype(np.int64)
    pad = F["PadCnt"].astype(np.int64)
    out["l3"][idx] = l3
    out["bth"][idx] = bth
    out["end"][idx] = end
    out["opcode"][idx] = op
    out["padcnt"][idx] = pad
    for name, col in (("FECN", "fecn"), ("BECN", "becn"), ("AckReq", "ackreq"),
                      ("P_Key", "pkey"), ("DestQP", "destqp"), ("PSN", "psn")):
        out[col][idx] = F[name]
    ext = EXT_BYTES[op].astype(np.int64)
    payload = end - bth - B.size - ext - pad - H.ICRC.size
    trailer = np.where(out["kind"][idx] == KIND_IB, H.VCRC.size, 0)     # IB: VCRC after ICRC
    why = np.where(bad | (end + trailer > out["orig_len"][idx]), _LENGTHS, 0).astype(np.uint8)
    why |= np.where(ext < 0, _OPCODE, 0).astype(np.uint8)
    known = ext >= 0
    why |= np.where(known & (payload < 0), _SHORT, 0).astype(np.uint8)
    why |= np.where(known & (payload > 0) & ~HAS_PAYLOAD[op], _JUNK, 0).astype(np.uint8)
    why |= np.where(known & (payload >= 0) & (((payload + pad) & 3) != 0), _PAD, 0
                    ).astype(np.uint8)
    bad = why != 0
    out["payload"][idx] = np.where(bad, -1, payload)
    out["malformed"][idx] = bad
    out["why"][idx] = why
    out["complete"][idx] = ~bad & (end <= cap)
    reth = np.flatnonzero(HAS_RETH[op] & (cap >= bth + B.size + H.RETH.size))
    out["dmalen"][_pick(idx, reth, p.size)] = field_at(views, p[reth] + B.size, H.RETH,
                                                       "DMALen")
