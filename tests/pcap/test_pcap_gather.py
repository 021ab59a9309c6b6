"""Gather writes (payload holes written with writev from a shared source): the file equals the
hand-spelled one and the plain-fill one, short writes resume, failures leave nothing behind."""
from __future__ import annotations

import ctypes
import errno
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import OutputError
from tokenpcap.pcap import ErfWriter, Interface, PcapngWriter, PcapWriter, gather
from tokenpcap.pcap.reader import open_capture

from .helpers import frames_fill, hand_pcap, make_frames
from .test_pcap_writer import KINDS, TEXT

SOURCE = np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8)


class GatherFrames:
    """A gather fill (tokenpcap.pcap.gather) over given frames: frame i carries
    ``SOURCE[:size[i]]`` at byte ``at[i]``; written independently of tokenpcap.wire."""

    def __init__(self, lengths, at, size, seed=0):
        self.frames = []
        for f, a, s in zip(make_frames(lengths, seed), at, size):
            b = bytearray(f)
            b[a:a + s] = SOURCE[:s].tobytes()
            self.frames.append(bytes(b))
        self.at, self.size = np.asarray(at, np.int64), np.asarray(size, np.int64)
        self.source = SOURCE
        self._plain = frames_fill(self.frames)

    def __call__(self, out, offsets, caplen):
        self._plain(out, offsets, caplen)

    def holes(self, caplen):
        kept = np.clip(caplen - self.at, 0, self.size)
        return self.at.copy(), kept & ~7

    def fill_around(self, out, offsets, caplen, length):
        for f, o, c, a, n in zip(self.frames, offsets.tolist(), caplen.tolist(),
                                 self.at.tolist(), length.tolist()):
            part = f[:a] + f[a + n:c] if n else f[:c]
            out[o:o + len(part)] = np.frombuffer(part, np.uint8)


def _batches(cls_frames: GatherFrames, t, snaplen, batches, writer):
    fb = np.array([len(f) for f in cls_frames.frames], np.int64)
    cuts = np.linspace(0, len(t), batches + 1).astype(int)
    for a, b in zip(cuts[:-1], cuts[1:]):
        sub = GatherFrames.__new__(GatherFrames)
        sub.frames, sub.at, sub.size = cls_frames.frames[a:b], cls_frames.at[a:b], cls_frames.size[a:b]
        sub.source, sub._plain = SOURCE, frames_fill(sub.frames)
        writer.write_batch(np.asarray(t[a:b], np.int64), fb[a:b], sub)


