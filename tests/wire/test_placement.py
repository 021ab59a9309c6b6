"""The builder's placement helpers and its headers-only path (every frame of a group cut at one
length before its pad and CRCs: stored as big-endian words at aligned offsets when that length is
a multiple of 8, else copied as rows), against the scalar build_frame."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.wire import FrameBuilder, build_frame, rdma
from tokenpcap.wire import builder as builder_module
from tokenpcap.wire.placement import aligned, or_field16, store_words

from .test_builder import CONTEXTS, make_ctx, make_packets


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), which=st.integers(0, len(CONTEXTS) - 1),
       snaplen=st.sampled_from([8, 16, 40, 56, 60, 64, 66, 72, 74, 78, 96, 128]), gap=st.sampled_from([16, 20, 32]),
       full=st.booleans())
def test_records_cut_at_a_multiple_of_8_equal_build_frame(seed, n, which, snaplen, gap, full):
    """pcap-like records (``gap`` header bytes, then the frame cut at ``snaplen``): the word store
    applies when gap and snaplen keep every frame 8-byte aligned, the row copy otherwise."""
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, n)
    if full:                                  # whole-PMTU payloads: every group takes the word path
        p["payload_bytes"] = np.where(rdma.HAS_PAYLOAD[p["opcode"]], 4096, 0)
        p["pad"] = 0
    b = FrameBuilder(ctx)
    caplen = np.minimum(b.frame_bytes(p), snaplen)
    rec = caplen + gap
    offsets = np.cumsum(rec) - caplen
    out = np.full(int(offsets[-1] + caplen[-1] + 8), 0xA5, np.uint8)
    b.fill(p, out, offsets, caplen)
    mask = np.zeros(out.size, bool)
    for r, o, c in zip(p, offsets.tolist(), caplen.tolist()):
        assert out[o:o + c].tobytes() == build_frame(r, ctx)[:c]
        mask[o:o + c] = True
    assert (out[~mask] == 0xA5).all()


def test_headers_only_path_stores_words_when_aligned_and_rows_otherwise(monkeypatch):
    rng = np.random.default_rng(4)
    b = FrameBuilder(make_ctx(rng))
    p = make_packets(rng, 64)
    p["opcode"], p["payload_bytes"], p["pad"] = rdma.WRITE_MIDDLE, 4096, 0
    taken, stores = [], []
    real = b._store_direct
    monkeypatch.setattr(b, "_fill_direct", lambda p, out, offsets, caplen: (p, offsets, caplen))
    monkeypatch.setattr(b, "_store_direct", lambda *a: taken.append(real(*a)) or taken[-1])
    monkeypatch.setattr(builder_module, "store_words", lambda *a: stores.append(store_words(*a)))
    offsets = np.arange(64, dtype=np.int64) * 80 + 16
    for shift, snaplen in ((0, 64), (1, 64), (0, 74)):      # aligned; not aligned; not a multiple of 8
        out = np.zeros(64 * 80 + 16, np.uint8)
        b.fill(p, out, offsets + shift, np.full(64, snaplen))
        for i in (0, 37, 63):
            o = int(offsets[i]) + shift
            assert out[o:o + snaplen].tobytes() == build_frame(p[i], b.ctx)[:snaplen]
    assert taken == [True, True, True] and len(stores) == 1


def test_store_words_and_or_field16():
    out = np.zeros(32, np.uint8)
    assert aligned(out, np.array([0, 16])) and not aligned(out, np.array([0, 12]))
    store_words(out, np.array([0, 16]), [np.array([0x0102030405060708, 0x1112131415161718], np.uint64),
                                         0xAABB])
    assert out.tobytes() == bytes(range(1, 9)) + bytes(6) + b"\xaa\xbb" + bytes(range(0x11, 0x19)) \
        + bytes(6) + b"\xaa\xbb"
    words = np.zeros((2, 1), np.uint64)
    or_field16(words, 7, np.array([0xBEEF]))                  # bytes 7 and 8: two words
    or_field16(words, 2, np.array([0x1234]))
    raw = words.T.astype(">u8").tobytes()
    assert raw[2:4] == b"\x12\x34" and raw[7:9] == b"\xbe\xef"
