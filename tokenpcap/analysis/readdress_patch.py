"""The vectorized work of :mod:`tokenpcap.analysis.readdress`: copy a batch of frames into the writer's
buffer (inserting or removing an 802.1Q tag), patch the fields, repair checksums and ICRCs.

Field positions come from the header declarations (:meth:`Header.slot`); reading uses
:func:`tokenpcap.analysis.decode.field_at`, writing :func:`put`. No Python loop per packet: loops
run per field, per distinct copy length, or per covered head byte.

Truncated records (caplen < wire length, any snaplen): every write is bounded by the output
record's caplen; a header is rewritten only when the record holds all of it (the IPv4 header
checksum with it), a header cut short is copied as it is, and the ICRC, which lies beyond the
cut, is not in the capture and stays unknown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from tokenpcap.analysis.crc import HEADS
from tokenpcap.analysis.decode import field_at
from tokenpcap.pcap.chain import ByteViews
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header
from tokenpcap.wire.linear import CRC32

__all__ = ["Patch", "patch_batch", "put", "copy_ranges"]

E, Q = H.ETHERNET, H.DOT1Q
_TAG_AT = E.slot("EtherType").first_byte          # 12: where a tag goes in
PORT_LO, PORT_SPAN = 0xC000, 0x4000
UNTAGGED_ETHERTYPES = (H.ETHERTYPE_MAC_CONTROL, 0x88CC)   # 802.3 MAC control, LLDP


def put(buf: np.ndarray, pos: np.ndarray, header: Header, name: str, values) -> None:
    """Write field ``name`` of ``header`` (at most 64 bits) for headers at offsets ``pos`` of
    ``buf`` (uint8), keeping the other bits of the bytes it shares (read-modify-write)."""
    s = header.slot(name)
    f = s.field
    at = np.asarray(pos, np.int64) + s.first_byte
    v = np.broadcast_to(np.asarray(values, np.uint64), at.shape) & np.uint64((1 << f.bits) - 1)
    wide = v << np.uint64(s.shift)
    fmask = ((1 << f.bits) - 1) << s.shift
    for j in range(s.nbytes):
        sh = 8 * (s.nbytes - 1 - j)
        keep = np.uint8(~(fmask >> sh) & 0xFF)
        part = ((wide >> np.uint64(sh)) & np.uint64(0xFF)).astype(np.uint8)
        buf[at + j] = (buf[at + j] & keep) | part


def put_in(buf: np.ndarray, pos: np.ndarray, end: np.ndarray, header: Header, name: str,
           values) -> None:
    """:func:`put` for the headers at ``pos`` whose field ``name`` ends by ``end`` (int64, one
    past each record's last captured byte); the others are left alone."""
    s = header.slot(name)
    pos = np.asarray(pos, np.int64)
    ok = pos + s.first_byte + s.nbytes <= end
    v = np.asarray(values)
    put(buf, pos[ok], header, name, v[ok] if v.ndim else v)


def _put128(buf, pos, header, name, hi, lo) -> None:
    at = np.asarray(pos, np.int64) + header.slot(name).first_byte
    for j in range(8):
        sh = np.uint64(8 * (7 - j))
        buf[at + j] = ((hi >> sh) & np.uint64(0xFF)).astype(np.uint8)
        buf[at + 8 + j] = ((lo >> sh) & np.uint64(0xFF)).astype(np.uint8)


def copy_ranges(out: np.ndarray, dst: np.ndarray, src_buf: np.ndarray, src: np.ndarray,
                length: np.ndarray) -> None:
    """``out[dst[i]:dst[i]+length[i]] = src_buf[src[i]:...]`` with one fancy assignment per
    distinct length (through ``V<length>`` sliding views)."""
    for n in np.unique(length).tolist():
        if n <= 0:
            continue
        sel = length == n
        vo = np.ndarray((out.size - n + 1,), f"V{n}", buffer=out, strides=(1,))
        vi = np.ndarray((src_buf.size - n + 1,), f"V{n}", buffer=src_buf, strides=(1,))
        vo[dst[sel]] = vi[src[sel]]


def _lookup(table: dict[int, int], values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map ``values`` (uint64) through ``table``: (new values, changed mask)."""
    if not table:
        return values, np.zeros(values.shape, bool)
    keys = np.array(sorted(table), np.uint64)
    new = np.array([table[int(k)] for k in keys], np.uint64)
    i = np.clip(np.searchsorted(keys, values), 0, keys.size - 1)
    hit = keys[i] == values
    return np.where(hit, new[i], values), hit


def _lookup128(table, hi, lo):
    if not table:
        return hi, lo, np.zeros(hi.shape, bool)
    m64 = (1 << 64) - 1
    keys = sorted(table)
    khi = np.array([k >> 64 for k in keys], np.uint64)
    klo = np.array([k & m64 for k in keys], np.uint64)
    hit = np.zeros(hi.shape, bool)
    nhi, nlo = hi.copy(), lo.copy()
    for k, a, b in zip(keys, khi, klo):                 # a loop per mapped address
        sel = (hi == a) & (lo == b)
        nhi[sel], nlo[sel] = np.uint64(table[k] >> 64), np.uint64(table[k] & m64)
        hit |= sel
    return nhi, nlo, hit


def _seen(stats: dict, kind: str, old: np.ndarray) -> None:
    """Note in ``stats["mapped"]`` (a set of ``(kind, address)``) the mapped addresses ``old``
    (uint64, the hits of a lookup) that frames carried."""
    stats.setdefault("mapped", set()).update((kind, int(v)) for v in np.unique(old))


def _words(v: np.ndarray, nbytes: int) -> list[np.ndarray]:
    return [(v >> np.uint64(8 * (nbytes - 2 - 2 * k))) & np.uint64(0xFFFF)
            for k in range(nbytes // 2)]


@dataclass
class Patch:
    """One batch's rewrite: ``new_len`` int64 (n,) wire length, ``caplen`` int64 (n,) bytes kept
    (``min(caplen + shift, new_len, snaplen)``: a record cut short stays cut), ``shift``
    int64 (n,) (+4 tag added, -4 tag removed), and ``fill(out, offsets, caplen)`` for the
    writer."""

    new_len: np.ndarray
    caplen: np.ndarray
    shift: np.ndarray
    fill: Callable[[np.ndarray, np.ndarray, np.ndarray], None]


def patch_batch(data: np.ndarray, rec: np.ndarray, dec: np.ndarray, m, stats: dict,
                snaplen: np.ndarray | int = 262144) -> Patch:
    """Plan and return the rewrite of one record batch under mapping ``m`` (a ``Mapping``);
    ``snaplen`` (int or int64 (n,)) is the output limit of each record's interface."""
    src = rec["offset"].astype(np.int64)
    cap = rec["caplen"].astype(np.int64)
    tagged = dec["vlan"] >= 0
    etype = field_at(ByteViews(data), src, E, "EtherType")
    # MAC control (PFC pause) and LLDP frames are link-local and never carry a tag
    eth = (cap >= E.size) & ~np.isin(etype, UNTAGGED_ETHERTYPES)
    shift = np.zeros(rec.size, np.int64)
    if m.vlan is not None and m.vlan >= 0:
        shift[eth & ~tagged] = Q.size
    elif m.vlan == -1:
        shift[eth & tagged] = -Q.size
    new_len = rec["orig_len"].astype(np.int64) + shift
    out_cap = np.minimum(np.minimum(cap + shift, new_len), snaplen)
    stats["truncated"] = stats.get("truncated", 0) + int((out_cap < new_len).sum())

    def fill(out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
        head = np.minimum(caplen, _TAG_AT)
        copy_ranges(out, offsets, data, src, head)
        ins, rem = shift > 0, shift < 0
        rest_src = src + _TAG_AT + np.where(rem, Q.size, 0)
        rest_dst = offsets + _TAG_AT + np.where(ins, Q.size, 0)
        rest = np.maximum(caplen - (rest_dst - offsets), 0)
        copy_ranges(out, rest_dst, data, rest_src, rest)
        _patch(out, offsets, caplen, data, src, cap, dec, shift, m, stats)

    return Patch(new_len, out_cap, shift, fill)


def _patch(out, o, caplen, data, src, cap, dec, shift, m, stats) -> None:
    views = ByteViews(out)
    end = o + caplen                                   # one past each record's last byte
    full = caplen >= E.size
    o_e = o[full]
    if m.mac:
        for name in ("Destination", "Source"):
            old = field_at(views, o_e, E, name)
            new, hit = _lookup(m.mac, old)
            put(out, o_e[hit], E, name, new[hit])
            _seen(stats, "mac", old[hit])
    ins = np.flatnonzero(shift > 0)
    if ins.size:                                       # a new tag: TPID, TCI, inner EtherType
        inner = field_at(ByteViews(data), src[ins], E, "EtherType")
        put(out, o[ins], E, "EtherType", H.ETHERTYPE_VLAN)
        t, e = o[ins] + E.size, end[ins]
        put_in(out, t, e, Q, "PCP", m.pcp or 0)
        put_in(out, t, e, Q, "DEI", 0)
        put_in(out, t, e, Q, "VID", m.vlan)
        put_in(out, t, e, Q, "EtherType", inner)
    keep = np.flatnonzero((dec["vlan"] >= 0) & (shift == 0) & full)
    if keep.size and (m.vlan is not None or m.pcp is not None):
        t, e = o[keep] + E.size, end[keep]
        if m.vlan is not None:
            put_in(out, t, e, Q, "VID", m.vlan)
        if m.pcp is not None:
            put_in(out, t, e, Q, "PCP", m.pcp)
    # the IP header follows the Ethernet header and its tag (the decoder sets ``l3`` only when it
    # reaches a BTH, and a cut record may stop before)
    l3 = np.where(dec["l3"] >= 0, dec["l3"], np.where(dec["vlan"] >= 0, E.size + Q.size, E.size)
                  ).astype(np.int64) + shift
    ip = np.flatnonzero((dec["ipver"] > 0) & (dec["kind"] != 2) & (l3 > 0))   # not RoCEv1
    v4 = ip[dec["ipver"][ip] == 4]
    if v4.size:                        # the whole header captured, options too
        ihl = field_at(views, o[v4] + l3[v4], H.IPV4, "IHL").astype(np.int64)
        v4 = v4[o[v4] + l3[v4] + np.maximum(ihl * 4, H.IPV4.size) <= end[v4]]
    v6 = ip[dec["ipver"][ip] == 6]
    v6 = v6[o[v6] + l3[v6] + H.IPV6.size <= end[v6]]
    udp_at = np.full(dec.size, -1, np.int64)     # RoCEv2 UDP headers (IPv4 options skipped)
    if v4.size:
        p = o[v4] + l3[v4]
        F = {n: field_at(views, p, H.IPV4, n) for n in ("IHL", "Protocol", "FragmentOffset", "MF")}
        udp = (F["Protocol"] == H.IP_PROTO_UDP) & (F["FragmentOffset"] == 0) & (F["MF"] == 0)
        udp_at[v4] = np.where(udp, p + F["IHL"].astype(np.int64) * 4, -1)
    if v6.size:
        p = o[v6] + l3[v6]
        udp = field_at(views, p, H.IPV6, "NextHeader") == H.IP_PROTO_UDP
        udp_at[v6] = np.where(udp, p + H.IPV6.size, -1)
    roce = np.flatnonzero((udp_at >= 0) & (udp_at + H.UDP.size <= end))
    roce = roce[field_at(views, udp_at[roce], H.UDP, "DestinationPort") == H.ROCEV2_UDP_PORT]
    udp_sum = {}                       # row -> list of (old, new) 16-bit words
    if v4.size:
        p = o[v4] + l3[v4]
        for name, table in (("SourceAddress", m.ipv4), ("DestinationAddress", m.ipv4)):
            old = field_at(views, p, H.IPV4, name)
            new, hit = _lookup(table, old)
            put(out, p[hit], H.IPV4, name, new[hit])
            _seen(stats, "ipv4", old[hit])
            udp_sum.setdefault("v4", []).append((v4, _words(old, 4), _words(new, 4)))
        for name, value in (("DSCP", m.dscp), ("ECN", m.ecn), ("TTL", m.ttl)):
            if value is not None:
                put(out, p, H.IPV4, name, value)
        ihl = field_at(views, p, H.IPV4, "IHL").astype(np.int64)
        put(out, p, H.IPV4, "HeaderChecksum", 0)
        total = np.zeros(p.size, np.int64)
        u2 = views(">u2")
        for k in range(int(ihl.max(initial=5)) * 2):
            total += np.where(k < ihl * 2, u2[np.minimum(p + 2 * k, u2.size - 1)], 0)
        put(out, p, H.IPV4, "HeaderChecksum", ~_fold(total) & 0xFFFF)
        stats["ipv4_checksums"] += p.size
    if v6.size:
        p = o[v6] + l3[v6]
        for name in ("SourceAddress", "DestinationAddress"):
            at = p + H.IPV6.slot(name).first_byte
            u8 = views(">u8")
            hi, lo = u8[at], u8[at + 8]
            nhi, nlo, hit = _lookup128(m.ipv6, hi, lo)
            _put128(out, p[hit], H.IPV6, name, nhi[hit], nlo[hit])
            stats.setdefault("mapped", set()).update(
                ("ipv6", (int(a) << 64) | int(b)) for a, b in set(zip(hi[hit], lo[hit])))
            udp_sum.setdefault("v6", []).append(
                (v6, _words(hi, 8) + _words(lo, 8), _words(nhi, 8) + _words(nlo, 8)))
        if m.dscp is not None or m.ecn is not None:
            tc = field_at(views, p, H.IPV6, "TrafficClass")
            dscp = tc >> np.uint64(2) if m.dscp is None else np.uint64(m.dscp)
            ecn = tc & np.uint64(3) if m.ecn is None else np.uint64(m.ecn)
            put(out, p, H.IPV6, "TrafficClass", (dscp << np.uint64(2)) | ecn)
        if m.ttl is not None:
            put(out, p, H.IPV6, "HopLimit", m.ttl)
    _ports_and_crc(out, views, o, caplen, data, src, dec, shift, roce, udp_at[roce], udp_sum, m,
                   stats)


def _fold(s: np.ndarray) -> np.ndarray:
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (s & 0xFFFF) + (s >> 16)


def _ports_and_crc(out, views, o, caplen, data, src, dec, shift, rows, udp, udp_sum, m, stats):
    """UDP source ports and checksums of ``rows`` (UDP headers at ``udp``, whole in the record),
    and the ICRC of those whose ICRC is in the record."""
    l3 = dec["l3"].astype(np.int64) + shift
    if rows.size == 0:
        return
    old_port = field_at(views, udp, H.UDP, "SourcePort")
    new_port, hit = _lookup(m.udp_sport, old_port)
    if m.udp_sport_offset:
        inr = (new_port >= PORT_LO)
        new_port = np.where(inr, PORT_LO + (new_port - PORT_LO + np.uint64(m.udp_sport_offset))
                            % np.uint64(PORT_SPAN), new_port)
    put(out, udp, H.UDP, "SourcePort", new_port)
    # ICRC by linearity over the changed bytes of the covered head
    ok = dec["complete"][rows] & (dec["end"][rows] + shift[rows] <= caplen[rows])
    r = rows[ok]
    icrc_words = None
    if r.size:
        kinds = np.where(dec["ipver"][r] == 4, 0, 1)
        new_reg = np.zeros(r.size, np.uint32)
        flat = CRC32.contributions(int(dec["end"].max()) + 64).reshape(-1)
        for k, name in enumerate(("ipv4", "ipv6")):
            s = np.flatnonzero(kinds == k)
            if s.size == 0:
                continue
            mask = HEADS[name][0]
            cols = np.arange(mask.size)
            rr = r[s]
            old_start = src[rr] + dec["l3"][rr].astype(np.int64)
            new_start = o[rr] + l3[rr]
            covered = dec["end"][rr].astype(np.int64) - 4 - dec["l3"][rr].astype(np.int64)
            delta = (data[old_start[:, None] + cols] | mask) ^ \
                (out[new_start[:, None] + cols] | mask)
            contrib = flat[(covered[:, None] - 1 - cols[None, :]) * 256 + delta]
            new_reg[s] = np.bitwise_xor.reduce(contrib, axis=1)
        at = o[r] + dec["end"][r].astype(np.int64) + shift[r] - 4
        u2 = views(">u2")
        before = [u2[at].astype(np.uint64), u2[at + 2].astype(np.uint64)]
        put_le32(out, at, views("<u4")[at] ^ new_reg)
        icrc_words = (r, before, [u2[at].astype(np.uint64), u2[at + 2].astype(np.uint64)])
        stats["icrc_updated"] += int((new_reg != 0).sum())
    # RFC 1624 eqn. 3: HC' = ~(~HC + sum(~m) + sum(m')) over the changed 16-bit words
    csum = field_at(views, udp, H.UDP, "Checksum").astype(np.int64)
    acc = np.zeros(rows.size, np.int64)
    acc += (~old_port.astype(np.int64) & 0xFFFF) + new_port.astype(np.int64)
    where = np.full(dec.size, -1, np.int64)
    where[rows] = np.arange(rows.size)
    if icrc_words is not None:                        # the UDP checksum covers the ICRC
        udp_sum.setdefault("icrc", []).append(icrc_words)
    for key in ("v4", "v6", "icrc"):
        for idx, old_w, new_w in udp_sum.get(key, []):
            j = where[idx]
            ok = j >= 0
            for a, b in zip(old_w, new_w):
                np.add.at(acc, j[ok], (~a[ok].astype(np.int64) & 0xFFFF) + b[ok].astype(np.int64))
    nz = csum != 0
    newc = ~_fold((~csum & 0xFFFF) + acc) & 0xFFFF
    newc = np.where(newc == 0, 0xFFFF, newc)
    put(out, udp[nz], H.UDP, "Checksum", newc[nz])


def put_le32(buf: np.ndarray, at: np.ndarray, v: np.ndarray) -> None:
    """Write uint32 ``v`` least-significant byte first (the ICRC's byte order) at ``at``."""
    v = v.astype(np.uint32)
    for j in range(4):
        buf[at + j] = ((v >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8)