def test_pcap_with_holes_equals_the_hand_spelled_file(tmp_path, monkeypatch):
    calls = []
    real = gather.writev_all
    monkeypatch.setattr("tokenpcap.pcap.output.writev_all",
                        lambda fd, iov: calls.append(len(iov)) or real(fd, iov))
    g = GatherFrames([4170, 60, 1500, 4154], at=[74, 0, 58, 58], size=[4096, 0, 1024, 4096])
    t = [1_700_000_000_000_000_001, 1_700_000_000_000_000_085, 1_700_000_001_5, 1_700_000_002_000_000_000]
    with PcapWriter(tmp_path / "g.pcap", threaded=False) as w:
        _batches(g, t, 262144, 1, w)
    want = hand_pcap([(x // 10**9, x % 10**9, f, len(f)) for x, f in zip(t, g.frames)])
    assert (tmp_path / "g.pcap").read_bytes() == want
    assert calls == [2 * 3 + 1]              # three holes: buffer, hole, buffer, hole, ... buffer


def write_with(kind, path, t, g: GatherFrames | None, frames, *, order, iface, snaplen, batches,
               comments):
    """As test_pcap_writer.write, with the gather fill of ``g`` (None: the plain frames fill)."""
    t = np.asarray(t, np.int64)
    fb = np.array([len(f) for f in frames], np.int64)
    if kind.startswith("pcapng"):
        link = "infiniband" if kind.endswith("ib") else "ethernet"
        w = PcapngWriter(path, [Interface(f"nic{i}", link=link) for i in range(4)],
                         byte_order=order, snaplen=snaplen)
    elif kind == "erf":
        w = ErfWriter(path, snaplen=snaplen)
    else:
        w = PcapWriter(path, link="infiniband" if kind == "pcap-ib" else "ethernet",
                       byte_order=order, snaplen=snaplen)
    iface = np.broadcast_to(np.asarray(iface, np.int64), t.shape)
    with w:
        cuts = np.linspace(0, t.size, batches + 1).astype(int)
        for a, b in zip(cuts[:-1], cuts[1:]):
            if g is None:
                fill = frames_fill(frames[a:b])
            else:
                fill = GatherFrames.__new__(GatherFrames)
                fill.frames, fill.at, fill.size = g.frames[a:b], g.at[a:b], g.size[a:b]
                fill.source, fill._plain = SOURCE, frames_fill(fill.frames)
            w.write_batch(t[a:b], fb[a:b], fill, iface[a:b].copy(),
                          None if comments is None else comments[a:b])


@given(kind=st.sampled_from(KINDS), data=st.data(), batches=st.integers(1, 3),
       snaplen=st.sampled_from([262144, 1000, 600, 64]))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_gather_file_equals_plain_file_and_reads_back(tmp_path, kind, data, batches, snaplen):
    name, order = kind
    n = data.draw(st.integers(0, 12))
    t = data.draw(st.lists(st.integers(0, (1 << 32) * 10**9 - 1), min_size=n, max_size=n))
    lengths = data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    at = [data.draw(st.integers(0, max(0, x))) for x in lengths]
    size = [data.draw(st.integers(0, min(4096, x - a))) for x, a in zip(lengths, at)]
    iface = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    comments = data.draw(st.lists(TEXT, min_size=n, max_size=n))
    g = GatherFrames(lengths, at, size, seed=n)
    ng = name.startswith("pcapng")
    kw = dict(order=order, iface=iface, snaplen=snaplen, batches=batches,
              comments=comments if ng else None)
    plain, gath = tmp_path / f"p.{name}", tmp_path / f"g.{name}"
    write_with(name, plain, t, None, g.frames, **kw)
    write_with(name, gath, t, g, g.frames, **kw)
    assert gath.read_bytes() == plain.read_bytes()
    cap = open_capture(gath)
    rec = cap.read()
    assert [cap.frame(r) for r in rec] == [f[:snaplen] for f in g.frames]
    assert rec["orig_len"].tolist() == lengths


def test_short_writes_resume_where_they_stopped(tmp_path, monkeypatch):
    def trickle(fd, iov_addr, count):        # at most 1000 bytes per call, any iovec boundary
        iov = np.ctypeslib.as_array((ctypes.c_uint64 * (2 * count)).from_address(iov_addr))
        data = b"".join(ctypes.string_at(int(iov[2 * i]), int(iov[2 * i + 1])) for i in range(count))
        return os.write(fd, data[:1000])
    monkeypatch.setattr(gather, "_WRITEV", trickle)
    monkeypatch.setattr(gather, "_IOV_MAX", 3)
    g = GatherFrames([4170, 4154, 2000], at=[74, 58, 58], size=[4096, 4096, 1936])
    with PcapWriter(tmp_path / "s.pcap") as w:
        _batches(g, [1, 2, 3], 262144, 1, w)
    want = hand_pcap([(0, x, f, len(f)) for x, f in zip([1, 2, 3], g.frames)])
    assert (tmp_path / "s.pcap").read_bytes() == want


@pytest.mark.parametrize("threaded", [False, True])
def test_writev_failure_becomes_output_error_and_removes_temp(tmp_path, monkeypatch, threaded):
    def full(fd, iov_addr, count):
        ctypes.set_errno(errno.ENOSPC)
        return -1
    monkeypatch.setattr(gather, "_WRITEV", full)
    g = GatherFrames([4170], at=[74], size=[4096])
    with pytest.raises(OutputError, match="g.pcap: write failed: No space left"):
        with PcapWriter(tmp_path / "g.pcap", threaded=threaded) as w:
            _batches(g, [1], 262144, 1, w)
            w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_without_writev_the_plain_fill_is_used(tmp_path, monkeypatch):
    monkeypatch.setattr(gather, "AVAILABLE", False)
    g = GatherFrames([4170, 4154], at=[74, 58], size=[4096, 4096])
    with PcapWriter(tmp_path / "n.pcap", threaded=False) as w:
        _batches(g, [1, 2], 262144, 1, w)
    assert (tmp_path / "n.pcap").read_bytes() == hand_pcap([(0, x, f, len(f)) for x, f in zip([1, 2], g.frames)])


def test_short_holes_stay_in_the_buffer():
    g = GatherFrames([4170, 600, 100], at=[74, 58, 20], size=[4096, 520, 64])
    at, length = gather.gather_holes(g, np.array([4170, 600, 100]))
    assert at.tolist() == [74, 58, 20] and length.tolist() == [4096, 520, 0]
    assert gather.gather_holes(g, np.array([64, 64, 64])) is None
    assert gather.gather_holes(frames_fill(g.frames), np.array([4170, 600, 100])) is None


def test_iovec_table_interleaves_buffer_pieces_and_holes():
    out = np.zeros(100, np.uint8)
    iov = gather.iovecs(out, np.array([10, 10, 40]), np.array([8, 0, 16]), SOURCE)
    base, src = out.ctypes.data, SOURCE.ctypes.data
    assert iov.tolist() == [[base, 10], [src, 8], [base + 10, 30], [src, 16], [base + 40, 60]]


@pytest.mark.parametrize("kind", ["pcapng", "pcapng-ib", "erf", "pcap-ib"])
def test_every_writer_gathers_and_writes_the_plain_bytes(tmp_path, monkeypatch, kind):
    calls = []
    real = gather.writev_all
    monkeypatch.setattr("tokenpcap.pcap.output.writev_all",
                        lambda fd, iov: calls.append(len(iov)) or real(fd, iov))
    lengths = [4170, 61, 3001, 4154, 4154]
    g = GatherFrames(lengths, at=[74, 0, 59, 58, 58], size=[4096, 0, 2900, 4096, 4000])
    kw = dict(order=">", iface=[0, 1, 2, 3, 0], snaplen=262144, batches=2,
              comments=["a", None, "dp/backward/AllReduce", "ccc", "dd"] if kind.startswith("pcapng") else None)
    t = [5, 6, 7, 8, 9]
    write_with(kind, tmp_path / "g", t, g, g.frames, **kw)
    assert calls, "no gather write happened"
    write_with(kind, tmp_path / "p", t, None, g.frames, **kw)
    assert (tmp_path / "g").read_bytes() == (tmp_path / "p").read_bytes()
