"""Scalar and vectorized frame building against the case frames and C3, C5, C7, C14."""
from __future__ import annotations

import numpy as np
import pytest

from tokenpcap.errors import EncodeError
from tokenpcap.records import PACKET_DTYPE, VERB_WRITE
from tokenpcap.wire import FrameBuilder, WireContext, build_frame, build_pfc_frame, crc, rdma, segment
from tokenpcap.wire.decode import decode_frame

from .cases import A_TO_B, SCAPY_VECTORS, ctx4, ctx6, ib_cases, pattern, row


@pytest.mark.parametrize("name", sorted(SCAPY_VECTORS))
def test_scapy_vectors_rebuilt_byte_for_byte(scapy_vectors, name):
    expected = {v["name"]: v["hex"] for v in scapy_vectors["vectors"]}[name]
    r, ctx = SCAPY_VECTORS[name]
    assert build_frame(r, ctx).hex() == expected
    assert FrameBuilder(ctx).frames(np.array([r]))[0].hex() == expected


def test_every_scapy_vector_with_a_good_icrc_is_covered(scapy_vectors):
    good = {v["name"] for v in scapy_vectors["vectors"] if v.get("icrc_ok")}
    assert good == set(SCAPY_VECTORS)


def test_same_params_in_one_batch(scapy_vectors):
    expected = {v["name"]: v["hex"] for v in scapy_vectors["vectors"]}
    names = [n for n, (_, c) in SCAPY_VECTORS.items() if c.payload_pattern is not None
             and (c.pattern[:8] == ctx4().pattern[:8]).all() and c.ip_version == 4 and not c.vlan]
    assert len(names) >= 5
    rows = np.array([SCAPY_VECTORS[n][0] for n in names])
    assert [f.hex() for f in FrameBuilder(ctx4()).frames(rows)] == [expected[n] for n in names]


def test_native_ib_frames_rebuilt_byte_for_byte(hw_frames, scapy_vectors):
    for name, (r, ctx, expected) in ib_cases(hw_frames, scapy_vectors).items():
        assert build_frame(r, ctx).hex() == expected, name
        assert FrameBuilder(ctx).frames(np.array([r]))[0].hex() == expected, name


def test_pfc_frames(scapy_vectors):
    vec = {v["name"]: v["hex"] for v in scapy_vectors["vectors"]}
    src = bytes([2, 0, 0, 0, 0, 0x0B])
    assert build_pfc_frame(src, 1 << 3, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]).hex() == vec["pfc_xoff_prio3"]
    assert build_pfc_frame(src, 1 << 3, [0] * 8).hex() == vec["pfc_xon_prio3"]
    with pytest.raises(EncodeError, match="PFC.Time3: got 65536"):
        build_pfc_frame(src, 8, [0, 0, 0, 65536, 0, 0, 0, 0])
    with pytest.raises(EncodeError, match="pause_quanta: got 7 values, expected 8"):
        build_pfc_frame(src, 8, [0] * 7)


def test_c3_five_byte_send_only():
    ctx = ctx4(pattern(b"abcde" + b"\xee" * 100))
    frame = build_frame(row(opcode=0x04, payload_bytes=5, **A_TO_B), ctx)
    d = decode_frame(frame)
    assert len(frame) == 66
    assert d["IPv4"]["TotalLength"] == 52 and d["UDP"]["Length"] == 32
    assert d["BTH"]["PadCnt"] == 3 and d.payload_bytes == 5
    assert frame[d.payload_offset:d.payload_offset + 8] == b"abcde\0\0\0"
    assert crc.check_ethernet_frame(frame).ok
    broken = bytearray(frame)
    broken[d.payload_offset + 6] = 1             # the pad is covered by the ICRC
    assert not crc.check_ethernet_frame(bytes(broken)).ok


def test_c5_c7_write_of_10000_bytes():
    seg = segment(10000, 4096, VERB_WRITE)
    p = np.zeros(3, PACKET_DTYPE)
    p["opcode"], p["payload_bytes"], p["pad"] = seg.opcode, seg.payload_bytes, seg.pad
    p["psn"] = (0xFFFFFE + np.arange(3)) & 0xFFFFFF          # C6: across the wrap
    p["reth_len"], p["dest_qp"], p["peer_nic"], p["udp_sport"] = 10000, 0x123, 1, 0xC000
    p["ack_req"][-1] = 1
    frames = FrameBuilder(ctx4()).frames(p)
    assert [len(f) for f in frames] == [4170, 4154, 1866]
    decoded = [decode_frame(f) for f in frames]
    assert [d["BTH"]["PSN"] for d in decoded] == [0xFFFFFE, 0xFFFFFF, 0]
    assert decoded[0]["RETH"]["DMALen"] == 10000 and "RETH" not in decoded[1] and "RETH" not in decoded[2]
    assert decoded[0]["UDP"]["Length"] == 4136
    for d in decoded:   # C7: payload = UDP length - 8 - 12 - ext - pad - 4
        ext = 16 if "RETH" in d else 0
        assert d.payload_bytes == d["UDP"]["Length"] - 8 - 12 - ext - d.pad - 4
        assert d.icrc_ok
    assert [d.payload_bytes for d in decoded] == [4096, 4096, 1808]
    assert [d["BTH"]["AckReq"] for d in decoded] == [0, 0, 1]


