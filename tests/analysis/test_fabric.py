"""The fabric summary of ``inspect``: its numbers against a hand count of the arrays (the toy
incast of tests/analysis/fabric_toy.py and tables written by hand), its checks, and how side
files are found."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analysis.fabric_toy import incast
from tokenpcap.analysis.fabric import (MAX_PORT_ROWS, fabric_beside, fabric_report, find_fabric,
                                       render_fabric_text)
from tokenpcap.errors import InputError
from tokenpcap.generate.fabricfiles import write_fabric_files
from tokenpcap.records.fabric import FABRIC_TABLES, FabricSummary, empty_log


def check(doc, name):
    return next(c for c in doc["checks"] if c["name"] == name)


def test_toy_incast_conserves_what_it_sends():
    """The toy itself: every frame sent reaches the receiver, PFC alternates XOFF/XON per
    port, so the independent generator is sane before it is used as an oracle."""
    log, s = incast(senders=4, frames_each=25)
    nics = log["nics"]
    assert nics["rx_frames"].sum() == 100 == s.packet_hops
    for port in range(4):
        ev = log["pfc"][log["pfc"]["port"] == port]
        assert ev["xoff"].tolist() == [1, 0] * (ev.size // 2)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(1, 60), st.integers(2, 12))
def test_report_equals_a_hand_count(senders, frames, xoff_frames):
    log, s = incast(senders=senders, frames_each=frames, xoff_bytes=1000 * xoff_frames,
                    xon_bytes=1000 * (xoff_frames // 2))
    doc = fabric_report(log, s)
    pfc = log["pfc"].tolist()
    # per port: the XOFF and XON counts equal the rows of the event table for that port
    for row in doc["ports"]:
        mine = [e for e in pfc if (e[1], e[2]) == (row["switch"], row["port"])]
        assert row["xoff_sent"] == sum(1 for e in mine if e[4] == 1)
        assert row["xon_sent"] == sum(1 for e in mine if e[4] == 0)
        assert row["xoff_sent"] + row["xon_sent"] == row["pfc_sent"]
    assert sum(r["xoff_sent"] for r in doc["ports"]) == doc["pfc"]["xoff"] == \
        sum(1 for e in pfc if e[4] == 1)
    assert doc["pfc"]["frames"] == len(pfc)
    # the receiver's port carries every frame; the senders' ports only PFC
    recv = [r for r in doc["ports"] if r["port"] == senders]
    assert len(recv) == 1 and recv[0]["tx_frames"] == senders * frames
    assert recv[0]["tx_bytes"] == senders * frames * 1000 == doc["nics"]["rx_bytes"]
    assert recv[0]["max_queue_bytes"] == int(log["queues"]["max_bytes"].max())
    paused = {n: p for n, _, p, _, _ in log["nics"].tolist() if p}
    assert {e["nic"]: e["paused_ns"] for e in doc["nics_paused"]} == \
        {n: p for n, p in paused.items()} | {e["nic"]: 0 for e in doc["nics_paused"]
                                             if e["nic"] not in paused}
    assert doc["ok"], doc["checks"]


def test_idle_ports_are_left_out_and_peers_named():
    log = empty_log()
    log["links"] = np.array([
        (1, 0, -1, 0, 5, 400.0, 10, 41_700, 0, 2, 300, 8_340),   # busy, to spine0:5
        (1, 1, 7, -1, -1, 400.0, 0, 0, 0, 0, 0, 0),               # idle
        (0, 5, -1, 1, 0, 400.0, 3, 300, 2, 0, 0, 0),              # PFC back
    ], FABRIC_TABLES["links"])
    log["pfc"] = np.array([(5, 0, 5, 3, 1, 65535), (9, 0, 5, 3, 0, 0)], FABRIC_TABLES["pfc"])
    s = FabricSummary(("spine0", "leaf0"), 13, 0, 0, "", "leaf-spine")
    doc = fabric_report(log, s)
    assert [(r["switch_name"], r["port"], r["peer"]) for r in doc["ports"]] == \
        [("spine0", 5, "leaf0:0"), ("leaf0", 0, "spine0:5")]
    assert doc["ports_total"] == 3
    assert (doc["ports"][1]["pfc_received"], doc["ports"][1]["paused_ns"]) == (2, 300)
    text = render_fabric_text(doc)
    assert "Switch ports:        2 of 3 with traffic" in text
    assert "leaf0   0     spine0:5" in text


def test_lossless_drops_and_headroom_warn():
    log = empty_log()
    log["drops"] = np.array([(0, 2, 3, 7, 7000), (0, 2, 0, 5, 320)], FABRIC_TABLES["drops"])
    s = FabricSummary(("tor0",), 99, 4, 12, "", "single-switch")
    doc = fabric_report(log, s)
    assert doc["drops"] == {"packets": 12, "bytes": 7320, "lossless_packets": 7,
                            "rows": [{"switch": 0, "switch_name": "tor0", "port": 2,
                                      "priority": 3, "packets": 7, "bytes": 7000,
                                      "lossless": True},
                                     {"switch": 0, "switch_name": "tor0", "port": 2,
                                      "priority": 0, "packets": 5, "bytes": 320,
                                      "lossless": False}]}
    assert not check(doc, "fabric-lossless")["ok"] and not check(doc, "fabric-headroom")["ok"]
    assert check(doc, "fabric-drops")["ok"] and not doc["ok"]
    text = render_fabric_text(doc)
    assert ("  WARNING: 7 packets dropped on lossless priorities (tor0 port 2 priority 3: 7); "
            "PFC classes must never drop") in text
    assert "  WARNING: 4 lossless packets arrived with the ingress headroom full" in text
    assert "Drops:               12 packets, 7,320 bytes (lossless priorities: 7)" in text
    lossy = dict(log, drops=log["drops"][1:])
    doc = fabric_report(lossy, FabricSummary(("tor0",), 99, 0, 5, "", "x"))
    assert doc["ok"] and "WARNING" not in render_fabric_text(doc)


def test_pfc_counter_mismatch_fails():
    log, s = incast()
    log["links"]["pfc_sent"][0] += 1
    c = check(fabric_report(log, s), "fabric-pfc")
    assert not c["ok"] and c["detail"].startswith("1 port whose PFC frames in the event table")
    log, s = incast()
    log["pfc"]["port"][0] = 17                   # an event on a port without a link row
    c = check(fabric_report(log, s), "fabric-pfc")
    assert not c["ok"] and "tor0 port 17: 1 events, no link row" in c["detail"]
    assert not check(fabric_report(log, FabricSummary(("tor0",), 0, 0, 3, "", "x")),
                     "fabric-drops")["ok"]


def test_text_shows_the_busiest_ports_when_many():
    n = MAX_PORT_ROWS + 10
    log = empty_log()
    log["links"] = np.array([(0, p, p, -1, -1, 100.0, 1, 100, 0, 0, 0, p) for p in range(n)],
                            FABRIC_TABLES["links"])
    text = render_fabric_text(fabric_report(log, FabricSummary(("t",), 0, 0, 0, "", "x")))
    assert (f"... {MAX_PORT_ROWS} of {n} shown: those with the largest max queue, in switch "
            "and port order") in text
    assert f"nic {n - 1} " in text and "nic 9 " not in text
    # port p has max queue p: the kept ports 10..49 are listed in port order, not largest first
    listed = [int(w.split()[1]) for w in text.splitlines() if w.startswith("    t ")]
    assert listed == list(range(n - MAX_PORT_ROWS, n))


def test_find_fabric_and_beside(tmp_path):
    log, s = incast()
    with pytest.raises(InputError, match=r"--fabric .*: got none, expected one <stem>_fabric"):
        find_fabric(tmp_path)
    write_fabric_files(tmp_path, "toy", log, s)
    assert find_fabric(tmp_path) == (tmp_path, "toy")
    assert find_fabric(tmp_path / "toy_fabric.json") == (tmp_path, "toy")
    write_fabric_files(tmp_path, "toy_b", log, s)
    with pytest.raises(InputError, match=r"got toy_fabric.json, toy_b_fabric.json, expected one"):
        find_fabric(tmp_path)
    with pytest.raises(InputError, match=r"--fabric: got '.*nope', expected a directory"):
        find_fabric(tmp_path / "nope")
    caps = [str(tmp_path / "toy_b_node00_nic0.pcapng"), str(tmp_path / "toy_b_node00_nic1.pcapng")]
    assert fabric_beside(caps) == (tmp_path, "toy_b")           # the longest stem
    assert fabric_beside([str(tmp_path / "toy_x.pcap")]) == (tmp_path, "toy")
    assert fabric_beside([str(tmp_path / "other.pcap")]) is None
    assert fabric_beside([str(tmp_path / "toy.pcap")]) == (tmp_path, "toy")     # --split none
    assert fabric_beside([str(tmp_path / "toyota.pcap")]) is None
    assert fabric_beside([caps[0], "/elsewhere/toy_b_x.pcap"]) is None
