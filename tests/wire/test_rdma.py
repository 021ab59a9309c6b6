"""Opcode table, segmentation at PMTU and frame lengths against C3, C5, C7 and the case frames."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import EncodeError
from tokenpcap.records import VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.wire import rdma
from tokenpcap.wire.rdma import (
    ACKNOWLEDGE, CNP, OPCODES, PMTUS, READ_REQUEST, READ_RESPONSE_ONLY, SEND_ONLY, UD_SEND_ONLY,
    WRITE_FIRST, WRITE_LAST, WRITE_LAST_IMM, WRITE_MIDDLE, WRITE_ONLY, WRITE_ONLY_IMM, frame_bytes,
    packets_per_message, segment, segment_many,
)


def test_opcode_table_matches_ibta_table_38():
    # IBTA vol.1 Table 38: which extended headers follow the BTH.
    names = {code: [h.name for h in o.ext] for code, o in OPCODES.items()}
    assert names[0x00] == names[0x01] == names[0x02] == names[0x04] == []
    assert names[0x03] == names[0x05] == ["ImmDt"]
    assert names[0x06] == ["RETH"] and names[0x07] == names[0x08] == []
    assert names[0x09] == ["ImmDt"] and names[0x0A] == ["RETH"] and names[0x0B] == ["RETH", "ImmDt"]
    assert names[0x0C] == ["RETH"] and not OPCODES[0x0C].payload
    assert names[0x0D] == names[0x0F] == names[0x10] == ["AETH"] and names[0x0E] == []
    assert names[0x11] == ["AETH"] and not OPCODES[0x11].payload
    assert names[0x81] == ["CNP"] and OPCODES[0x81].ext_bytes == 16
    assert names[0x64] == ["DETH"]
    assert rdma.EXT_BYTES[0x20] == -1  # not an opcode


# --- C5: RDMA WRITE at the path MTU -------------------------------------------------------------

def test_c5_10000_bytes_at_4096():
    s = segment(10000, 4096, VERB_WRITE)
    assert s.opcode.tolist() == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST]
    assert s.payload_bytes.tolist() == [4096, 4096, 1808]
    assert s.pad.tolist() == [0, 0, 0]
    assert frame_bytes(s.opcode, s.payload_bytes).tolist() == [4170, 4154, 1866]


def test_c5_exact_multiple_has_no_middle_and_no_empty_trailer():
    s = segment(8192, 4096, VERB_WRITE)
    assert s.opcode.tolist() == [WRITE_FIRST, WRITE_LAST]
    assert s.payload_bytes.tolist() == [4096, 4096]


def test_c5_1025_at_1024_pads_the_last():
    s = segment(1025, 1024, VERB_WRITE)
    assert s.opcode.tolist() == [WRITE_FIRST, WRITE_LAST]
    assert s.payload_bytes.tolist() == [1024, 1]
    assert s.pad.tolist() == [0, 3]


def test_c5_512k_is_128_packets_and_small_is_only():
    assert len(segment(512 * 1024, 4096, VERB_WRITE).opcode) == 128
    assert packets_per_message(np.array([512 * 1024]), 4096).tolist() == [128]
    for size in (0, 1, 4096):
        assert segment(size, 4096, VERB_WRITE).opcode.tolist() == [WRITE_ONLY]
    assert segment(4096, 4096, VERB_WRITE_IMM).opcode.tolist() == [WRITE_ONLY_IMM]
    assert segment(4097, 4096, VERB_WRITE_IMM).opcode.tolist() == [WRITE_FIRST, WRITE_LAST_IMM]
    assert segment(9000, 4096, VERB_SEND).opcode.tolist() == [0x00, 0x01, 0x02]


def test_c5_reth_only_on_first_and_only_immdt_only_on_last():
    ops = segment_many(np.array([10000, 100, 9000]), 4096, np.array([VERB_WRITE_IMM] * 3)).opcode
    assert rdma.HAS_RETH[ops].tolist() == [True, False, False, True, True, False, False]
    assert rdma.HAS_IMMDT[ops].tolist() == [False, False, True, True, False, False, True]


# --- C3 and C7: lengths -------------------------------------------------------------------------

def test_c3_five_byte_send_only():
    s = segment(5, 4096, VERB_SEND)
    assert s.opcode.tolist() == [SEND_ONLY] and s.pad.tolist() == [3]
    frame = int(frame_bytes(s.opcode, s.payload_bytes)[0])
    assert frame == 66
    assert frame - 14 == 52          # IPv4 total length
    assert frame - 14 - 20 == 32     # UDP length


def test_c7_udp_length_and_payload_accounting():
    udp_len = int(frame_bytes(WRITE_FIRST, 4096)) - 14 - 20
    assert udp_len == 4136
    assert udp_len - 8 - 12 - 16 - 0 - 4 == 4096
    assert int(frame_bytes(ACKNOWLEDGE, 0)) - 14 - 20 - 8 - 12 - 4 - 4 == 0


# Lengths of the frames in tests/cases (scapy-built and captured), from opcode and payload size.
CASE_LENGTHS = [
    # (name, opcode, payload bytes, options, len in the case file)
    ("rc_write_first_psn_fffffe", WRITE_FIRST, 256, {}, 330),
    ("rc_write_middle_psn_ffffff", WRITE_MIDDLE, 256, {}, 314),
    ("rc_write_last_psn_000000_ackreq", WRITE_LAST, 8, {}, 66),
    ("rc_ack_psn_000000", ACKNOWLEDGE, 0, {}, 62),
    ("cnp_b_to_a", CNP, 0, {}, 74),
    ("rc_write_only_imm_pad3_se", WRITE_ONLY_IMM, 13, {}, 94),
    ("rc_write_last_imm", WRITE_LAST_IMM, 64, {}, 126),
    ("rc_send_only_pad2", SEND_ONLY, 18, {}, 78),
    ("rc_read_request", READ_REQUEST, 0, {}, 74),
    ("rc_read_response_only", READ_RESPONSE_ONLY, 16, {}, 78),
    ("ipv6_rc_write_only_udpcsum", WRITE_ONLY, 32, {"ip_version": 6}, 126),
    ("vlan100_pcp3_rc_write_only", WRITE_ONLY, 8, {"vlan": True}, 86),
]


@pytest.mark.parametrize("name,opcode,payload,opts,length", CASE_LENGTHS)
def test_frame_bytes_match_scapy_vectors(scapy_vectors, name, opcode, payload, opts, length):
    vec = {v["name"]: v for v in scapy_vectors["vectors"]}[name]
    assert vec["len"] == length == len(bytes.fromhex(vec["hex"]))
    assert int(frame_bytes(opcode, payload, **opts)) == length


def test_frame_bytes_match_native_ib_frames(hw_frames, scapy_vectors):
    gen = bytes.fromhex(scapy_vectors["native_ib_generated"]["hex"])
    assert int(frame_bytes(SEND_ONLY, 32, transport="infiniband")) == len(gen) == 58
    lens = {f["frame"]: f["len"] for f in hw_frames["native_ib"]}
    assert int(frame_bytes(ACKNOWLEDGE, 0, transport="infiniband")) == lens[11] == 30
    assert int(frame_bytes(UD_SEND_ONLY, 60, transport="infiniband")) == lens[6] == 94
    assert int(frame_bytes(UD_SEND_ONLY, 60, transport="infiniband", grh=True)) == lens[5] == 134


def test_short_ethernet_frames_are_padded_to_60():
    assert int(frame_bytes(SEND_ONLY, 0)) == 60            # 58 bytes of headers + ICRC
    assert int(frame_bytes(SEND_ONLY, 0, ip_version=6)) == 78


def test_udp_sport_and_flow_label_as_linux_derives_them(scapy_vectors):
    p = scapy_vectors["params"]
    a, b = int(p["qpn_A"], 16), int(p["qpn_B"], 16)
    assert int(rdma.rocev2_flow_label(a, b)) == int(rdma.rocev2_flow_label(b, a)) == 0xED7C3
    assert int(rdma.rocev2_udp_sport(b, a)) == int(p["udp_sport"].split()[0], 16) == 0xD7F8


@pytest.mark.parametrize("call", [
    lambda: segment(100, 1500, VERB_WRITE),
    lambda: segment(100, 4096, 7),
    lambda: segment(-1, 4096, VERB_WRITE),
    lambda: segment_many(np.array([1, 2]), 4096, np.array([0, 9])),
    lambda: frame_bytes(0x20, 0),
    lambda: frame_bytes(WRITE_ONLY, 0, transport="fddi"),
    lambda: frame_bytes(WRITE_ONLY, 0, ip_version=5),
])
def test_bad_input_raises_encode_error(call):
    with pytest.raises(EncodeError, match="got"):
        call()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 70000), min_size=1, max_size=20), st.sampled_from(PMTUS),
       st.lists(st.sampled_from([VERB_WRITE, VERB_WRITE_IMM, VERB_SEND]), min_size=20, max_size=20))
def test_segment_many_equals_segment_per_message(sizes, pmtu, verbs):
    verbs = verbs[:len(sizes)]
    many = segment_many(np.array(sizes), pmtu, np.array(verbs))
    for i, (size, verb) in enumerate(zip(sizes, verbs)):
        one = segment(size, pmtu, verb)
        sel = many.msg_index == i
        assert many.opcode[sel].tolist() == one.opcode.tolist()
        assert many.payload_bytes[sel].tolist() == one.payload_bytes.tolist()
        assert many.pad[sel].tolist() == one.pad.tolist()
        assert many.index_in_msg[sel].tolist() == list(range(len(one.opcode)))
        # invariants: payload sums to the size, all but the last are exactly PMTU, pad aligns
        assert int(one.payload_bytes.sum()) == size
        assert (one.payload_bytes[:-1] == pmtu).all() and 0 <= one.payload_bytes[-1] <= pmtu
        assert ((one.payload_bytes + one.pad) % 4 == 0).all()
        assert many.payload_offset[sel].tolist() == [k * pmtu for k in range(len(one.opcode))]
