"""The builder's gather side: payload holes, ``fill(..., skip=)`` and ``BatchFill``, checked
against the scalar reference ``build_frame`` and through the pcap writer and reader."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import EncodeError
from tokenpcap.pcap import ErfWriter, Interface, PcapngWriter, PcapWriter, open_capture
from tokenpcap.wire import FrameBuilder, build_frame, rdma
from tokenpcap.wire.gather import BatchFill

from .test_builder import CONTEXTS, make_ctx, make_packets


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), which=st.integers(0, len(CONTEXTS) - 1),
       snaplen=st.sampled_from([262144, 64, 100, 1000, 4000, 4097]))
def test_holes_hold_the_pattern_and_skip_leaves_exactly_them_out(seed, n, which, snaplen):
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, n)
    b = FrameBuilder(ctx)
    caplen = np.minimum(b.frame_bytes(p), snaplen)
    at, length = b.payload_holes(p, caplen)
    assert (length % 8 == 0).all() and (length >= 0).all()
    src = b.payload_source
    refs = [build_frame(r, ctx)[:c] for r, c in zip(p, caplen.tolist())]
    for ref, a, m in zip(refs, at.tolist(), length.tolist()):
        assert ref[a:a + m] == src[:m].tobytes()          # the hole is the pattern's prefix
    skip = length - 8 * rng.integers(0, 2, n) * (length >= 8)   # any multiple of 8 up to the hole
    size = caplen - skip
    offsets = np.cumsum(size + 3) - size
    out = np.full(int(offsets[-1] + size[-1] + 5), 0xA5, np.uint8)
    b.fill(p, out, offsets, caplen, skip=skip)
    mask = np.zeros(out.size, bool)
    for ref, o, s, a, k in zip(refs, offsets.tolist(), size.tolist(), at.tolist(), skip.tolist()):
        assert out[o:o + s].tobytes() == ref[:a] + ref[a + k:]
        mask[o:o + s] = True
    assert (out[~mask] == 0xA5).all()


def test_skip_longer_than_the_kept_payload_is_refused():
    rng = np.random.default_rng(1)
    p = make_packets(rng, 4)
    p["opcode"], p["payload_bytes"], p["pad"] = rdma.WRITE_MIDDLE, 1024, 0
    b = FrameBuilder(make_ctx(rng))
    flen = b.frame_bytes(p)
    out = np.zeros(int(flen.sum()), np.uint8)
    offsets = np.cumsum(flen) - flen
    with pytest.raises(EncodeError, match=r"packets\[2\]\.skip: got 1032, expected 0\.\.the payload"):
        b.fill(p, out, offsets, flen, skip=np.array([0, 8, 1032, 0]))
    with pytest.raises(EncodeError, match="skip: got shape"):
        b.fill(p, out, offsets, flen, skip=np.array([0]))


@pytest.mark.parametrize("which,fmt", [(w, f) for w, kw in enumerate(CONTEXTS)
                                        for f in ("pcap", "pcapng", "erf")
                                        if f != "erf" or kw.get("transport") == "infiniband"])
def test_batch_fill_through_the_writers_reads_back_as_build_frame(tmp_path, which, fmt):
    rng = np.random.default_rng(which)
    ctx = make_ctx(rng, **CONTEXTS[which])
    ib = ctx.transport == "infiniband"
    n = 400
    p = make_packets(rng, n)
    p["payload_bytes"] = np.where(rdma.HAS_PAYLOAD[p["opcode"]] & (rng.random(n) < 0.7), 4096,
                                  p["payload_bytes"])
    p["pad"] = (-p["payload_bytes"].astype(np.int64)) & 3
    p["time_ns"] = np.arange(n) * 100
    b = FrameBuilder(ctx)
    fb = b.frame_bytes(p)
    link = "infiniband" if ib else "ethernet"
    path = tmp_path / f"x.{fmt}"
    w = (PcapWriter(path, link=link) if fmt == "pcap" else ErfWriter(path) if fmt == "erf"
         else PcapngWriter(path, [Interface(f"n{i}", link=link) for i in range(4)]))
    with w:
        for a in range(0, n, 150):
            w.write_batch(p["time_ns"][a:a + 150], fb[a:a + 150], BatchFill(b, p[a:a + 150]),
                          p["nic"][a:a + 150] if fmt != "pcap" else 0)
    cap = open_capture(path)
    assert [cap.frame(r) for r in cap.read()] == [build_frame(r, ctx) for r in p]


def test_keep_heap_leaves_glibc_variables_the_user_set():
    code = "from tokenpcap.wire.heap import keep_heap; print(keep_heap(), keep_heap())"
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="1000000")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.split() == ["False", "False"]
