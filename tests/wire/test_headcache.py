"""The header cache of the compiled frame loop (tokenpcap.wire.headcache): frames built from a
QP's previous header with only the PSN, IP ID and checksum written equal the scalar reference
build_frame, byte for byte, whatever else changes between packets of a QP (opcode, payload
length, AckReq, RETH, AETH, NICs, CE mark) and whether the previous packet came in the same
batch or an earlier one; the key covers every row byte but those no header depends on."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import FrameBuilder, build_frame
from tokenpcap.wire.headcache import (OUTSIDE_HEADER_FIELDS, PER_PACKET_FIELDS, key_plan,
                                      slot_of)

from .test_builder import CONTEXTS, make_ctx, make_packets

#: fields a packet may change against its QP's previous one (the cache must notice)
CHANGES = ("opcode", "payload_bytes", "ack_req", "reth_va", "aeth", "nic", "ce", "imm")


def _streams(rng, ctx, qps: int, n: int) -> np.ndarray:
    """``n`` rows of ``qps`` interleaved QPs: each row its QP's previous row with the PSN and IP
    ID one further (the lowering's rule: IP ID = PSN's low 16 bits) and, now and then, one more
    field changed."""
    base = make_packets(rng, qps)
    if ctx.transport == "rocev2" and ctx.ecn:
        base["ce"] = 0
    rows = np.zeros(n, PACKET_DTYPE)
    for i in range(n):
        q = int(rng.integers(0, qps))
        r = base[q]
        r["psn"] = (int(r["psn"]) + 1) & 0xFFFFFF
        r["ip_id"] = int(r["psn"]) & 0xFFFF
        if rng.random() < 0.2:
            f = CHANGES[int(rng.integers(0, len(CHANGES)))]
            other = make_packets(rng, 1)[0]
            if f == "ce":
                if ctx.transport == "rocev2" and ctx.ecn:
                    r["ce"] = 1 - int(r["ce"])
            elif f in ("opcode", "payload_bytes"):
                r["opcode"], r["payload_bytes"], r["pad"] = (other["opcode"],
                                                             other["payload_bytes"], other["pad"])
            else:
                r[f] = other[f]
        rows[i] = r
    return rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120), qps=st.integers(1, 5),
       which=st.integers(0, len(CONTEXTS) - 1), snaplen=st.sampled_from([54, 64, 74, 90, 4200]),
       cut=st.integers(0, 120))
def test_cached_headers_equal_build_frame(seed, n, qps, which, snaplen, cut):
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = _streams(rng, ctx, qps, n)
    b = FrameBuilder(ctx)
    cap = np.minimum(b.frame_bytes(p), snaplen)
    off = np.cumsum(cap) - cap
    out = np.zeros(int(cap.sum()), np.uint8)
    cut = min(cut, n)
    for a, z in ((0, cut), (cut, n)):       # two batches: the cache carries over
        if z > a:
            b.fill(p[a:z], out, off[a:z], cap[a:z])
    for r, o, c in zip(p, off.tolist(), cap.tolist()):
        assert out[o:o + c].tobytes() == build_frame(r, ctx)[:c]


def test_packets_after_the_first_take_their_slots_header():
    """One QP's packets fill one slot, whose key is theirs; a later batch of the same QP is
    built from the slot's words (words spoiled in the slot show in its frames, and only there)."""
    rng = np.random.default_rng(3)
    ctx = make_ctx(rng)
    p = np.repeat(_streams(rng, ctx, 1, 1), 50)
    p["psn"] = np.arange(50) + 7
    p["ip_id"] = p["psn"]
    b = FrameBuilder(ctx)
    cap = np.minimum(b.frame_bytes(p), 74)
    off = np.cumsum(cap) - cap
    out = np.zeros(int(cap.sum()), np.uint8)
    b.fill(p[:25], out, off[:25], cap[:25])
    c = b._direct.cache
    at, mask = key_plan()
    rec = p.view(np.uint8).reshape(len(p), -1)
    key = np.array([int.from_bytes(rec[0, a:a + 8].tobytes(), "little") & int(m)
                    for a, m in zip(at.tolist(), mask.tolist())], np.uint64)
    slot = slot_of(key)
    assert (c.op >= 0).sum() == 1 and c.op[slot] == p["opcode"][0] and (c.key[slot] == key).all()
    c.words[slot, 0] ^= np.uint64(0xFF << 56)       # the first destination MAC byte, spoiled
    b.fill(p[25:], out, off[25:], cap[25:])
    for r, o, k in zip(p, off.tolist(), cap.tolist()):
        want = bytearray(build_frame(r, ctx)[:k])
        if r["psn"] >= 7 + 25:
            want[0] ^= 0xFF
        assert out[o:o + k].tobytes() == bytes(want)


def test_the_key_covers_every_byte_a_header_may_depend_on():
    at, mask = key_plan()
    covered = np.zeros(PACKET_DTYPE.itemsize, bool)
    for a, m in zip(at.tolist(), mask.tolist()):
        for k in range(8):
            if (int(m) >> (8 * k)) & 0xFF:
                covered[a + k] = True
    for f in PACKET_DTYPE.names:
        dt, o = PACKET_DTYPE.fields[f][:2]
        want = f not in PER_PACKET_FIELDS + OUTSIDE_HEADER_FIELDS
        assert covered[o:o + dt.itemsize].all() == want and covered[o:o + dt.itemsize].any() == want
