"""readdress_patch: the vectorized rewrite of one record batch, checked frame by frame against
checksums computed here from scratch in plain Python.

Oracles (independent of tokenpcap's CRC tables and of its incremental updates):

* IPv4 header checksum and UDP checksum: the one's-complement sum of RFC 1071 over the header,
  and over the IPv4/IPv6 pseudo-header and the whole UDP datagram (RFC 768, RFC 8200 8.1).
* ICRC: ``zlib.crc32`` over 8 bytes of 0xFF and the packet from the IP header to the ICRC with
  the variant fields set to 1s (IBA Vol 1 Annex A17.3.3: IPv4 TOS, TTL, header checksum; IPv6
  traffic class, flow label, hop limit; the UDP checksum; BTH resv8a), sent least-significant
  byte first. The oracle is first held against the scapy-built vectors of tests/cases.
* :func:`put` and :func:`copy_ranges` against Python integers and slices.
"""
from __future__ import annotations

import ipaddress
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analysis.test_inspect import write
from tokenpcap.analysis.decode import decode_batch
from tokenpcap.analysis.readdress import Mapping
from tokenpcap.analysis.readdress_patch import copy_ranges, patch_batch, put
from tokenpcap.pcap.reader import open_capture
from tokenpcap.wire import headers as H

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402


# --------------------------------------------------------------------------------------------
# the oracles

def ones_sum(data: bytes) -> int:
    """RFC 1071: the 16-bit one's-complement sum of ``data`` (odd length padded with a zero)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def l3_offset(frame: bytes) -> int:
    return 18 if frame[12:14] == b"\x81\x00" else 14


def ipv4_checksum(header: bytes) -> int:
    """The header checksum a header with its checksum field zeroed must carry."""
    return ~ones_sum(header[:10] + b"\0\0" + header[12:]) & 0xFFFF


def udp_checksum(frame: bytes) -> int:
    """The UDP checksum of ``frame``'s datagram (IPv4 or IPv6 pseudo-header), 0 sent as 0xFFFF."""
    l3 = l3_offset(frame)
    if frame[l3] >> 4 == 4:
        ihl = (frame[l3] & 0xF) * 4
        udp = frame[l3 + ihl:]
        pseudo = frame[l3 + 12:l3 + 20] + struct.pack(">BBH", 0, 17, len(udp))
    else:
        udp = frame[l3 + 40:]
        pseudo = frame[l3 + 8:l3 + 40] + struct.pack(">IxxxB", len(udp), 17)
    c = ~ones_sum(pseudo + udp[:6] + b"\0\0" + udp[8:]) & 0xFFFF
    return c or 0xFFFF


def icrc(frame: bytes) -> bytes:
    """The RoCEv2 ICRC of ``frame`` (IBA A17.3.3), as it is sent (little-endian)."""
    l3 = l3_offset(frame)
    pkt = bytearray(frame[l3:-4])
    if pkt[0] >> 4 == 4:
        ihl = (pkt[0] & 0xF) * 4
        for i in (1, 8, 10, 11):                      # TOS, TTL, header checksum
            pkt[i] = 0xFF
        udp = ihl
    else:
        pkt[0] |= 0x0F                                 # traffic class, flow label
        pkt[1:4] = b"\xff\xff\xff"
        pkt[7] = 0xFF                                  # hop limit
        udp = 40
    pkt[udp + 6:udp + 8] = b"\xff\xff"                # UDP checksum
    pkt[udp + 8 + 4] = 0xFF                            # BTH resv8a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(pkt)))


def test_the_icrc_oracle_reproduces_the_scapy_vectors(scapy_vectors):
    checked = 0
    for v in scapy_vectors["vectors"]:
        f = bytes.fromhex(v["hex"])
        if "icrc_expected" not in v:                   # PFC: no ICRC
            continue
        assert icrc(f).hex() == v["icrc_expected"], v["name"]
        checked += 1
        l3 = l3_offset(f)
        if f[l3] >> 4 == 4:
            assert ipv4_checksum(f[l3:l3 + 20]) == struct.unpack(">H", f[l3 + 10:l3 + 12])[0]
        udp_at = l3 + (20 if f[l3] >> 4 == 4 else 40)
        stored = struct.unpack(">H", f[udp_at + 6:udp_at + 8])[0]
        assert stored in (0, udp_checksum(f)), v["name"]
    assert checked >= 12


# --------------------------------------------------------------------------------------------
# frames and one batch through patch_batch

