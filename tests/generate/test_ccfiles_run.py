"""A generate run on a queued fabric with DCQCN (tokenpcap.generate.run, the engine's ECN marks
and CNPs): the congestion-control side files (tokenpcap.generate.ccfiles) counted against the
frames TShark decodes in the receiver's captures, and no such file without ECN.

Right values: TShark's InfiniBand dissector (``infiniband.bth.opcode == 0x81``, the RoCEv2 CNP
of the IBTA RoCEv2 annex A17.9.3) in the receiver's nic-tx capture, and its IP dissector
(``ip.dsfield.ecn == 3``, CE of RFC 3168) in the receiver's nic-rx capture.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.ccfiles import cc_summary_name, read_cc_files
from tokenpcap.generate.options import GenerateOptions
from tokenpcap.generate.run import generate
from tokenpcap.generate.select import Selection
from tokenpcap.records.points import parse_point

GPU = {"name": "H100-SXM", "peak_tflops": 989}
STEM = "dcqcn"


def scenario_file(tmp_path: Path, cc: str = "dcqcn") -> Path:
    """8 -> 1 x 256 KiB through one switch, DCQCN with a CNP frame per CE-marked packet (the
    hpcc-ns3 preset's thresholds, its CNP-in-ACK turned off)."""
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "cc": cc}
    if cc == "dcqcn":
        fab["np"] = {"cnp_in_ack": False, "min_time_between_cnps": 0}
    path = tmp_path / f"{STEM}-{cc}.yaml"
    path.write_text(yaml.safe_dump({
        "name": STEM, "cluster": {"name": "c", "nodes": 9, "gpus_per_node": 1,
                                  "nics_per_node": 1, "link_gbps": 100, "nvlink_gbps": 3600,
                                  "gpu": GPU, "fabric": fab},
        "workload": {"kind": "incast", "senders": 8, "receiver": 0, "bytes": 1 << 18},
        "collectives": {"algorithm": "ring", "channels": 1},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False,
                       "ack_every_packets": 1}}))
    return path


def run(tmp_path: Path, point: str, cc: str = "dcqcn", nics=frozenset({0}), ranks=None):
    which = "-ranks" + "-".join(map(str, sorted(ranks))) if ranks else ""
    out = tmp_path / f"{point}-{cc}{which}"
    out.mkdir()
    res = generate(load_scenario(scenario_file(tmp_path, cc)),
                   GenerateOptions(out_dir=out, selection=Selection(nics=nics, ranks=ranks),
                                   point=parse_point(point)))
    return out, res


def tshark_count(cap: Path, display_filter: str) -> int:
    got = subprocess.run(["tshark", "-r", str(cap), "-Y", display_filter, "-T", "fields",
                          "-e", "frame.number"], capture_output=True, text=True, check=True)
    return len(got.stdout.split())


def need_tshark() -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed (CI installs Debian's tshark)")


@pytest.mark.tshark
def test_the_cnp_file_has_a_row_per_cnp_frame_the_receiver_sends(tmp_path):
    need_tshark()
    out, res = run(tmp_path, "nic-tx")
    log = read_cc_files(out, STEM)
    (cap,) = [p for p, _, _ in res.files]
    frames = tshark_count(cap, "infiniband.bth.opcode == 0x81")
    assert frames > 0
    assert log["cnps"].size == frames == res.cnp_packets
    assert set(log["cnps"]["np_nic"].tolist()) == {0}
    assert log["ce_qps"]["cnps_received"].sum() == frames
    assert (out / cc_summary_name(STEM)) in res.fabric_files


@pytest.mark.tshark
def test_the_ce_file_counts_the_ce_frames_the_receiver_gets(tmp_path):
    need_tshark()
    out, _ = run(tmp_path, "nic-rx")
    log = read_cc_files(out, STEM)
    (cap,) = sorted(out.glob("*.pcapng"))
    ce = tshark_count(cap, "ip.dsfield.ecn == 3")
    assert ce > 0
    assert log["ce_qps"]["ce_received"].sum() == ce
    assert set(log["ce_qps"]["dst_nic"].tolist()) == {0}
    # every mark is made on the one switch's downlink to the receiver
    assert log["ce_ports"]["ce_marked"].sum() == ce


def test_no_cc_file_when_the_fabric_marks_nothing(tmp_path):
    out, res = run(tmp_path, "nic-tx", cc="none")
    assert not list(out.glob("*_fabric-cc.json")) and not list(out.glob("*cnps*"))
    assert read_cc_files(out, STEM) is None
    assert res.cnp_packets == 0


@pytest.mark.tshark
def test_ranks_keep_the_cnps_the_receivers_rank_sends_as_its_acks(tmp_path):
    """A CNP goes from the data's receiver (rank 0 on NIC 0) to its sender, as an ACK: --ranks 0
    at nic-tx keeps every CNP NIC 0 sends and no data; --ranks 1 keeps none of them."""
    need_tshark()
    out, res = run(tmp_path, "nic-tx", nics=None, ranks=frozenset({0}))
    log = read_cc_files(out, STEM)
    (cap,) = [p for p, _, _ in res.files]
    assert tshark_count(cap, "infiniband.bth.opcode == 0x81") == log["cnps"].size == \
        res.cnp_packets > 0
    assert sum(res.phase_packets.values()) == 0 and res.ack_packets > 0
    _, res1 = run(tmp_path, "nic-tx", nics=None, ranks=frozenset({1}))
    assert res1.cnp_packets == 0 and res1.ack_packets == 0


@pytest.mark.tshark
def test_the_generate_summary_counts_the_cnp_frames(tmp_path):
    """The CLI's control-traffic line counts the CNPs it wrote, as TShark counts them."""
    need_tshark()
    out = tmp_path / "cli"
    r = CliRunner().invoke(main, ["generate", str(scenario_file(tmp_path)), "-o", str(out),
                                  "--nics", "0"])
    assert r.exit_code == 0, r.output
    (cap,) = sorted(out.glob("*.pcapng"))
    frames = tshark_count(cap, "infiniband.bth.opcode == 0x81")
    assert f"{frames:,} CNPs" in " ".join(r.output.split())
