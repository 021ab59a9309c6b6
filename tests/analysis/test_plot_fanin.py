"""plot --fan-in (tokenpcap/analysis/plot_fanin.py): distinct senders with data to each receiver
per bin, against a hand count of a small built 3 -> 1 incast."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analysis.trace import T0, packets, write_trace
from tokenpcap.analysis.plot_fanin import fan_in_series, plot_fan_in
from tokenpcap.errors import InputError

PNG = b"\x89PNG\r\n\x1a\n"
US = 1000


def _incast(bins_of: dict[int, list[int]], to: int = 3):  # type: ignore[no-untyped-def]
    """One WRITE ONLY packet from NIC ``s`` to NIC ``to`` at 100 ns into each bin (1 µs wide)
    of ``bins_of[s]``, in time order."""
    rows = sorted((b, s) for s, bs in bins_of.items() for b in bs)
    p = packets(len(rows))
    p["time_ns"] = [T0 + b * US + 100 + 10 * s for b, s in rows]
    p["nic"], p["peer_nic"] = [s for _, s in rows], to
    p["opcode"], p["reth_len"] = 10, 4096                  # RDMA WRITE Only, one packet
    return p


def test_a_three_to_one_incast_counted_by_hand(tmp_path):
    # NIC 0 sends in bins 0-9, NIC 1 in 3-6, NIC 2 in bin 5 only, all to NIC 3; NIC 3 answers
    # with a clear-to-send write to NIC 1 in bin 2 (control: not data) and data to NIC 0 in
    # bin 8. By hand, receiver 198.18.0.4 (NIC 3): 1 1 1 2 2 3 2 1 1 1; receiver 198.18.0.1
    # (NIC 0): 1 in bin 8.
    p = _incast({0: list(range(10)), 1: [3, 4, 5, 6], 2: [5]})
    back = _incast({3: [2, 8]}, to=0)
    back["peer_nic"] = [1, 0]
    p = np.sort(np.concatenate([p, back]), order="time_ns")
    comments = ["cts mb 0" if (r["nic"] == 3 and r["peer_nic"] == 1) else "dp/backward/AllReduce"
                for r in p]
    path = tmp_path / "incast.pcapng"
    write_trace(path, 0, fmt="pcapng", pkts=p, comments=comments)
    s = fan_in_series([path], bin_ns=US)
    assert s["receivers"] == ["198.18.0.1", "198.18.0.4"]
    first = int(p["time_ns"][0]) - T0                     # bins start at the first frame
    assert first == 100 and s["bin_ns"] == US
    assert s["fan_in"][1, :10].tolist() == [1, 1, 1, 2, 2, 3, 2, 1, 1, 1]
    assert s["fan_in"][0].tolist() == [0] * 8 + [1] + [0] * (s["bins"] - 9)
    assert s["senders"].tolist() == [1, 3]
    out = plot_fan_in(s, tmp_path / "f.png")
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 10_000


def test_per_nic_files_count_as_one_capture(tmp_path):
    p = _incast({0: list(range(10)), 1: [3, 4, 5, 6], 2: [5]})
    files = []
    for g in range(3):
        files.append(tmp_path / f"nic{g}.pcap")
        write_trace(files[-1], 0, pkts=p[p["nic"] == g])
    s = fan_in_series(files, bin_ns=US)
    assert s["receivers"] == ["198.18.0.4"]
    assert s["fan_in"][0, :10].tolist() == [1, 1, 1, 2, 2, 3, 2, 1, 1, 1]


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(st.integers(0, 5), st.sets(st.integers(0, 19), min_size=1), min_size=1))
def test_fan_in_is_the_senders_in_each_bin(tmp_path_factory, bins_of):
    # bin 0 always holds a frame of the lowest sender, so that bins start at T0 + 100 ns + ...
    p = _incast({s: sorted(b) for s, b in bins_of.items()}, to=7)
    path = tmp_path_factory.mktemp("fan") / "f.pcap"
    write_trace(path, 0, pkts=p)
    s = fan_in_series([path], bin_ns=US)
    start = int(p["time_ns"][0])
    slot = (p["time_ns"] - start) // US
    want = np.zeros(s["bins"], np.int64)
    for b in np.unique(slot):
        want[b] = len(set(p["nic"][slot == b].tolist()))
    assert s["fan_in"][0].tolist() == want.tolist()
    assert s["senders"].tolist() == [len(bins_of)]


def test_no_data_is_an_error(tmp_path):
    s = {"receivers": [], "fan_in": np.zeros((0, 3), np.int64), "senders": np.zeros(0, np.int64),
         "bin_ns": 1, "bins": 3}
    with pytest.raises(InputError, match="--fan-in: got no RoCE"):
        plot_fan_in(s, tmp_path / "f.png")