def test_c14_ipv6_traffic_class_and_flow_label():
    for dscp, ecn, fl, first4 in ((26, 2, 0x12345, "66a12345"), (26, 2, 88000, "66a157c0"),
                                  (46, 0, 0xFFFFF, "6b8fffff")):
        ctx = WireContext(ip_version=6, mac=np.zeros((2, 6), np.uint8), ipv6=np.zeros((2, 16), np.uint8),
                          dscp=dscp, ecn=ecn, flow_label=fl)
        r = row(opcode=0x11, **A_TO_B)
        assert build_frame(r, ctx)[14:18].hex() == first4
        assert FrameBuilder(ctx).frames(np.array([r]))[0][14:18].hex() == first4


def test_flow_label_and_udp_port_derived_from_the_qp_pair():
    ctx = WireContext(ip_version=6, mac=np.zeros((2, 6), np.uint8), ipv6=np.zeros((2, 16), np.uint8))
    r = row(opcode=0x11, **A_TO_B)
    d = decode_frame(build_frame(r, ctx))
    assert d["IPv6"]["FlowLabel"] == 0xED7C3      # Linux rdma_calc_flow_label(0xc11, 0xd2a)
    assert d["UDP"]["SourcePort"] == int(rdma.rocev2_udp_sport(0xC11, 0xD2A)) == 0xD7F8


def test_cnp_as_nics_send_it():
    ctx = ctx4(vlan_id=5)
    d = decode_frame(build_frame(row(opcode=0x81, becn=0, **A_TO_B), ctx))
    assert d["BTH"]["BECN"] == 1 and d["BTH"]["MigReq"] == 0 and d["CNP"]["Reserved"] == 0
    assert d["IPv4"]["DSCP"] == 48 and d["802.1Q"]["PCP"] == 6
    data = decode_frame(build_frame(row(opcode=0x0A, payload_bytes=4, **A_TO_B), ctx))
    assert data["IPv4"]["DSCP"] == 26 and data["802.1Q"]["PCP"] == 3 and data["IPv4"]["DF"] == 1


def test_short_frames_are_padded_to_60_bytes_after_the_icrc():
    r = row(opcode=0x04, payload_bytes=0, **A_TO_B)
    frame = build_frame(r, ctx4())
    assert len(frame) == 60 and frame[-2:] == b"\0\0"
    assert crc.check_ethernet_frame(frame).ok
    assert FrameBuilder(ctx4()).frames(np.array([r]))[0] == frame


@pytest.mark.parametrize("field,value,match", [
    ("psn", 1 << 24, r"BTH\.PSN: got 16777216"),
    ("opcode", 0x20, r"BTH\.OpCode: got 0x20"),
    ("pad", 1, r"pad: got 1 for 8 payload bytes, expected 0"),
    ("nic", 5, r"nic/peer_nic: got 5/1, expected 0\.\.1"),
])
def test_scalar_encode_errors(field, value, match):
    r = row(opcode=0x0A, payload_bytes=8, **A_TO_B)
    r[field] = value
    with pytest.raises(EncodeError, match=match):
        build_frame(r, ctx4())


def test_payload_errors():
    with pytest.raises(EncodeError, match="payload_bytes: got 4 for opcode 0x11"):
        build_frame(row(opcode=0x11, payload_bytes=4, **A_TO_B), ctx4())
    with pytest.raises(EncodeError, match="payload: got 3 bytes, expected payload_bytes = 8"):
        build_frame(row(opcode=0x0A, payload_bytes=8, **A_TO_B), ctx4(), payload=b"abc")


@pytest.mark.parametrize("kw,match", [
    (dict(transport="fc"), "WireContext.transport: got 'fc'"),
    (dict(dscp=64), r"WireContext.dscp: got 64, expected an integer 0\.\.63"),
    (dict(vlan_id=4096), "WireContext.vlan_id: got 4096"),
    (dict(mac=np.zeros((2, 5), np.uint8)), r"WireContext.mac: got uint8 array of shape \(2, 5\)"),
    (dict(ipv4=None), "WireContext.ipv4: got None"),
    (dict(ip_version=6), "WireContext.ipv6: got None"),
    (dict(payload_pattern=np.zeros(10, np.uint8)), "WireContext.payload_pattern"),
])
def test_context_errors(kw, match):
    args = dict(mac=np.zeros((2, 6), np.uint8), ipv4=np.zeros((2, 4), np.uint8))
    args.update(kw)
    with pytest.raises(EncodeError, match=match):
        WireContext(**args)


def test_ipv6_udp_checksum_can_be_left_zero():
    r, ctx = SCAPY_VECTORS["ipv6_rc_write_only_udpcsum0"]
    assert decode_frame(build_frame(r, ctx))["UDP"]["Checksum"] == 0
    assert decode_frame(build_frame(r, ctx6(ctx.pattern)))["UDP"]["Checksum"] == 0xF2E0