def roce_frame(*, v6: bool, vlan: int | None, sport: int, payload: bytes, tos: int, ttl: int,
               udp_csum: bool, psn: int) -> bytes:
    """A RoCEv2 RDMA WRITE Only built by scapy, with its ICRC, UDP checksum (when
    ``udp_csum``; else 0) and IPv4 header checksum set by the oracles above."""
    eth = Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan, prio=3)
    ip = (IPv6(src="fd00::1", dst="fd00::2", tc=tos, hlim=ttl, fl=0x12345) if v6 else
          IP(src="10.0.0.1", dst="10.0.0.2", tos=tos, ttl=ttl, flags="DF", id=7))
    pad = (-len(payload)) & 3
    f = bytearray(bytes(eth / ip / UDP(sport=sport, dport=4791, chksum=0) /
                        BTH(opcode=0x0A, migreq=1, padcount=pad, dqpn=0x123, psn=psn) /
                        Raw(bytes(16) + payload + b"\0" * pad)))   # RETH, payload, pad, ICRC
    f[-4:] = icrc(bytes(f))
    l3 = l3_offset(bytes(f))
    udp_at = l3 + (40 if v6 else 20)
    if udp_csum:
        f[udp_at + 6:udp_at + 8] = struct.pack(">H", udp_checksum(bytes(f)))
    if not v6:
        f[l3 + 10:l3 + 12] = struct.pack(">H", ipv4_checksum(bytes(f[l3:l3 + 20])))
    return bytes(f)


def run_patch(tmp: Path, frames: list[bytes], m: Mapping, snaplen: int = 262144):
    """The frames written as a pcap, read, decoded and patched as readdress does: (output frames
    as captured, their wire lengths, stats)."""
    path = write(tmp / "in.pcap", frames)
    cap = open_capture(path)
    rec = cap.read()
    dec = decode_batch(cap.data, rec, cap.views)
    stats = {"packets": 0, "icrc_updated": 0, "ipv4_checksums": 0, "truncated": 0}
    plan = patch_batch(cap.data, rec, dec, m, stats, snaplen=snaplen)
    offsets = np.concatenate([[0], np.cumsum(plan.caplen)[:-1]]).astype(np.int64)
    out = np.zeros(int(plan.caplen.sum()), np.uint8)
    plan.fill(out, offsets, plan.caplen)
    got = [out[o:o + c].tobytes() for o, c in zip(offsets.tolist(), plan.caplen.tolist())]
    return got, plan.new_len.tolist(), stats


def mapping(*, vlan, dscp, ecn, ttl, offset) -> Mapping:
    m = Mapping(vlan=vlan, pcp=5 if vlan not in (None, -1) else None, dscp=dscp, ecn=ecn,
                ttl=ttl, udp_sport_offset=offset)
    for old, new in (("10.0.0.1", "192.168.77.1"), ("10.0.0.2", "172.16.9.250"),
                     ("fd00::1", "2001:db8::71"), ("02:00:00:00:00:0b", "b8:ce:f6:00:00:0b")):
        m.add_address(old, new)
    return m


def check_frame(before: bytes, after: bytes, m: Mapping) -> None:
    """``after`` is ``before`` under ``m``: mapped fields, every checksum and the ICRC equal to
    the oracles', the BTH and payload untouched."""
    l3a, l3b = l3_offset(after), l3_offset(before)
    if m.vlan == -1:
        assert l3a == 14
    elif m.vlan is not None:
        assert l3a == 18 and struct.unpack(">H", after[14:16])[0] == (5 << 13) | m.vlan
    else:
        assert after[:l3a][12:] == before[:l3b][12:]
    assert after[:6] == bytes.fromhex("b8cef600000b") and after[6:12] == before[6:12]
    v4 = after[l3a] >> 4 == 4
    if v4:
        hdr = after[l3a:l3a + 20]
        assert ipaddress.ip_address(hdr[12:16]) == ipaddress.ip_address("192.168.77.1")
        assert ipaddress.ip_address(hdr[16:20]) == ipaddress.ip_address("172.16.9.250")
        assert struct.unpack(">H", hdr[10:12])[0] == ipv4_checksum(hdr)
        tos, ttl = hdr[1], hdr[8]
    else:
        hdr = after[l3a:l3a + 40]
        assert ipaddress.ip_address(hdr[8:24]) == ipaddress.ip_address("2001:db8::71")
        assert hdr[24:40] == before[l3b + 24:l3b + 40]            # fd00::2 is not mapped
        tos, ttl = ((hdr[0] & 0xF) << 4) | (hdr[1] >> 4), hdr[7]
        assert (hdr[1] & 0xF, hdr[2:4]) == (before[l3b + 1] & 0xF, before[l3b + 2:l3b + 4])
    old_tos = before[l3b + 1] if v4 else ((before[l3b] & 0xF) << 4) | (before[l3b + 1] >> 4)
    old_ttl = before[l3b + 8] if v4 else before[l3b + 7]
    assert tos >> 2 == (old_tos >> 2 if m.dscp is None else m.dscp)
    assert tos & 3 == (old_tos & 3 if m.ecn is None else m.ecn)
    assert ttl == (old_ttl if m.ttl is None else m.ttl)
    ua, ub = l3a + (20 if v4 else 40), l3b + (20 if v4 else 40)
    old_sport = struct.unpack(">H", before[ub:ub + 2])[0]
    want = 0xC000 + (old_sport - 0xC000 + (m.udp_sport_offset or 0)) % 0x4000 \
        if old_sport >= 0xC000 else old_sport
    assert struct.unpack(">H", after[ua:ua + 2])[0] == want
    assert after[ua + 2:ua + 6] == before[ub + 2:ub + 6]              # port 4791, length
    csum = struct.unpack(">H", after[ua + 6:ua + 8])[0]
    assert csum == (udp_checksum(after) if before[ub + 6:ub + 8] != b"\0\0" else 0)
    assert after[ua + 8:-4] == before[ub + 8:-4]                      # BTH, RETH, payload
    assert after[-4:] == icrc(after)


