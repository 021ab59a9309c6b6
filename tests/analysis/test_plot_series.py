"""plot_series: the numbers behind the capture pictures, against the trace's own construction
and capinfos' totals."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tests.analysis.trace import write_phase_trace
from tokenpcap.analysis.plot_series import CONTROL_LABEL, capture_series, count_values


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_phase_trace(tmp_path_factory.mktemp("series"))


def test_series_matches_capinfos_and_construction(trace):
    """Binned bytes, NICs, phases and size counts against the packet table the trace was built
    from and against capinfos' totals."""
    from tokenpcap.wire.builder import FrameBuilder

    from tests.analysis.trace import context
    path, p = trace
    s = capture_series(path, bins=50)
    assert sorted(s["nics"]) == [f"198.18.0.{g + 1}" for g in range(4)]
    assert sorted(s["phases"]) == ["dp/backward/AllReduce", "tp/forward/AllReduce"]
    flen = FrameBuilder(context()).frame_bytes(p)
    sizes, counts = np.unique(flen, return_counts=True)
    assert s["frame_sizes"] == dict(zip(sizes.tolist(), counts.tolist()))
    first = p["opcode"] == 6
    assert s["message_sizes"] == {int(p["reth_len"][0]): int(first.sum())}
    slot = (p["time_ns"] - p["time_ns"].min()) // s["bin_ns"]
    total = sum(int(v.sum()) for v in s["throughput"].values())
    assert total == int(flen.sum())
    nic0 = s["nics"].index("198.18.0.1")
    dp = s["phases"].index("dp/backward/AllReduce")
    mine = (p["nic"] == 0) & (np.arange(p.size) < p.size // 2)
    want = np.bincount(slot[mine], flen[mine], minlength=s["bins"]).astype(np.int64)
    assert s["throughput"][(nic0, dp)].tolist() == want.tolist()
    if shutil.which("capinfos"):
        out = subprocess.run(["capinfos", "-M", "-T", "-r", "-c", "-d", str(path)],
                             capture_output=True, text=True, check=True).stdout.split("\t")
        assert int(out[1]) == sum(s["frame_sizes"].values()) and int(out[2]) == total


def test_count_values_adds_to_what_is_there():
    into = {7: 2}
    count_values(into, np.array([[7, 3], [3, 3]], np.int64))
    assert into == {7: 3, 3: 3}


def test_phase_throughput_adds_files_on_common_bins(tmp_path):
    """Two captures (a run's per-NIC files) add up per phase on one set of bins: the bytes per
    phase equal the frame lengths of the packets written, and each packet lands in the bin of
    its time measured from the first packet of either file."""
    from tests.analysis.trace import context, packets, write_trace
    from tokenpcap.analysis.plot_series import capture_span, phase_throughput
    from tokenpcap.wire.builder import FrameBuilder

    p = packets(400, qps=4, packets_per_msg=16)
    a, b = p[:150].copy(), p[150:].copy()
    b["time_ns"] += 10_000                        # the second file starts later
    write_trace(tmp_path / "r_a.pcapng", a.size, fmt="pcapng", pkts=a,
                comments=["dp/backward/AllReduce"] * a.size)
    write_trace(tmp_path / "r_b.pcapng", b.size, fmt="pcapng", pkts=b,
                comments=["pp/forward/SendRecv"] * 200 + ["cts pp/forward/SendRecv"] * 50)
    paths = [tmp_path / "r_a.pcapng", tmp_path / "r_b.pcapng"]
    assert capture_span(paths) == (int(a["time_ns"][0]), int(b["time_ns"][-1]))
    thr = phase_throughput(paths, bins=40)
    assert thr["phases"] == ["dp/backward/AllReduce", "pp/forward/SendRecv", CONTROL_LABEL]
    flen = FrameBuilder(context()).frame_bytes(p).astype(np.int64)
    fa, fb = flen[:150], flen[150:]
    got = {k: int(v.sum()) for k, v in thr["bytes"].items()}
    assert got == {"dp/backward/AllReduce": int(fa.sum()),
                   "pp/forward/SendRecv": int(fb[:200].sum()), CONTROL_LABEL: int(fb[200:].sum())}
    t = np.concatenate([a["time_ns"], b["time_ns"]])
    slot = (t - thr["t0_ns"]) // thr["bin_ns"]
    total = sum(thr["bytes"].values())
    assert total.tolist() == np.bincount(slot, flen, minlength=thr["bins"]).astype(int).tolist()


def test_a_bin_width_and_a_time_window_from_the_first_frame(trace):
    """--bin NS: bins of NS ns from the window's start; --time-window: the frames whose time
    since the first frame is within it (both ends in), as Wireshark's frame.time_relative
    filter keeps them (checked with tshark when it is installed), against the packet table."""
    from tokenpcap.wire.builder import FrameBuilder

    from tests.analysis.trace import context
    path, p = trace
    flen = FrameBuilder(context()).frame_bytes(p)
    rel = p["time_ns"] - p["time_ns"][0]                   # frame.time_relative, ns
    assert rel.min() == 0 and rel.max() > 1000
    lo, hi = int(rel.max()) // 4, int(rel.max()) * 3 // 4
    s = capture_series(path, bin_ns=100, window=(lo, hi))
    keep = (rel >= lo) & (rel <= hi)
    assert 0 < keep.sum() < p.size
    assert s["bin_ns"] == 100 and s["start_ns"] == lo and s["bins"] == (hi - lo) // 100 + 1
    assert sum(s["frame_sizes"].values()) == int(keep.sum())
    nic0 = s["nics"].index("198.18.0.1")
    dp = s["phases"].index("dp/backward/AllReduce")
    mine = keep & (p["nic"] == 0) & (np.arange(p.size) < p.size // 2)
    want = np.bincount((rel[mine] - lo) // 100, flen[mine], minlength=s["bins"])
    assert s["throughput"][(nic0, dp)].tolist() == want.tolist()
    total = sum(int(v.sum()) for v in s["throughput"].values())
    assert total == int(flen[keep].sum())
    if shutil.which("tshark"):
        flt = f"frame.time_relative >= {lo / 1e9:.9f} && frame.time_relative <= {hi / 1e9:.9f}"
        out = subprocess.run(["tshark", "-r", str(path), "-Y", flt, "-T", "fields", "-e",
                              "frame.len"], capture_output=True, text=True, check=True).stdout
        lens = [int(x) for x in out.split()]
        assert len(lens) == int(keep.sum()) and sum(lens) == total
    open_end = capture_series(path, bin_ns=1000, window=(lo, None))
    assert sum(open_end["frame_sizes"].values()) == int((rel >= lo).sum())


def test_too_fine_a_bin_and_an_empty_window_are_refused(trace, monkeypatch):
    from tokenpcap.analysis import plot_series
    from tokenpcap.errors import InputError

    path, p = trace
    span = int(p["time_ns"].max() - p["time_ns"].min())
    monkeypatch.setattr(plot_series, "MAX_BINS", 10)
    least = -(-(span + 1) // 10)
    with pytest.raises(InputError, match=rf"^--bin: got 1 ns, expected at least {least:,} ns"):
        capture_series(path, bin_ns=1)
    assert capture_series(path, bin_ns=least)["bins"] <= 10
    with pytest.raises(InputError, match=r"^--time-window: got a window after the last frame"):
        capture_series(path, window=(span + 10**9, None))
    # both ends given: the end stood for the last frame, so the check compared the window with
    # itself and the picture failed later as "no RoCE/InfiniBand packets"
    with pytest.raises(InputError, match=r"^--time-window: got a window after the last frame"):
        capture_series(path, window=(span + 10**9, span + 2 * 10**9))


def test_a_window_in_a_silence_of_the_capture_is_named(tmp_path):
    """A window inside the capture's span that holds no frame (tshark's own filter on the
    relative time finds none) is refused naming the window and the file."""
    from tests.analysis.trace import packets, write_trace
    from tokenpcap.errors import InputError

    p = packets(8)
    p["time_ns"] = np.where(np.arange(p.size) < 4, p["time_ns"], p["time_ns"] + 10**9)
    path = tmp_path / "gap.pcap"
    write_trace(path, p.size, pkts=p)
    lo, hi = 500_000_000, 600_000_000           # inside the 1 s gap, after the first frame
    if shutil.which("tshark"):
        out = subprocess.run(["tshark", "-r", str(path), "-Y", f"frame.time_relative >= 0.5 && "
                              "frame.time_relative <= 0.6"], capture_output=True, text=True,
                             check=True).stdout
        assert out == ""
    with pytest.raises(InputError) as err:
        capture_series(path, window=(lo, hi))
    assert str(err.value) == (f"--time-window: got 500,000,000:600,000,000 ns after the first "
                              f"frame, which holds no frame of {path}, expected one that holds "
                              "frames")
    assert sum(capture_series(path, window=(0, lo))["frame_sizes"].values()) == 4


@pytest.mark.parametrize("text, want", [
    ("0.5:0.75", (500_000_000, 750_000_000)), ("1500us:", (1_500_000, None)),
    (":2ms", (None, 2_000_000)), ("0.000000001:10ns", (1, 10)),
])
def test_time_windows_read_as_wireshark_shows_time(text, want):
    from tokenpcap.analysis.plot_series import parse_time_window

    assert parse_time_window(text) == want


@pytest.mark.parametrize("text", ["", ":", "1", "a:b", "2:1", "-1:2", "1:2:3", "nan:1"])
def test_bad_time_windows_are_refused(text):
    from tokenpcap.analysis.plot_series import parse_time_window

    with pytest.raises(ValueError, match="got"):
        parse_time_window(text)


@pytest.mark.parametrize("ns_first", [True, False])
def test_sections_of_different_tsresol_are_binned_at_their_times(tmp_path, ns_first):
    """A pcapng of two one-packet sections, if_tsresol 9 (ns) and 6 (us), 5,000 ns apart,
    in both orders: the series spans 5,000 ns and bins each frame at its own time (plot
    refused the first order, a time 'int64 ns cannot hold', and tried to allocate 4.47 EiB
    of bins for the second)."""
    from tests.analysis.trace import T0, write_trace
    from tests.pcap.helpers import epb, idb, shb
    from tokenpcap.pcap.reader import open_capture

    write_trace(tmp_path / "one.pcap", 1)
    cap = open_capture(tmp_path / "one.pcap")
    frame = cap.frame(cap.read()[0])
    ns = shb("<") + idb("<", 1, 0, tsresol=9) + epb("<", 0, T0, frame)
    us = shb("<") + idb("<", 1, 0, tsresol=6) + epb("<", 0, T0 // 1000 + 5, frame)
    path = tmp_path / "two.pcapng"
    path.write_bytes(ns + us if ns_first else us + ns)
    s = capture_series(path, bin_ns=1000)
    assert s["t0_ns"] == T0 and s["bins"] == 6
    (row,) = s["throughput"].values()
    assert np.flatnonzero(row).tolist() == [0, 5] and row.sum() == 2 * len(frame)


def test_many_sections_are_decoded_once_per_batch_and_comments_parsed_once(tmp_path,
                                                                           monkeypatch):
    """2,000 one-packet sections, each with its own comment: capture_series decodes them in
    one batch (was: one decode per section) and parses each comment once (was: the whole
    comment list again for every section), with the same series as one section."""
    from tests.analysis.trace import write_trace
    from tests.pcap.helpers import comment_options, epb, idb, shb
    from tokenpcap.analysis import plot_series
    from tokenpcap.pcap.reader import open_capture

    n = 2000
    labels = [f"dp/backward/AllReduce step={i}" for i in range(n)]
    one = tmp_path / "one.pcapng"
    write_trace(one, n, fmt="pcapng", comments=labels)
    cap = open_capture(one)
    o = "<"
    many = tmp_path / "many.pcapng"
    many.write_bytes(b"".join(
        shb(o) + idb(o, 1, 0, tsresol=9)
        + epb(o, 0, int(r["time_ns"]), cap.frame(r), options=comment_options(o, labels[i]))
        for i, r in enumerate(cap.read())))
    calls = {"decode": 0, "parse": 0}
    real_decode, real_parse = plot_series.decode_batch, plot_series.parse_phase_label

    def decode(*a, **k):  # type: ignore[no-untyped-def]
        calls["decode"] += 1
        return real_decode(*a, **k)

    def parse(text):  # type: ignore[no-untyped-def]
        calls["parse"] += 1
        return real_parse(text)

    want = capture_series(one, bins=20)
    monkeypatch.setattr(plot_series, "decode_batch", decode)
    monkeypatch.setattr(plot_series, "parse_phase_label", parse)
    got = capture_series(many, bins=20)
    assert calls == {"decode": 1, "parse": n}
    assert {k: v for k, v in got.items() if k != "throughput"} == \
        {k: v for k, v in want.items() if k != "throughput"}
    assert got["throughput"].keys() == want["throughput"].keys()
    assert all((got["throughput"][k] == want["throughput"][k]).all() for k in want["throughput"])
