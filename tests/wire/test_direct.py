"""The compiled headers-only path (tokenpcap.wire.direct) equals the scalar reference build_frame
and the vectorized path, byte for byte, and takes every row it may."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.records import OPCODE_PFC
from tokenpcap.wire import FrameBuilder, build_frame, rdma
from tokenpcap.wire.direct import CRC_PAYLOAD_MAX_BYTES

from .test_builder import CONTEXTS, make_ctx, make_packets


def _layout(b: FrameBuilder, p: np.ndarray, snaplen: int, gap: int):
    caplen = np.minimum(b.frame_bytes(p), snaplen)
    offsets = np.cumsum(caplen + gap) - caplen
    return np.full(int(offsets[-1] + caplen[-1] + 8), 0xA5, np.uint8), offsets, caplen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), which=st.integers(0, len(CONTEXTS) - 1),
       snaplen=st.integers(1, 200), gap=st.integers(0, 17), ce=st.booleans(), lines=st.booleans())
def test_direct_rows_equal_build_frame_and_the_vectorized_path(seed, n, which, snaplen, gap, ce,
                                                               lines):
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, n)
    if ce and ctx.transport == "rocev2" and ctx.ecn:
        p["ce"] = rng.integers(0, 2, n)
    if lines:                   # NCCL LL/LL128 payloads (wire.lines) on data rows
        data = rdma.HAS_PAYLOAD[p["opcode"]]
        p["line_protocol"] = np.where(data, rng.integers(0, 3, n), 0)
        p["line_flag"] = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    b = FrameBuilder(ctx)
    out, offsets, caplen = _layout(b, p, snaplen, gap)
    b.fill(p, out, offsets, caplen)
    taken = b._direct.eligible(p, caplen)
    # a row is taken when its kept bytes end before the pad and CRCs or its payload is short
    # (its CRCs computed byte by byte), and before the IPv6 UDP checksum
    hb = b._hb[p["opcode"]]
    pay = p["payload_bytes"]
    expect = (caplen <= hb + pay) | (pay <= CRC_PAYLOAD_MAX_BYTES)
    if ctx.transport == "rocev2" and ctx.ip_version == 6 and ctx.ipv6_udp_checksum:
        l4 = 14 + (4 if ctx.vlan else 0) + 40          # Ethernet, 802.1Q, IPv6 (RFC 8200)
        expect &= caplen <= l4 + 6                       # the UDP checksum (RFC 768) covers the ICRC
    assert (taken == (expect & (p["opcode"] != OPCODE_PFC))).all()
    mask = np.zeros(out.size, bool)
    for r, o, c in zip(p, offsets.tolist(), caplen.tolist()):
        assert out[o:o + c].tobytes() == build_frame(r, ctx)[:c]
        mask[o:o + c] = True
    assert (out[~mask] == 0xA5).all()
    ref = np.full_like(out, 0xA5)
    v = FrameBuilder(ctx)
    v._fill_direct = lambda p, out, offsets, caplen: (p, offsets, caplen)   # vectorized only
    v.fill(p, ref, offsets, caplen)
    assert np.array_equal(out, ref)


def test_headers_only_batches_take_the_direct_path_whole():
    rng = np.random.default_rng(5)
    b = FrameBuilder(make_ctx(rng))
    p = make_packets(rng, 500)
    p["opcode"] = rng.choice([rdma.WRITE_FIRST, rdma.WRITE_MIDDLE, rdma.WRITE_LAST], 500)
    p["payload_bytes"], p["pad"] = 4096, 0
    p[::7]["opcode"], p[::7]["payload_bytes"] = rdma.ACKNOWLEDGE, 0       # whole, with their ICRC
    out, offsets, caplen = _layout(b, p, 74, 16)
    calls = []
    real = b._store_direct
    b._store_direct = lambda *a: calls.append(1) or real(*a)
    b.fill(p, out, offsets, caplen)
    assert b._direct.eligible(p, caplen).all() and not calls
    for i in (0, 7, 250, 499):
        o, c = int(offsets[i]), int(caplen[i])
        assert out[o:o + c].tobytes() == build_frame(p[i], b.ctx)[:c]