FRAME = st.builds(
    dict, v6=st.booleans(), vlan=st.one_of(st.none(), st.integers(1, 4094)),
    sport=st.one_of(st.integers(0xC000, 0xFFFF), st.integers(1, 0xBFFF)),
    payload=st.binary(max_size=300), tos=st.integers(0, 255), ttl=st.integers(1, 255),
    udp_csum=st.booleans(), psn=st.integers(0, 0xFFFFFF))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(FRAME, min_size=1, max_size=8),
       vlan=st.one_of(st.none(), st.just(-1), st.integers(1, 4094)),
       dscp=st.one_of(st.none(), st.integers(0, 63)), ecn=st.one_of(st.none(), st.integers(0, 3)),
       ttl=st.one_of(st.none(), st.integers(1, 255)),
       offset=st.one_of(st.none(), st.integers(1, 0x3FFF)))
def test_every_patched_frame_equals_the_oracles(tmp_path_factory, frames, vlan, dscp, ecn, ttl,
                                                offset):
    """Any batch of IPv4/IPv6, tagged/untagged RoCEv2 frames, with or without a UDP checksum,
    under any mapping of addresses, tag, marking and ports."""
    before = [roce_frame(**f) for f in frames]
    m = mapping(vlan=vlan, dscp=dscp, ecn=ecn, ttl=ttl, offset=offset)
    after, wire, stats = run_patch(tmp_path_factory.mktemp("p"), before, m)
    for b, a, n in zip(before, after, wire):
        shift = 4 if vlan not in (None, -1) and l3_offset(b) == 14 else \
            -4 if vlan == -1 and l3_offset(b) == 18 else 0
        assert len(a) == n == len(b) + shift
        check_frame(b, a, m)
    assert stats["ipv4_checksums"] == sum(not f["v6"] for f in frames)
    assert stats["truncated"] == 0


def test_a_record_cut_before_its_icrc_gets_its_headers_patched_and_the_rest_copied(tmp_path):
    """snaplen 80: the IPv4, UDP and BTH headers are in the record, the ICRC is not; the header
    checksum is repaired, the bytes kept are the rewritten frame's, the wire length is kept."""
    m = mapping(vlan=100, dscp=10, ecn=1, ttl=17, offset=5)
    full = [roce_frame(v6=v6, vlan=None, sport=0xC123, payload=bytes(range(200)), tos=0x68,
                       ttl=64, udp_csum=False, psn=9) for v6 in (False, True)]
    (tmp_path / "whole").mkdir()
    whole, _, _ = run_patch(tmp_path / "whole", full, m)
    cut, wire, stats = run_patch(tmp_path, full, m, snaplen=80)
    assert stats["truncated"] == 2 and stats["icrc_updated"] == 0
    for f, w, c, n in zip(full, whole, cut, wire):
        assert n == len(f) + 4 and len(c) == 80
        assert c == w[:80]                          # the same bytes as the uncut rewrite
    hdr = cut[0][18:38]
    assert struct.unpack(">H", hdr[10:12])[0] == ipv4_checksum(hdr)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(h, f.name) for h in (H.ETHERNET, H.DOT1Q, H.IPV4, H.IPV6, H.UDP, H.BTH)
                        for f in h.fields if f.bits <= 64]),
       st.integers(0, 2**64 - 1), st.binary(min_size=80, max_size=80), st.integers(0, 20))
def test_put_writes_exactly_the_field_bits(hf, value, buf, pos):
    """Against Python integers: the header's bytes as one big-endian integer, the field's bits
    cleared and set to ``value`` masked to its width; every other bit as it was."""
    header, name = hf
    s = header.slot(name)
    out = np.frombuffer(buf, np.uint8).copy()
    put(out, np.array([pos]), header, name, value)
    a, n = pos + s.first_byte, s.nbytes
    mask = ((1 << s.field.bits) - 1) << s.shift
    old = int.from_bytes(buf[a:a + n], "big")
    new = (old & ~mask) | ((value << s.shift) & mask)
    assert out.tobytes() == buf[:a] + new.to_bytes(n, "big") + buf[a + n:]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_copy_ranges_equals_a_slice_per_range(data):
    src = np.frombuffer(data.draw(st.binary(min_size=1, max_size=200)), np.uint8)
    lengths = data.draw(st.lists(st.integers(0, min(src.size, 40)), min_size=1, max_size=8))
    starts = [data.draw(st.integers(0, src.size - n)) for n in lengths]
    dst = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)   # disjoint ranges
    out = np.zeros(max(sum(lengths), 1), np.uint8)
    copy_ranges(out, dst, src, np.array(starts, np.int64), np.array(lengths, np.int64))
    want = bytearray(out.size)
    for d, s0, n in zip(dst.tolist(), starts, lengths):
        want[d:d + n] = src[s0:s0 + n].tobytes()
    assert out.tobytes() == bytes(want)
