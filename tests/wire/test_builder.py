"""The vectorized FrameBuilder equals the scalar build_frame, and its CRCs equal the references."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import EncodeError
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import FrameBuilder, WireContext, build_frame, crc, rdma
from tokenpcap.wire import builder as builder_module

OPCODES = sorted(rdma.OPCODES)
N_NICS = 4

CONTEXTS = [
    dict(),
    dict(vlan_id=100, pcp=5, dscp=10, ecn=1, ttl=3),
    dict(ip_version=6),
    dict(ip_version=6, flow_label=0x12345, vlan_id=7, ipv6_udp_checksum=False),
    dict(ip_version=6, vlan_id=4095, pcp=7, dei=1, cnp_dscp=0),
    dict(transport="infiniband", sl=3, vl=2),
    dict(transport="infiniband", ib_grh=True),
    dict(transport="infiniband", ib_grh=True, flow_label=9, p_key=0x8001),
]


def make_ctx(rng: np.random.Generator, **kw) -> WireContext:
    return WireContext(mac=rng.integers(0, 256, (N_NICS, 6), dtype=np.uint8),
                       ipv4=rng.integers(0, 256, (N_NICS, 4), dtype=np.uint8),
                       ipv6=rng.integers(0, 256, (N_NICS, 16), dtype=np.uint8),
                       lid=rng.integers(0, 1 << 16, N_NICS, dtype=np.uint16),
                       payload_seed=int(rng.integers(0, 1 << 30)), **kw)


def make_packets(rng: np.random.Generator, n: int) -> np.ndarray:
    p = np.zeros(n, PACKET_DTYPE)
    op = rng.choice(OPCODES, n).astype(np.uint8)
    p["opcode"] = op
    pay = np.where(rng.random(n) < 0.4, rng.integers(0, 9, n), rng.integers(0, 4097, n))
    pay = np.where(rdma.HAS_PAYLOAD[op], pay, 0)
    p["payload_bytes"], p["pad"] = pay, (-pay) & 3
    for f, bits in (("psn", 24), ("dest_qp", 24), ("src_qp", 24), ("udp_sport", 16), ("ip_id", 16),
                    ("reth_rkey", 32), ("reth_len", 32), ("imm", 32), ("aeth", 32)):
        p[f] = rng.integers(0, 1 << bits, n)
    p["reth_va"] = rng.integers(0, 1 << 62, n).astype(np.uint64) * 3
    for f in ("ack_req", "solicited", "becn"):
        p[f] = rng.integers(0, 2, n)
    p["nic"], p["peer_nic"] = rng.integers(0, N_NICS, n), rng.integers(0, N_NICS, n)
    return p


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), which=st.integers(0, len(CONTEXTS) - 1),
       snaplen=st.sampled_from([None, 1, 14, 60, 64, 70, 100, 128, 1500, 4000]))
def test_vectorized_equals_scalar(seed, n, which, snaplen):
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, n)
    got = FrameBuilder(ctx).frames(p, snaplen)
    for r, frame in zip(p, got):
        ref = build_frame(r, ctx)
        assert frame == (ref if snaplen is None else ref[:snaplen])


@pytest.mark.parametrize("which", range(len(CONTEXTS)))
def test_linear_crcs_equal_the_zlib_reference(which):
    rng = np.random.default_rng(which)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, 300)
    for frame in FrameBuilder(ctx).frames(p):
        check = crc.check_ib_packet(frame) if ctx.transport == "infiniband" else crc.check_ethernet_frame(frame)
        assert check.ok


def test_fill_writes_only_its_ranges_and_keeps_truncated_frames_exact():
    rng = np.random.default_rng(7)
    ctx = make_ctx(rng)
    p = make_packets(rng, 500)
    b = FrameBuilder(ctx)
    flen = b.frame_bytes(p)
    caplen = np.minimum(flen, rng.integers(0, 5000, len(p)))
    gaps = rng.integers(0, 40, len(p))
    offsets = np.cumsum(gaps + caplen) - caplen
    out = np.full(int(offsets[-1] + caplen[-1] + 50), 0xA5, np.uint8)
    b.fill(p, out, offsets, caplen)
    mask = np.zeros(out.size, bool)
    for i, r in enumerate(p):
        o, c = int(offsets[i]), int(caplen[i])
        assert out[o:o + c].tobytes() == build_frame(r, ctx)[:c]
        mask[o:o + c] = True
    assert (out[~mask] == 0xA5).all()


def test_large_batches_are_chunked(monkeypatch):
    monkeypatch.setattr(builder_module, "_MAX_ROWS", 97)     # many chunks, groups split across them
    rng = np.random.default_rng(11)
    ctx = make_ctx(rng)
    p = make_packets(rng, 1000)
    frames = FrameBuilder(ctx).frames(p, snaplen=3000)
    for i in range(len(p)):
        assert frames[i] == build_frame(p[i], ctx)[:3000]


def test_frame_bytes_of_the_builder():
    rng = np.random.default_rng(3)
    for kw in CONTEXTS:
        ctx = make_ctx(rng, **kw)
        p = make_packets(rng, 50)
        assert FrameBuilder(ctx).frame_bytes(p).tolist() == [len(build_frame(r, ctx)) for r in p]


@pytest.mark.parametrize("field,value,match", [
    ("opcode", 0x20, r"packets\[3\]\.opcode: got 32, expected a known BTH opcode"),
    ("psn", 1 << 24, r"packets\[3\]\.psn: got 16777216, expected 0\.\.16777215 \(BTH\.PSN, 24 bits\)"),
    ("peer_nic", N_NICS, r"packets\[3\]\.peer_nic: got 4, expected 0\.\.3"),
    ("pad", 2, r"packets\[3\]\.pad: got 2"),
    ("payload_bytes", 5000, r"packets\[3\]\.payload_bytes: got 5000, expected 0\.\.4096"),
])
def test_bad_rows_raise_encode_error(field, value, match):
    rng = np.random.default_rng(5)
    ctx = make_ctx(rng)
    p = make_packets(rng, 6)
    p["opcode"], p["payload_bytes"], p["pad"] = rdma.WRITE_ONLY, 8, 0
    p[3][field] = value
    with pytest.raises(EncodeError, match=match):
        FrameBuilder(ctx).build(p)


def test_bad_buffers_raise_encode_error():
    rng = np.random.default_rng(6)
    b = FrameBuilder(make_ctx(rng))
    p = make_packets(rng, 2)
    flen = b.frame_bytes(p)
    out = np.zeros(int(flen.sum()) + 10, np.uint8)
    with pytest.raises(EncodeError, match=r"packets\[1\]\.caplen"):
        b.fill(p, out, np.array([0, flen[0]]), flen + np.array([0, 1]))
    with pytest.raises(EncodeError, match=r"packets\[1\]\.offset"):
        b.fill(p, out, np.array([0, 10]), flen)
    with pytest.raises(EncodeError, match="out: got"):
        b.fill(p, out[::2], np.array([0, 0]), np.array([0, 0]))
    with pytest.raises(EncodeError, match="packets: got"):
        b.fill(np.zeros(2), out, np.array([0, 0]), np.array([0, 0]))
