"""A generate run on a queued fabric with DCQCN (tokenpcap.generate.run, the engine's ECN marks
and CNPs): the congestion-control side files (tokenpcap.generate.ccfiles) counted against the
frames TShark decodes in the receiver's captures, and no such file without ECN.

Right values: TShark's InfiniBand dissector (``infiniband.bth.opcode == 0x81``, the RoCEv2 CNP
of the IBTA RoCEv2 annex A17.9.3) in the receiver's nic-tx capture, and its IP dissector
(``ip.dsfield.ecn == 3``, CE of RFC 3168) in the receiver's nic-rx capture.
"""
from __future__ import annotations

import re

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
    text = " ".join(r.output.split())
    assert f"{frames:,} CNPs" in text
    # the prediction is the plan's traffic: the CNPs come on top, and the line says so
    m = re.search(r"file bytes ([\d,]+) \(expected ([\d,]+) without the CNP frames\)", text)
    assert m, text
    assert int(m.group(1).replace(",", "")) > int(m.group(2).replace(",", ""))


@pytest.mark.tshark
def test_the_announced_size_and_the_meter_say_the_cnp_frames_come_on_top(tmp_path):
    """Before the run the size is the plan's traffic; the CNPs are the fabric's reaction,
    known once simulated. The line announcing the size and the meter's count of packets
    written say so, as the summary does (they said "512 packets, 76,072 bytes expected", then
    "615 of 512 packets written"); their numbers are the frames TShark finds besides the
    CNPs, and all of them."""
    from tokenpcap.stages import listening

    need_tshark()
    r = CliRunner().invoke(main, ["generate", str(scenario_file(tmp_path)), "-o",
                                  str(tmp_path / "cli"), "--nics", "0"])
    assert r.exit_code == 0, r.output
    (cap,) = sorted((tmp_path / "cli").glob("*.pcapng"))
    others = tshark_count(cap, "!(infiniband.bth.opcode == 0x81)")
    every = tshark_count(cap, "frame")
    text = " ".join(r.output.split())
    m = re.search(r"writing 1 pcapng file to \S+: ([\d,]+) packets, ([\d,]+) bytes expected "
                  r"without the CNP frames \(the fabric's reaction, known only once simulated;", text)
    assert m, text
    assert int(m.group(1).replace(",", "")) == others < every
    counts = []
    with listening(lambda line: None, after_s=0.0, meter=counts.append, every_s=10.0):
        out = tmp_path / "meter"
        out.mkdir()
        generate(load_scenario(scenario_file(tmp_path)),
                 GenerateOptions(out_dir=out, selection=Selection(nics=frozenset({0}))))
    assert counts[-1].final
    assert counts[-1].note == f"{every:,} packets written ({others:,} and the CNP frames)"


# ---------------------------------------------------------------- seeds
# The fabric's two seeds key its only random choices: ``fabric.ecmp.seed`` the switches' ECMP
# hash (which uplink a flow takes), ``fabric.ecn.seed`` RED's draw per (switch, port, packet).
# ``generation.seed`` keys the QPNs, PSNs, R_Keys and addresses (tests/generate/test_generate.py)
# and, through the UDP source port of a QP pair, the ECMP hash too.


def seeded(tmp_path: Path, name: str, fabric: dict, cluster: dict | None = None,
           workload: dict | None = None) -> Path:
    """scenario_file's 8 -> 1 x 256 KiB with ``fabric`` keys over its DCQCN fabric (and
    ``cluster`` / ``workload`` keys over its own)."""
    doc = yaml.safe_load(scenario_file(tmp_path).read_text())
    doc["cluster"]["fabric"] = {**doc["cluster"]["fabric"], **fabric}
    doc["cluster"].update(cluster or {})
    doc["workload"].update(workload or {})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def outputs(tmp_path: Path, path: Path, tag: str, point: str = "nic-rx") -> dict[str, bytes]:
    """``{file name: bytes}`` of a generate run of ``path`` (classic pcap, which carries no
    provenance text, every NIC)."""
    out = tmp_path / f"out-{tag}"
    out.mkdir()
    generate(load_scenario(path), GenerateOptions(out_dir=out, fmt="pcap",
                                                  point=parse_point(point)))
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def frames(data: bytes) -> list[tuple[bytes, bytes]]:
    """(record header, frame) per record of a classic pcap file."""
    out, i = [], 24
    while i < len(data):
        n = int.from_bytes(data[i + 8:i + 12], "little")
        out.append((data[i:i + 16], data[i + 16:i + 16 + n]))
        i += 16 + n
    return out


