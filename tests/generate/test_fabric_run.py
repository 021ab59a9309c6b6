"""A generate run on a queued fabric (tokenpcap.generate.run with the engine's fabric): the
PAUSE frames of a receive-side capture as TShark decodes them, counted against the fabric's own
side files, and the side files landing with the captures.

Right values: TShark's 802.1Qbb dissector (``macc.opcode == 0x0101``, ``macc.cbfc.enbv``,
``macc.cbfc.pause_time.c3``) and the fabric's PFC log written beside the capture.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.fabricfiles import read_fabric_files
from tokenpcap.generate.options import GenerateOptions
from tokenpcap.generate.run import generate
from tokenpcap.generate.select import Selection
from tokenpcap.pcap.reader import open_capture
from tokenpcap.records.points import parse_point

GPU = {"name": "H100-SXM", "peak_tflops": 989}


def _incast(tmp_path: Path) -> Path:
    """8 -> 1 x 1 MiB into a 2 MB buffer: the switch pauses the senders."""
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "switch": {"buffer_bytes": 2_000_000}}
    path = tmp_path / "pause.yaml"
    path.write_text(yaml.safe_dump({
        "name": "pause", "cluster": {"name": "c", "nodes": 9, "gpus_per_node": 1,
                                     "nics_per_node": 1, "link_gbps": 400, "nvlink_gbps": 3600,
                                     "gpu": GPU, "fabric": fab},
        "workload": {"kind": "incast", "senders": 8, "bytes": 1 << 20},
        "collectives": {"algorithm": "ring", "channels": 1},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False}}))
    return path


def _run(tmp_path: Path, point: str, nics: frozenset[int] | None):
    s = load_scenario(_incast(tmp_path))
    out = tmp_path / point.replace(":", "-")
    out.mkdir()
    res = generate(s, GenerateOptions(out_dir=out, selection=Selection(nics=nics),
                                      point=parse_point(point)))
    return s, out, res


@pytest.mark.tshark
def test_tshark_decodes_every_pause_frame_of_a_sender_and_the_log_counts_them(tmp_path):
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed (CI installs Debian's tshark)")
    s, out, res = _run(tmp_path, "nic-rx", frozenset({1}))
    (cap,) = [p for p, _, _ in res.files]
    assert cap.name == "pause_node01_nic0_rx.pcapng"
    got = subprocess.run(["tshark", "-r", str(cap), "-Y", "macc.opcode == 0x0101", "-T", "fields",
                          "-e", "macc.cbfc.enbv", "-e", "macc.cbfc.pause_time.c3"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    rows = [r.split("\t") for r in got if r]
    log, summary = read_fabric_files(out, "pause")
    sent = log["pfc"][(log["pfc"]["port"] == 1)]           # switch0's port 1 faces NIC 1
    assert len(rows) > 0 and len(rows) == len(sent) == res.pfc_packets
    assert all(int(e, 16) == 1 << 3 for e, _ in rows)
    assert [int(q) for _, q in rows] == sent["quanta"].tolist()
    malformed = subprocess.run(["tshark", "-r", str(cap), "-Y", "_ws.malformed"],
                               capture_output=True, text=True, check=True).stdout
    assert malformed == ""
    assert {p.name for p in res.fabric_files} == {f"pause_fabric-{t}.csv" for t in
                                                  ("pfc", "queues", "links", "nics", "drops")} | {"pause_fabric.json"}
    assert summary.drops_total == 0 and summary.headroom_overflows == 0


def test_a_switch_port_mirror_holds_the_receivers_downlink_in_time_order(tmp_path):
    s, out, res = _run(tmp_path, "switch:switch0:0", None)
    (cap,) = [p for p, _, _ in res.files]
    with open_capture(cap) as c:
        t = c.read()["time_ns"]
    assert (np.diff(t) > 0).all()
    log, _ = read_fabric_files(out, "pause")
    port0 = log["links"][(log["links"]["port"] == 0)]
    assert res.packets == int(port0["tx_frames"][0]) + int(port0["pfc_sent"][0])
