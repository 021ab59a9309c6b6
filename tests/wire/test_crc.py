"""ICRC/VCRC/checksum references against the case frames (scapy-built and captured) and C1, C2, C4."""
from __future__ import annotations

import ipaddress
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import DecodeError
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import WireContext, build_frame, crc
from tokenpcap.wire.linear import CRC16_VCRC, CRC32


def _vectors(scapy_vectors):
    return [v for v in scapy_vectors["vectors"] if "icrc_expected" in v]


def test_every_scapy_vector_icrc_and_the_bad_one_is_caught(scapy_vectors):
    vecs = _vectors(scapy_vectors)
    assert len(vecs) == 14
    for v in vecs:
        check = crc.check_ethernet_frame(bytes.fromhex(v["hex"]))
        assert check.icrc_computed == int(v["crc32_masked"], 16), v["name"]
        assert check.icrc_wire == int.from_bytes(bytes.fromhex(v["icrc_wire"]), "little")
        assert check.ok is v["icrc_ok"], v["name"]
    bad = {v["name"]: v for v in vecs}["rc_write_last_BAD_ICRC"]
    assert not crc.check_ethernet_frame(bytes.fromhex(bad["hex"])).ok


def test_rocev1_frames_verify_with_grh_masking(hw_frames):
    for name in ("rocev1_rc_write_only", "rocev1_rc_ack"):
        frame = bytes.fromhex(hw_frames[name]["hex"])
        check = crc.check_ethernet_frame(frame)
        assert check.ok and check.icrc_wire.to_bytes(4, "little").hex() == hw_frames[name]["icrc_wire"]


def test_c4_native_ib_frames_icrc_and_vcrc(hw_frames, scapy_vectors):
    frames = [(f["hex"], f["icrc_wire"], f["vcrc_wire"]) for f in hw_frames["native_ib"]]
    gen = scapy_vectors["native_ib_generated"]
    frames.append((gen["hex"], gen["icrc_wire"], gen["vcrc_wire"]))
    lnhs = set()
    for hexs, icrc_wire, vcrc_wire in frames:
        packet = bytes.fromhex(hexs)
        lnhs.add(packet[1] & 3)
        check = crc.check_ib_packet(packet)
        assert check.ok
        assert check.icrc_computed.to_bytes(4, "little").hex() == icrc_wire
        assert check.vcrc_computed.to_bytes(2, "little").hex() == vcrc_wire
        # a flipped bit anywhere is caught by the VCRC
        broken = bytearray(packet)
        broken[9] ^= 0x10
        assert not crc.check_ib_packet(bytes(broken)).ok
    assert lnhs == {2, 3}


def test_c4_local_ib_masks_only_vl_and_bth_byte_4(hw_frames):
    packet = bytearray(bytes.fromhex(hw_frames["native_ib"][0]["hex"]))
    base = crc.icrc_of_ib(bytes(packet))
    changed = bytearray(packet)
    changed[0] ^= 0xF0           # VL: masked
    changed[12] ^= 0xC0          # BTH FECN/BECN: masked
    assert crc.icrc_of_ib(bytes(changed)) == base
    for pos, bit in ((0, 0x0F), (1, 0xF0), (2, 1), (6, 1)):   # LVer, SL, DLID, SLID: covered
        changed = bytearray(packet)
        changed[pos] ^= bit
        assert crc.icrc_of_ib(bytes(changed)) != base


def test_c1_masked_bytes_are_exactly_the_listed_fields(scapy_vectors):
    frame = bytes.fromhex(scapy_vectors["vectors"][0]["hex"])
    masked = crc.icrc_masked_bytes(frame)
    expected = bytearray(b"\xff" * 8 + frame[14:-4])
    for off, n in ((1, 1), (8, 1), (10, 2), (26, 2), (32, 1)):   # TOS, TTL, IP csum, UDP csum, BTH byte 4
        expected[8 + off:8 + off + n] = b"\xff" * n
    assert masked == bytes(expected)
    assert zlib.crc32(masked) == int(scapy_vectors["vectors"][0]["crc32_masked"], 16)


def _ctx4(**kw):
    return WireContext(mac=np.array([[2, 0, 0, 0, 0, 10], [2, 0, 0, 0, 0, 11], [2, 0, 0, 0, 0, 12]], np.uint8),
                       ipv4=np.array([[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3]], np.uint8), **kw)


def _row(**kw):
    r = np.zeros(1, PACKET_DTYPE)[0]
    for k, v in {"opcode": 0x0A, "payload_bytes": 64, "dest_qp": 0x123, "psn": 7, "udp_sport": 0xC123,
                 "peer_nic": 1, "reth_len": 64, **kw}.items():
        r[k] = v
    return r


@settings(max_examples=50, deadline=None)
@given(dscp=st.integers(0, 63), ecn=st.integers(0, 3), ttl=st.integers(0, 255))
def test_c1_dscp_ecn_ttl_do_not_change_the_icrc(dscp, ecn, ttl):
    ref = build_frame(_row(), _ctx4())
    frame = build_frame(_row(), _ctx4(dscp=dscp, ecn=ecn, ttl=ttl))
    assert frame[-4:] == ref[-4:]
    assert crc.check_ethernet_frame(frame).ok