def test_same_seeds_same_bytes_with_dcqcn(tmp_path):
    path = seeded(tmp_path, "same", {"ecn": {"seed": 5}, "ecmp": {"seed": 3}})
    a, b = outputs(tmp_path, path, "a"), outputs(tmp_path, path, "b")
    assert any(n.endswith("_fabric-cnps.csv") for n in a) and len(a) > 4
    assert a == b


def test_another_red_seed_changes_only_which_packets_got_ce(tmp_path):
    """One switch (no ECMP choice), ECN marking without congestion control (a mark changes no
    time): two RED seeds give the same captures but for the ECN bits of data frames and their
    IPv4 header checksum (the ICRC masks both, RoCEv2 annex A17.3.3); the fabric's queues and
    PFC files are the same, only the CE counts differ."""
    ecn = {"cc": "none", "ecn": {"enabled": True}}
    a = outputs(tmp_path, seeded(tmp_path, "s0", {**ecn, "ecn": {"enabled": True, "seed": 0}}),
                "s0")
    b = outputs(tmp_path, seeded(tmp_path, "s1", {**ecn, "ecn": {"enabled": True, "seed": 1}}),
                "s1")
    assert a.keys() == b.keys()
    differ = sorted(n for n in a if a[n] != b[n])
    assert set(differ) == {"dcqcn_fabric-ce_ports.csv", "dcqcn_fabric-ce_qps.csv",
                           "dcqcn_node00_nic0_rx.pcap"}, differ
    fa, fb = (frames(x["dcqcn_node00_nic0_rx.pcap"]) for x in (a, b))
    assert len(fa) == len(fb)
    moved = 0
    for (ha, x), (hb, y) in zip(fa, fb):
        assert ha == hb and len(x) == len(y)
        d = {i for i in range(len(x)) if x[i] != y[i]}
        assert d <= {15, 24, 25}, d                       # IPv4 TOS (ECN) and checksum
        assert x[15] >> 2 == y[15] >> 2                     # DSCP kept
        moved += bool(d)
    assert moved > 0


@pytest.mark.parametrize("pmax", [0.0, 1.0])
def test_red_without_chance_makes_the_red_seed_change_nothing(tmp_path, pmax):
    """P_max 0 marks only above K_max, and K_min = K_max leaves no band in between: no draw
    decides anything, so with DCQCN on two RED seeds give the same bytes everywhere."""
    ecn = {"kmin_bytes": 65_536, "kmax_bytes": 65_536 if pmax else 131_072, "pmax": pmax}
    a = outputs(tmp_path, seeded(tmp_path, "p0", {"ecn": {**ecn, "seed": 0}}), "p0")
    b = outputs(tmp_path, seeded(tmp_path, "p1", {"ecn": {**ecn, "seed": 9}}), "p1")
    assert a == b and b"\n" in a["dcqcn_fabric-cnps.csv"].split(b"\n", 1)[1]   # CNPs were sent


def test_another_ecmp_seed_changes_only_the_uplink(tmp_path):
    """Two leaves of four, two spines, one 1 MiB flow from host 4 (second leaf) to host 0
    (first leaf), no congestion control and no ECN: ECMP seeds move the flow (and its ACKs)
    between the two spines, which shows in the links table's per-port frame counts and in
    which ports queued; the captures at the NICs and every other file stay the same, both
    paths being as long."""
    fab = {"topology": {"kind": "leaf-spine", "nodes_per_leaf": 4, "spines": 2,
                        "oversubscription": 2}, "cc": "none"}
    runs, uplinks = [], set()
    for seed in range(6):
        out = outputs(tmp_path, seeded(tmp_path, f"e{seed}", {**fab, "ecmp": {"seed": seed}},
                                       {"nodes": 8}, {"senders": [4], "bytes": 1 << 20}),
                      f"e{seed}")
        runs.append(out)
        head, *rows = [r.split(",") for r in out["dcqcn_fabric-links.csv"].decode().splitlines()]
        col = [head.index(c) for c in ("switch", "port", "tx_frames")]
        uplinks.add(tuple(tuple(r[c] for c in col) for r in rows if r[col[2]] != "0"))
    assert len(uplinks) > 1                                  # the seed moved the flow
    for r in runs[1:]:
        assert r.keys() == runs[0].keys()
        assert {n for n in r if r[n] != runs[0][n]} <= {"dcqcn_fabric-links.csv",
                                                        "dcqcn_fabric-queues.csv"}
