"""NCCL LL/LL128 payloads in frames: the vectorized builder equals the scalar build_frame, the
CRCs equal the zlib/IB references, and the payload decodes to NCCL's line layout (prims_ll.h
storeLL; prims_ll128.h flag word 15) with the row's flag."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.test_builder import CONTEXTS, make_ctx, make_packets
from tokenpcap.wire import FrameBuilder, build_frame, crc, rdma
from tokenpcap.wire.decode import decode_frame
from tokenpcap.wire.lines import wire_offset


def _line_rows(rng, n):
    p = make_packets(rng, n)
    p["line_protocol"] = rng.integers(0, 3, n)
    p["line_flag"] = rng.choice([1, 2, 255, 256, 70000, 2**31 + 5], n)
    return p


@pytest.mark.parametrize("which", range(len(CONTEXTS)))
def test_line_payloads_vectorized_equal_scalar_and_crcs_hold(which):
    rng = np.random.default_rng(100 + which)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = _line_rows(rng, 120)
    frames = FrameBuilder(ctx).frames(p)
    for r, f in zip(p, frames):
        assert f == build_frame(r, ctx)
        check = crc.check_ib_packet(f) if ctx.transport == "infiniband" else crc.check_ethernet_frame(f)
        assert check.ok


def test_payload_carries_the_flags_in_nccl_layout():
    rng = np.random.default_rng(5)
    ctx = make_ctx(rng)
    p = make_packets(rng, 2)
    p["opcode"] = rdma.WRITE_ONLY
    p["payload_bytes"], p["pad"] = 4096, 0
    p["line_protocol"], p["line_flag"] = [1, 2], [9, 12]
    f_ll, f_ll128 = FrameBuilder(ctx).frames(p)
    base = ctx.pattern[:4096].tobytes()
    for frame, proto in ((f_ll, 1), (f_ll128, 2)):
        d = decode_frame(frame)
        pay = frame[d.payload_offset:d.payload_offset + 4096]
        if proto == 1:      # {data1, flag1, data2, flag2}, u32 LE; 8 data bytes per line
            for i in range(256):
                d1, fl1, d2, fl2 = struct.unpack_from("<IIII", pay, 16 * i)
                assert fl1 == fl2 == 9
                assert struct.pack("<II", d1, d2) == base[8 * i:8 * i + 8]
        else:               # 15 data words, then the u64 flag
            for i in range(32):
                assert struct.unpack_from("<Q", pay, 128 * i + 120)[0] == 12
                assert pay[128 * i:128 * i + 120] == base[120 * i:120 * i + 120]


def test_gather_takes_no_line_payload():
    rng = np.random.default_rng(6)
    ctx = make_ctx(rng)
    p = _line_rows(rng, 50)
    b = FrameBuilder(ctx)
    at, length = b.payload_holes(p, b.frame_bytes(p))
    assert (length[p["line_protocol"] != 0] == 0).all()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["Simple", "LL", "LL128"]), st.binary(min_size=1, max_size=1000))
def test_wire_offset_finds_each_data_byte_where_the_lines_put_it(protocol, data):
    # the independent layout: NCCL's ncclLLFifoLine {data1, flag1, data2, flag2} and LL128's
    # flag in bytes 120..127 of a 128-byte line (device.h, prims_ll128.h), written with struct
    d = np.frombuffer(data, np.uint8)
    if protocol == "Simple":
        wire = d
    elif protocol == "LL":
        padded = data + bytes(-len(data) % 8)
        wire = np.frombuffer(b"".join(struct.pack("<4sI4sI", padded[i:i + 4], 7, padded[i + 4:i + 8], 7)
                                      for i in range(0, len(padded), 8)), np.uint8)
    else:
        padded = data + bytes(-len(data) % 120)
        wire = np.frombuffer(b"".join(padded[i:i + 120] + struct.pack("<Q", 7)
                                      for i in range(0, len(padded), 120)), np.uint8)
    assert all(wire[wire_offset(protocol, i)] == d[i] for i in range(d.size))