def test_c1_addresses_and_ip_id_change_the_icrc():
    ref = build_frame(_row(), _ctx4())[-4:]
    assert build_frame(_row(peer_nic=2), _ctx4())[-4:] != ref
    assert build_frame(_row(ip_id=1), _ctx4())[-4:] != ref
    # marking CE on the wire (ECN 3) keeps the ICRC valid
    frame = bytearray(build_frame(_row(), _ctx4()))
    frame[15] |= 3
    assert crc.check_ethernet_frame(bytes(frame)).ok


def _ctx6(**kw):
    gids = np.array([list(ipaddress.IPv6Address(a).packed) for a in ("fd00::1", "fd00::2", "fd00::3")], np.uint8)
    return WireContext(ip_version=6, mac=np.zeros((3, 6), np.uint8), ipv6=gids,
                       payload_pattern=np.full(4096, 0x11, np.uint8), mig_req=0, **kw)


@settings(max_examples=40, deadline=None)
@given(tc=st.integers(0, 255), fl=st.integers(0, 0xFFFFF), hl=st.integers(0, 255))
def test_c2_ipv6_icrc_whatever_tc_flow_label_hop_limit(tc, fl, hl):
    # IPv6 RC SEND ONLY of 8 bytes 0x11, fd00::1 -> fd00::2, UDP 0xC123 -> 4791, DestQP 0x123, PSN 7
    # (BTH flag bits zero, as in the case's scapy build).
    ctx = _ctx6(dscp=tc >> 2, ecn=tc & 3, flow_label=fl, ttl=hl)
    frame = build_frame(_row(opcode=0x04, payload_bytes=8), ctx)
    assert frame[-4:].hex() == "c3e4c1ba"
    assert frame[14:18] == bytes([0x60 | tc >> 4, (tc & 15) << 4 | fl >> 16, (fl >> 8) & 0xFF, fl & 0xFF])
    assert frame[21] == hl


def test_c2_other_destination():
    frame = build_frame(_row(opcode=0x04, payload_bytes=8, peer_nic=2), _ctx6(flow_label=0))
    assert crc.icrc(frame) == 0xD9C63DE7


def test_ipv4_and_udp6_checksums_match_the_vectors(scapy_vectors):
    vecs = {v["name"]: bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]}
    for name, frame in vecs.items():
        if frame[12:14] == b"\x08\x00":
            hdr = frame[14:24] + b"\0\0" + frame[26:34]
            assert crc.ipv4_checksum(hdr) == int.from_bytes(frame[24:26], "big"), name
    f6 = vecs["ipv6_rc_write_only_udpcsum"]
    udp = f6[54:60] + b"\0\0" + f6[62:]
    assert crc.udp_checksum_ipv6(f6[22:38], f6[38:54], udp) == 0xF2E0


def test_vcrc_is_crc16_poly_0x100b():
    # CRC-16 with polynomial 0x100B reflected, init/xorout 0xFFFF: the residue property of a
    # reflected CRC: appending the (un-xored) CRC LSB first gives a constant register.
    data = bytes(range(40))
    v = crc.vcrc16(data)
    assert crc.vcrc16(data + (v ^ 0xFFFF).to_bytes(2, "little")) ^ 0xFFFF == 0
    assert CRC16_VCRC.compute(data) == v


@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=0, max_size=300), start=st.integers(0, 2**32 - 1))
def test_linear_crc_engine_equals_zlib(data, start):
    assert CRC32.compute(data) == zlib.crc32(data)
    # R(d, r0) = A^n r0 ^ XOR_j C[n-1-j][d_j]
    n = len(data)
    c = CRC32.contributions(max(n, 1))
    reg = CRC32.shift(np.array([start], np.uint32), np.array([n]))[0] if n >= 4 or n == 0 else None
    if reg is not None:
        for j, b in enumerate(data):
            reg ^= c[n - 1 - j][b]
        assert int(reg) == CRC32.register(data, start) == zlib.crc32(data, start ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def test_prefix_registers_equal_zlib():
    pat = np.random.default_rng(3).integers(0, 256, 300, dtype=np.uint8)
    regs = CRC32.prefix_registers(pat)
    for p in (0, 1, 2, 3, 4, 5, 13, 299, 300):
        data = pat[:p].tobytes() + b"\0" * ((-p) & 3)
        assert int(regs[p]) == zlib.crc32(data, 0xFFFFFFFF) ^ 0xFFFFFFFF


def test_decode_errors():
    with pytest.raises(DecodeError, match="EtherType"):
        crc.icrc(bytes(60))
    with pytest.raises(DecodeError, match="LNH"):
        crc.icrc_of_ib(bytes.fromhex("0000") + bytes([0, 4, 0, 7]) + bytes(24))
    with pytest.raises(DecodeError, match="Ethernet at byte 0"):
        crc.icrc(bytes(10))
