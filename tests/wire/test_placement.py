"""The builder's placement helpers and its headers-only word path (whole frames cut at a multiple
of 8 bytes, stored as big-endian words at aligned offsets), against the scalar build_frame."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.wire import FrameBuilder, build_frame, rdma
from tokenpcap.wire.placement import aligned, or_field16, store_words

from .test_builder import CONTEXTS, make_ctx, make_packets


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), which=st.integers(0, len(CONTEXTS) - 1),
       snaplen=st.sampled_from([8, 16, 40, 56, 64, 72, 96, 128]), gap=st.sampled_from([16, 20, 32]),
       full=st.booleans())
def test_records_cut_at_a_multiple_of_8_equal_build_frame(seed, n, which, snaplen, gap, full):
    """pcap-like records (``gap`` header bytes, then the frame cut at ``snaplen``): the word path
    applies when gap and snaplen keep every frame 8-byte aligned, the row path otherwise."""
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


def test_word_path_is_taken_for_aligned_uniform_groups(monkeypatch):
    rng = np.random.default_rng(4)
    b = FrameBuilder(make_ctx(rng))
    p = make_packets(rng, 64)
    p["opcode"], p["payload_bytes"], p["pad"] = rdma.WRITE_MIDDLE, 4096, 0
    taken = []
    real = b._store_direct
    monkeypatch.setattr(b, "_store_direct", lambda *a: taken.append(real(*a)) or taken[-1])
    offsets = np.arange(64, dtype=np.int64) * 80 + 16
    out = np.zeros(64 * 80 + 8, np.uint8)
    b.fill(p, out, offsets, np.full(64, 64))
    b.fill(p, out, offsets + 1, np.full(64, 64))            # not aligned: the row path
    assert taken == [True, False]
    assert out[17:81].tobytes() == build_frame(p[0], b.ctx)[:64]


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
