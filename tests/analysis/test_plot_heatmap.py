"""plot --heatmap (tokenpcap/analysis/plot_heatmap.py): the NICs x time matrix keeps every byte
each NIC sent, one file of many NICs and one file per NIC give the same matrix, and it draws."""
from __future__ import annotations

import numpy as np
import pytest

from tests.analysis.trace import context, packets, write_phase_trace, write_trace
from tokenpcap.analysis.plot_heatmap import heatmap_series, plot_heatmap
from tokenpcap.errors import InputError
from tokenpcap.wire.builder import FrameBuilder

PNG = b"\x89PNG\r\n\x1a\n"


def _frame_bytes_by_nic(p) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Wire bytes each NIC sends, from the frames the builder makes (198.18.0.(g+1) is NIC g,
    tests/analysis/trace.py)."""
    size = FrameBuilder(context()).frame_bytes(p).astype(np.int64)
    return {f"198.18.0.{g + 1}": int(size[p["nic"] == g].sum()) for g in np.unique(p["nic"])}


@pytest.mark.parametrize("bin_ns", [None, 333, 10_000])
def test_each_row_sums_to_the_bytes_its_nic_sent(tmp_path, bin_ns):
    path, p = write_phase_trace(tmp_path)
    s = heatmap_series([path], bin_ns=bin_ns)
    want = _frame_bytes_by_nic(p)
    assert s["nics"] == sorted(want)                       # 198.18.0.1 .. .4, address order
    assert dict(zip(s["nics"], s["bytes"].sum(axis=1).tolist())) == want
    assert (s["family_bytes"].sum(axis=1) == s["bytes"].sum(axis=1)).all()
    assert s["families"] == ["dp", "tp"]                   # FAMILY_COLORS' order
    if bin_ns is not None:
        assert s["bin_ns"] == bin_ns and s["bytes"].shape[1] == s["bins"]


def test_one_file_per_nic_gives_the_matrix_of_one_file_of_every_nic(tmp_path):
    p = packets(3000)
    one = tmp_path / "all.pcap"
    write_trace(one, len(p), pkts=p)
    per = []
    for g in range(4):
        per.append(tmp_path / f"nic{g}.pcap")
        write_trace(per[-1], 0, pkts=p[p["nic"] == g])
    a, b = heatmap_series([one], bin_ns=1000), heatmap_series(per, bin_ns=1000)
    assert a["nics"] == b["nics"] and (a["bytes"] == b["bytes"]).all()
    assert a["bytes"].sum() == sum(_frame_bytes_by_nic(p).values())


def test_a_time_window_keeps_the_bytes_inside_it(tmp_path):
    path, p = write_phase_trace(tmp_path)
    t = p["time_ns"] - p["time_ns"][0]
    s = heatmap_series([path], window=(1000, 50_000), bin_ns=500)
    inside = p[(t >= 1000) & (t <= 50_000)]
    assert dict(zip(s["nics"], s["bytes"].sum(axis=1).tolist())) == _frame_bytes_by_nic(inside)


def test_the_heatmap_png(tmp_path):
    path, _ = write_phase_trace(tmp_path)
    out = plot_heatmap(heatmap_series([path]), tmp_path / "h.png")
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 10_000


def test_no_rdma_frame_is_an_error(tmp_path):
    s = {"nics": [], "bytes": np.zeros((0, 3), np.int64), "families": [],
         "family_bytes": np.zeros((0, 0), np.int64), "bin_ns": 1, "bins": 3}
    with pytest.raises(InputError, match="--heatmap: got no RoCE"):
        plot_heatmap(s, tmp_path / "h.png")
    assert not (tmp_path / "h.png").exists()
