"""plot --fabric: the busiest ports and their queue steps against a hand count, the PFC ticks
one per frame, the capture's throughput on the same time axis, and a PNG named after the
side files that lands whole."""
from __future__ import annotations

import numpy as np
import pytest

from tests.analysis.fabric_toy import incast, several_incasts
from tokenpcap.analysis import plot_fabric as pf
from tokenpcap.analysis.plot_fabric import (TOP_PORTS, busiest_ports, fabric_figure,
                                            plot_fabric_files, queue_steps)
from tokenpcap.analysis.plot_series import phase_throughput
from tokenpcap.errors import InputError
from tokenpcap.generate.fabricfiles import write_fabric_files
from tokenpcap.generate.options import EPOCH_NS
from tokenpcap.records.fabric import FABRIC_TABLES, FabricSummary, empty_log

PNG = b"\x89PNG\r\n\x1a\n"


def test_busiest_ports_by_hand():
    log = empty_log()
    log["queues"] = np.array([(0, 1, 2, 3, 500), (10, 1, 2, 3, 900), (0, 0, 7, 3, 900),
                              (0, 0, 1, 0, 100), (10, 2, 0, 3, 899)], FABRIC_TABLES["queues"])
    # peaks: (1,2) 900, (0,7) 900, (2,0) 899, (0,1) 100; ties by (switch, port)
    assert busiest_ports(log) == [(0, 7), (1, 2), (2, 0), (0, 1)]
    assert busiest_ports(log, 2) == [(0, 7), (1, 2)]
    assert busiest_ports(empty_log()) == []
    log, _ = several_incasts(10)
    peak = {}
    for t, s, p, _, b in log["queues"].tolist():
        peak[(s, p)] = max(peak.get((s, p), 0), b)
    want = sorted(peak, key=lambda k: (-peak[k], k))[:TOP_PORTS]
    assert busiest_ports(log) == want


def test_queue_steps():
    e, v = queue_steps(np.array([30, 0, 10]), np.array([7, 5, 6]), 10)
    assert e.tolist() == [0, 10, 10, 20, 30, 40] and v.tolist() == [5, 0, 6, 0, 7]
    e, v = queue_steps(np.array([0, 4]), np.array([1, 2]), 10)       # cut at the next sample
    assert e.tolist() == [0, 4, 4, 14] and v.tolist() == [1, 0, 2]
    e, v = queue_steps(np.zeros(0, np.int64), np.zeros(0, np.int64), 10)
    assert e.size == 0 and v.size == 0


def _vlines(ax):
    from matplotlib.collections import LineCollection
    return [c for c in ax.collections if isinstance(c, LineCollection)]


def test_figure_panels_ticks_and_legend():
    log, s = several_incasts(10)
    fig = fabric_figure(log, s)
    try:
        ports = busiest_ports(log)
        assert len(fig.axes) == TOP_PORTS
        for ax, (sw, port) in zip(fig.axes, ports):
            assert ax.get_title(loc="left").startswith(f"tor{sw} port {port} → nic {port}")
            ticks = sum(len(c.get_segments()) for c in _vlines(ax))
            assert ticks == int((log["pfc"]["switch"] == sw).sum())   # one tick per PFC frame
        assert "the 8 busiest of 10 queued ports" in fig._suptitle.get_text()
        assert fig.axes[-1].get_xlabel().startswith("time since the start of the run (µs)")
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        box = fig.axes[0].get_legend().get_window_extent(r)
        assert not any(box.overlaps(ax.get_window_extent(r)) for ax in fig.axes)
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_received_ticks_come_from_the_peer_switch():
    """A switch-to-switch egress port shows, dotted at the bottom, the PFC frames its peer
    sent on the peer port."""
    log, s = several_incasts(2)
    links = log["links"]
    i = int(np.flatnonzero((links["switch"] == 0) & (links["port"] == 2))[0])
    links["peer_nic"][i], links["peer_switch"][i], links["peer_port"][i] = -1, 1, 0
    fig = fabric_figure(log, s)
    try:
        ax = next(a for a in fig.axes if a.get_title(loc="left").startswith("tor0 port 2"))
        dotted = [c for c in _vlines(ax) if c.get_linestyle()[0][1] is not None]
        got = sum(len(c.get_segments()) for c in dotted)
        pfc = log["pfc"]
        assert got == int(((pfc["switch"] == 1) & (pfc["port"] == 0)).sum()) > 0
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_nothing_to_draw():
    with pytest.raises(InputError, match=r"^plot --fabric: got no queue sample"):
        fabric_figure(empty_log(), FabricSummary((), 0, 0, 0, "", "x"))


def _capture(path, t0_ns: int, n: int = 200):
    from tests.analysis.trace import packets, write_trace
    p = packets(n, qps=4, packets_per_msg=16)
    p["time_ns"] = p["time_ns"] - p["time_ns"][0] + t0_ns
    write_trace(path, n, fmt="pcapng", pkts=p,
                comments=["dp/backward/AllReduce"] * (n // 2)
                + ["tp/forward/AllReduce"] * (n - n // 2))
    return p


def test_file_with_capture_on_the_same_axis(tmp_path, monkeypatch):
    log, s = incast()
    write_fabric_files(tmp_path, "toy", log, s)
    _capture(tmp_path / "toy_node00_nic0.pcapng", EPOCH_NS + 2_000)
    seen = []
    real = pf.save_figure

    def keep(fig, out):
        ax = fig.axes[-1]
        seen.append((len(fig.axes), ax.get_title(loc="left"), ax.get_xlabel(),
                     [p.get_paths()[0].vertices[:, 0].min() for p in ax.collections]))
        return real(fig, out)

    monkeypatch.setattr(pf, "save_figure", keep)
    out = plot_fabric_files(tmp_path, "toy", tmp_path / "pics",
                            captures=[str(tmp_path / "toy_node00_nic0.pcapng")])
    assert [p.name for p in out] == ["toy-fabric-queues.png"]
    assert out[0].read_bytes()[:8] == PNG and out[0].stat().st_size > 20_000
    assert sorted(p.name for p in (tmp_path / "pics").iterdir()) == ["toy-fabric-queues.png"]
    (n_axes, title, xlabel, left), = seen
    assert n_axes == 2 and title.startswith("capture: layer-2 throughput")
    assert "aligned" not in xlabel
    assert min(left) == pytest.approx(2.0)      # the first packet 2,000 ns into the run, in µs


def test_capture_off_the_clock_is_aligned(tmp_path):
    log, s = incast()
    write_fabric_files(tmp_path, "toy", log, s)
    _capture(tmp_path / "lab.pcapng", 1_700_000_000 * 10**9)
    fig = fabric_figure(log, s, throughput=phase_throughput([tmp_path / "lab.pcapng"]))
    try:
        assert "capture aligned at its first packet" in fig.axes[-1].get_xlabel()
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
