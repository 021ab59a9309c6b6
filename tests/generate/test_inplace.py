"""A headers-only pcap file's records built in place (tokenpcap.generate.inplace) are the pcap
records of the scalar reference frames (tokenpcap.wire.build_frame, cut at the snap length,
behind the record header the pcap format defines: draft-ietf-opsawg-pcap, section 5), in the
order the parts came, whatever parts go the general way between them and wherever the sink's
batches end."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.wire.test_builder import make_packets
from tokenpcap.config.profiles import load_cluster
from tokenpcap.errors import EncodeError
from tokenpcap.generate import output
from tokenpcap.generate.inplace import InPlaceRecords
from tokenpcap.lower import wire_context
from tokenpcap.pcap import PcapWriter
from tokenpcap.wire import FrameBuilder, build_frame

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(str(ROOT / "profiles" / "clusters" / "h100-rocev2-8x1.yaml"))
_NS = 10**9


def _rows(rng: np.random.Generator, n: int, builder: FrameBuilder) -> np.ndarray:
    p = make_packets(rng, n)
    p["nic"], p["peer_nic"] = rng.integers(0, 8, n), rng.integers(0, 8, n)
    p["ce"] = 0
    p["time_ns"] = np.cumsum(rng.integers(0, 3 * _NS // 2, n))     # crossing seconds
    p["frame_bytes"] = builder.frame_bytes(p)
    return p


def _records(path: Path) -> list[tuple[int, int, int, int, bytes]]:
    """(seconds, nanoseconds, caplen, orig_len, data) of every record of a little-endian,
    nanosecond pcap file (draft-ietf-opsawg-pcap: a 24-byte file header with magic
    0xA1B23C4D, then 16-byte record headers)."""
    b = path.read_bytes()
    assert struct.unpack_from("<I", b, 0)[0] == 0xA1B23C4D
    out, at = [], 24
    while at < len(b):
        sec, frac, cap, orig = struct.unpack_from("<IIII", b, at)
        out.append((sec, frac, cap, orig, b[at + 16:at + 16 + cap]))
        at += 16 + cap
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), cuts=st.integers(0, 12),
       snaplen=st.sampled_from([14, 64, 74, 94, 128, 600, 262144]), lines=st.booleans(),
       flush=st.sampled_from([512, 4096, 1 << 20]))
def test_records_equal_the_reference_frames_in_the_parts_order(tmp_path, monkeypatch, seed, n,
                                                               cuts, snaplen, lines, flush):
    monkeypatch.setattr(output, "FLUSH_BYTES", flush)        # batches that end mid-run
    rng = np.random.default_rng(seed)
    cfg = output.WriterConfig(CLUSTER, "pcap", snaplen, 1, {})
    builder = output._builder(cfg)
    p = _rows(rng, n, builder)
    if lines:                   # NCCL lines: such a part goes the general way
        p["line_protocol"][rng.random(n) < 0.05] = 1
    path = tmp_path / f"f{seed}.pcap"
    sink = output.Sink(output.FileSpec(path, tuple(range(8))), cfg, builder)
    assert sink._direct is not None
    bounds = sorted(set(rng.integers(0, n + 1, cuts).tolist()) | {0, n})
    for a, b in zip(bounds[:-1], bounds[1:]):
        sink.add(np.ascontiguousarray(p[a:b]), None, None)
    assert sink.close() == (n, path.stat().st_size)
    got = _records(path)
    assert len(got) == n
    ctx = wire_context(CLUSTER, payload_seed=1)
    for r, (sec, frac, cap, orig, data) in zip(p, got):
        t, fb = int(r["time_ns"]), int(r["frame_bytes"])
        assert (sec, frac, cap, orig) == (t // _NS, t % _NS, min(fb, snaplen), fb)
        assert data == build_frame(r, ctx)[:cap]


def test_headers_only_parts_are_built_in_place_and_others_are_not(tmp_path):
    rng = np.random.default_rng(3)
    builder = FrameBuilder(wire_context(CLUSTER, payload_seed=1))
    p = _rows(rng, 200, builder)
    p["payload_bytes"] = np.where(p["payload_bytes"] > 0, 4096, 0)      # long payloads, cut
    p["pad"] = 0
    p["frame_bytes"] = builder.frame_bytes(p)
    w = PcapWriter(tmp_path / "f.pcap", snaplen=74)
    rec = InPlaceRecords(builder, w, 74, 1 << 20)
    builder.fill(p, np.zeros(200 * 74, np.uint8), np.arange(200) * 74,
                 np.minimum(p["frame_bytes"].astype(np.int64), 74))      # the opcodes met
    assert rec.add(p) == int((16 + np.minimum(p["frame_bytes"], 74)).sum()) == rec.held
    lined = p[:5].copy()
    lined["line_protocol"][2] = 2
    assert rec.add(lined) is None          # NCCL lines: the general way
    with PcapWriter(tmp_path / "g.pcap") as g:
        full = InPlaceRecords(builder, g, 262144, 1 << 20)
        assert full.add(p[p["payload_bytes"] == 4096][:3]) is None  # kept payload: a gather write
    late = p[:2].copy()
    late["time_ns"] = -1
    assert rec.add(late) is None           # before the epoch: the general way names it
    bad = p[:3].copy()
    bad["psn"][1] = 1 << 24
    with pytest.raises(EncodeError, match=r"packets\[1\]\.psn"):
        rec.add(bad)
    rec.write()
    w.close()
    assert w.packets == 200
    with PcapWriter(tmp_path / "ib.pcap", link="infiniband") as ib:
        assert not InPlaceRecords.serves(ib)
