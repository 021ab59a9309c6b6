"""The ``flows`` workload's flow file (:mod:`tokenpcap.config.flowfile`).

Independent sources: the HPCC ns-3 flow file format as ``third.cc`` ``ReadFlowInput`` reads it
(``src dst pg dport size start``; the first line the count), the export's own fixtures in
tests/cases/hpcc/ (``incast8x1m-flows.txt``: 8 senders to host 0 at 2 s), and the lane rule
(flow ``k`` of a pair in file order on lane ``k mod FLOW_LANES``) as a property.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.flowfile import FLOW_LANES, flow_lanes, read_flow_file
from tokenpcap.config.workload import workload_from
from tokenpcap.errors import ProfileError

CASES = Path(__file__).resolve().parents[2] / "tests" / "cases" / "hpcc"


def test_incast_flow_file_read():
    f = read_flow_file(CASES / "x.yaml", "workload.file", "incast8x1m-flows.txt", 64)
    assert f["src"].tolist() == list(range(1, 9))
    assert (f["dst"] == 0).all() and (f["size_bytes"] == 1 << 20).all()
    assert (f["start_ns"] == 0).all()          # all at 2.0 s: the earliest is time 0
    assert f["line"].tolist() == list(range(2, 10))
    assert f["lane"].tolist() == [0] * 8       # one flow per pair


def test_start_times_truncate_to_ns(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("3\n0 1 3 100 8 2.0000391365\n1 0 3 100 8 2.0000000005\n0 1 3 101 16 2.5\n")
    f = read_flow_file(tmp_path / "s.yaml", "workload.file", "f.txt", 2)
    # 2,000,039,136 - 2,000,000,000 and 500,000,000 ns after the earliest
    assert f["start_ns"].tolist() == [39136, 0, 500_000_000]
    assert f["lane"].tolist() == [0, 0, 1]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=400),
       st.integers(1, 9))
def test_lanes_count_each_pair(pairs, lanes):
    src = np.array([a for a, _ in pairs])
    dst = np.array([b for _, b in pairs])
    got = flow_lanes(src, dst, lanes)
    seen: dict = {}
    for i, p in enumerate(pairs):
        assert got[i] == seen.get(p, 0) % lanes
        seen[p] = seen.get(p, 0) + 1


@pytest.mark.parametrize("text, key, expect", [
    ("2\n0 1 3 100 8 2.0\n", "line 1", "the number of flow lines after it"),
    ("1\n0 1 3 100 8\n", "line 2", "6 fields"),
    ("1\n0 0 3 100 8 2.0\n", "line 2", "two different ranks"),
    ("1\n0 9 3 100 8 2.0\n", "line 2", "two different ranks"),
    ("1\n0 1 3 100 0 2.0\n", "line 2", "size_bytes >= 1"),
    ("1\n0 1 3 100 8 2e0\n", "line 2", "decimal start"),
])
def test_bad_flow_file_is_one_line(tmp_path, text, key, expect):
    (tmp_path / "f.txt").write_text(text)
    with pytest.raises(ProfileError) as e:
        workload_from(tmp_path / "s.yaml", "workload", {"kind": "flows", "file": "f.txt"}, 4)
    msg = str(e.value)
    assert "\n" not in msg and "workload.file" in msg and key in msg and expect in msg


def test_flows_refuses_bytes_and_missing_file(tmp_path):
    (tmp_path / "f.txt").write_text("1\n0 1 3 100 8 2.0\n")
    with pytest.raises(ProfileError, match="workload.bytes"):
        workload_from(tmp_path / "s.yaml", "workload", {"kind": "flows", "file": "f.txt",
                                                        "bytes": 8}, 4)
    with pytest.raises(ProfileError, match="readable flow file"):
        workload_from(tmp_path / "s.yaml", "workload", {"kind": "flows", "file": "no.txt"}, 4)
    w = workload_from(tmp_path / "s.yaml", "workload", {"kind": "flows", "file": "f.txt"}, 4)
    assert w.bytes == 8 and w.ranks == (0, 1) and w.flows.size == 1 and FLOW_LANES <= 249
