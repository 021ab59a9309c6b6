"""NCCL's NCCL_STEPS window: at most 8 messages of a connection between its clear-to-send and
its data's arrival.

The rule, from NVIDIA/nccl 5067397c ``src/transport/net.cc`` ``recvProxyProgress`` (l. 1519-1533):
the receiver posts step ``posted`` (its clear-to-send) only while ``posted < done + NCCL_STEPS``,
``done`` the steps whose data has arrived. The oracle is a replay of the exported message table
(every connection's clear-to-send posts and data arrivals in time order, arrivals first at one
instant) that counts the steps posted and not yet done.
"""
from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.traffic import CallShape
from tokenpcap.collectives.transfers import transfers
from tokenpcap.collectives.window import window_pairs
from tokenpcap.export.core import export_scenario

PROFILES = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"
NCCL_STEPS = 8


def test_window_pairs_chain_each_connection():
    lay = RankLayout(dp=4, tp=1, pp=1, gpus_per_node=1, nics_per_node=1)
    tr = transfers(CallShape("AllReduce", (0, 1, 2, 3), 4 * 64 * 1024, 2), "ring", lay, 2, 4096,
                   "Simple", None, NCCL_STEPS)
    t = tr.table
    for conn in {(a, b, c) for a, b, c in zip(t["src_nic"], t["dst_nic"], t["channel"])}:
        rows = [i for i in range(len(t))
                if (t["src_nic"][i], t["dst_nic"][i], t["channel"][i]) == conn]
        rows.sort(key=lambda i: (t["step"][i], t["slice"][i], i))
        assert len(rows) > NCCL_STEPS
        for k, i in enumerate(rows):
            assert (rows[k - NCCL_STEPS] in tr.deps[i]) == (k >= NCCL_STEPS)
    assert window_pairs(t, 0)[0].size == 0


def _max_outstanding(path: Path) -> int:
    """Most steps of one connection posted (clear-to-send) and not yet arrived, over the run."""
    events = defaultdict(list)
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["kind"] == "cts":     # the receiver's write for connection (its peer, it, qp)
                events[(r["dst_nic"], r["src_nic"], r["qp"])].append((int(r["start_ns"]), 1))
            else:
                events[(r["src_nic"], r["dst_nic"], r["qp"])].append((int(r["end_ns"]), -1))
    worst = 0
    for ev in events.values():
        posted_not_done = 0
        for _, d in sorted(ev):        # at one instant the arrivals (-1) before the posts
            posted_not_done += d
            worst = max(worst, posted_not_done)
    return worst


@pytest.mark.parametrize("name,scale", [("dante", 64), ("mixtral-8x7b-ep", 1000)])
def test_no_connection_has_more_than_nccl_steps_in_flight(tmp_path, name, scale):
    (out,) = export_scenario(PROFILES / f"{name}.yaml", "csv", tmp_path / "m.csv", scale=scale)
    worst = _max_outstanding(out)
    assert 1 <= worst <= NCCL_STEPS
