"""The inspect command through click: output, JSON keys, --strict exit codes, --against the
plan (the plan's bytes per phase are the independent stage-3 numbers), errors in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.analysis.test_inspect import write
from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def vectors(tmp_path, scapy_vectors):
    return write(tmp_path / "v.pcap", [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]])


def test_text_and_json(vectors):
    r = run("inspect", vectors)
    assert r.exit_code == 0
    assert "Number of packets:   16" in r.output and "FAIL icrc: 1 bad of 14 checked" in r.output
    j = json.loads(run("inspect", vectors, "--json").output)
    assert (j["packets"], j["roce"]["cnp"], j["roce"]["icrc_bad"], j["pfc"]["frames"]) == \
        (16, 1, 1, 2)
    assert j["first_ns"] == 1_700_000_000 * 10**9 and j["last_ns"] - j["first_ns"] == 15_000


def test_strict_exit_codes(tmp_path, vectors, scapy_vectors):
    assert run("inspect", vectors, "--strict").exit_code == 1          # a bad ICRC on purpose
    good = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"][:3]]
    clean = write(tmp_path / "clean.pcap", good)
    assert run("inspect", clean, "--strict").exit_code == 0
    r = run("inspect", clean, "--strict", "--no-crc", "--json")
    assert r.exit_code == 0 and json.loads(r.output)["roce"]["icrc_unchecked"] == 3


def test_errors_are_one_line(tmp_path):
    (tmp_path / "x.pcap").write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + b"\0" * 16 +
                                      b"\0" * 8 + b"\xff\xff\xff\x00" + b"\0" * 4)   # caplen 16 MiB
    r = run("inspect", tmp_path / "x.pcap")
    assert r.exit_code == 1 and r.output.startswith("error: ") and "byte offset 24" in r.output
    assert r.output.count("\n") == 1
    r = run("inspect", tmp_path / "missing.pcap")
    assert r.exit_code == 1 and "cannot open" in r.output


def test_counts_of_one_are_singular(tmp_path, scapy_vectors):
    """WRITE FIRST at PSN 0xfffffe then WRITE LAST at 0x000000 on one QP: one flow, one PSN
    (0xffffff, across the 24-bit wrap) missing, so one gap."""
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    r = run("inspect", write(tmp_path / "gap.pcap", [frames[0], frames[2]]))
    lines = r.output.splitlines()
    assert "RDMA packets:        2 in 1 flow (src, dst, DestQP)" in lines
    assert "PSN:                 1 gap (1 missing), 0 late/duplicate" in lines
    assert "  FAIL psn: 1 gap (1 PSN missing), 0 late" in lines


def test_a_directory_stands_for_its_captures_sorted(tmp_path, scapy_vectors):
    """``inspect DIR`` reads every .pcap/.pcapng/.erf file in DIR, sorted by name (not hidden
    files, not other files): the same report as naming those files in that order."""
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    d = tmp_path / "caps"
    d.mkdir()
    b = write(d / "b.pcap", frames[:3])
    a = write(d / "a.pcap", frames[3:])
    write(d / ".a.part.pcap", frames)
    (d / "notes.txt").write_text("not a capture", encoding="utf-8")
    by_dir = run("inspect", d, "--json")
    assert by_dir.exit_code == 0, by_dir.output
    assert json.loads(by_dir.output) == json.loads(run("inspect", a, b, "--json").output)
    assert json.loads(by_dir.output)["packets"] == len(frames)


def test_a_directory_without_captures_is_one_line(tmp_path):
    (tmp_path / "notes.txt").write_text("not a capture", encoding="utf-8")
    r = run("inspect", tmp_path)
    assert r.exit_code == 1
    assert r.output == (f"error: {tmp_path}: got a directory without .pcap, .pcapng or .erf "
                        "files, expected captures\n")


@pytest.fixture(scope="module")
def dante_pp(tmp_path_factory):
    """The pipeline-parallel phases of one Dante iteration, generated at full size."""
    gen = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.config.profiles import load_scenario
    out = tmp_path_factory.mktemp("gen")
    res = gen.generate(load_scenario(DANTE), gen.GenerateOptions(
        out_dir=out, fmt="pcapng", split="none", selection=gen.Selection(phases=("pp",))))
    return res.files[0][0]


def test_against_the_plan(dante_pp):
    from tokenpcap.plan.build import build_plan
    from tokenpcap.config.profiles import load_scenario
    plan = {r.name: r.nic_bytes for r in build_plan(load_scenario(DANTE)).rows}
    r = run("inspect", dante_pp, "--against", DANTE, "--json", "--strict")
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    got = {p["name"]: p["payload_bytes"] for p in j["phases"]}
    for name in ("pp/forward/SendRecv", "pp/backward/SendRecv"):
        assert got[name] == plan[name]                                   # to the byte
    assert got["pp/forward/SendRecv [cts]"] == 64 * j["phases"][[p["name"] for p in j[
        "phases"]].index("pp/forward/SendRecv [cts]")]["packets"]
    assert j["against"]["differences"] == [] and j["against"]["note"]   # per-NIC skipped
    assert j["roce"]["icrc_bad"] == 0 and j["roce"]["psn_gaps"] == 0


def test_against_another_scenario_differs(dante_pp):
    """The capture's provenance names another scenario than --against: that is the first line of the --against block and the start of the failing check; the check counts the
    differing cells out of the compared ones and the unplanned addresses apart."""
    import re
    other = ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml"
    r = run("inspect", dante_pp, "--against", other, "--strict")
    assert r.exit_code == 1
    lines = r.output.splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("Against the plan of"))
    mismatch = "the capture was made from scenario 'dante', not 'gpt2-all-cross'"
    assert lines[head + 1].startswith(f"  MISMATCH:      {mismatch}")
    fail = next(x for x in lines if x.startswith("  FAIL against: "))
    assert fail.startswith(f"  FAIL against: {mismatch}")
    j = json.loads(run("inspect", dante_pp, "--against", other, "--json").output)["against"]
    cells = [d for d in j["differences"] if d["what"] in ("nic", "nic/phase")]
    addresses = [d for d in j["differences"] if d["what"] not in ("nic", "nic/phase")]
    assert len(cells) <= j["compared"] and j["note"].startswith(mismatch)
    m = re.search(r"(\d+) of (\d+) compared cells differ from the plan", fail)
    assert m and (int(m[1]), int(m[2])) == (len(cells), j["compared"])
    assert (f"{len(addresses)} capture addresses have no NIC in the plan" in fail) == \
        bool(addresses)


def test_against_the_plan_per_nic(tmp_path):
    """A capture of two NICs (every phase): their payload bytes equal the plan's per-NIC bytes,
    phase by phase; the other NICs are named as not covered."""
    gen = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.plan.build import build_plan
    from tokenpcap.config.profiles import load_scenario
    res = gen.generate(load_scenario(DANTE), gen.GenerateOptions(
        out_dir=tmp_path, fmt="pcapng", split="none", selection=gen.Selection(
            nics=frozenset({0, 5}))))
    per_nic = build_plan(load_scenario(DANTE)).nic_bytes_per_nic()
    r = run("inspect", res.files[0][0], "--against", DANTE, "--json", "--strict")
    assert r.exit_code == 0, r.output
    a = json.loads(r.output)["against"]
    got = {e["nic"]: e["capture_bytes"] for e in a["nics"] if e["capture_bytes"] is not None}
    assert got == {0: int(per_nic[0]), 5: int(per_nic[5])}
    assert a["differences"] == [] and "30 NICs not covered by the capture: 1-4,6-31" in a["note"]
    assert a["mode"] == "nic_phase" and {c["nic"] for c in a["cells"]} == {0, 5}


def test_several_files_add_up(tmp_path):
    """The per-NIC files of one run inspected together give the plan's per-phase bytes; files
    split by phase add up to the same packets and payload, without PSN gaps."""
    gen = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.plan.build import build_plan
    from tokenpcap.config.profiles import load_scenario
    s = load_scenario(DANTE)
    plan = {r.name: r.nic_bytes for r in build_plan(s).rows}
    sel = gen.Selection(phases=("pp",))
    (tmp_path / "nic").mkdir()
    (tmp_path / "ph").mkdir()
    per_nic = gen.generate(s, gen.GenerateOptions(out_dir=tmp_path / "nic", fmt="pcapng",
                                                  split="nic", selection=sel))
    files = [f for f, _, _ in per_nic.files]
    assert len(files) == 32
    j = json.loads(run("inspect", *files, "--json", "--against", DANTE).output)
    got = {p["name"]: p["payload_bytes"] for p in j["phases"]}
    assert got["pp/forward/SendRecv"] == plan["pp/forward/SendRecv"]
    assert got["pp/backward/SendRecv"] == plan["pp/backward/SendRecv"]
    assert j["against"]["differences"] == [] and j["roce"]["psn_flows_unchecked"] == 0
    assert j["packets"] == per_nic.packets and len(j["interfaces"]) == 32
    by_phase = gen.generate(s, gen.GenerateOptions(out_dir=tmp_path / "ph", fmt="pcap",
                                                   split="phase", selection=sel))
    j = json.loads(run("inspect", *[f for f, _, _ in by_phase.files], "--json").output)
    assert j["packets"] == per_nic.packets and j["roce"]["psn_gaps"] == 0
    assert j["roce"]["payload_bytes"] == per_nic.phase_payload["pp/forward/SendRecv"] + \
        per_nic.phase_payload["pp/backward/SendRecv"] + per_nic.cts_payload


# --- a queued-fabric run's side files ----------------------------------------------------------

@pytest.fixture
def fabric_run(tmp_path):
    """A directory as a queued-fabric generate run leaves it: a capture ``toy_node00_nic0.pcap``
    and the side files of stem ``toy`` (the toy incast)."""
    from tests.analysis.fabric_toy import incast
    from tests.analysis.trace import write_trace
    from tokenpcap.generate.fabricfiles import write_fabric_files

    write_trace(tmp_path / "toy_node00_nic0.pcap", 64)
    log, s = incast()
    write_fabric_files(tmp_path, "toy", log, s)
    return tmp_path, log


def test_fabric_alone_text_and_json(fabric_run):
    d, log = fabric_run
    r = run("inspect", "--fabric", d)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Fabric (toy, single-switch; 1 switch; {d}/toy_fabric.json):")
    assert "Number of packets" not in r.output
    xoff = int((log["pfc"]["xoff"] == 1).sum())
    assert f"PFC frames:          {log['pfc'].size} (XOFF {xoff}, XON" in r.output
    j = json.loads(run("inspect", "--fabric", d / "toy_fabric.json", "--json").output)
    assert list(j) == ["fabric"] and j["fabric"]["pfc"]["xoff"] == xoff
    assert j["fabric"]["ok"] and j["fabric"]["path"] == str(d / "toy_fabric.json")


def test_fabric_beside_captures_is_automatic(fabric_run):
    d, log = fabric_run
    r = run("inspect", d)
    assert r.exit_code == 0, r.output
    assert "Number of packets:   64" in r.output and "Fabric (toy, single-switch" in r.output
    j = json.loads(run("inspect", d / "toy_node00_nic0.pcap", "--json").output)
    assert j["packets"] == 64 and j["fabric"]["ports_total"] == log["links"].size
    r = run("inspect", d, "--no-fabric")
    assert r.exit_code == 0 and "Fabric" not in r.output
    assert "fabric" not in json.loads(run("inspect", d, "--no-fabric", "--json").output)


def test_fabric_strict_fails_on_a_lossless_drop(fabric_run):
    from tokenpcap.generate.fabricfiles import read_fabric_files, write_fabric_files
    from tokenpcap.records.fabric import FABRIC_TABLES

    d, _ = fabric_run
    assert run("inspect", "--fabric", d, "--strict").exit_code == 0
    log, s = read_fabric_files(d, "toy")
    log["drops"] = np.array([(0, 3, 3, 2, 2000)], FABRIC_TABLES["drops"])
    write_fabric_files(d, "toy", log, type(s)(**{**s.__dict__, "drops_total": 2}))
    r = run("inspect", "--fabric", d, "--strict")
    assert r.exit_code == 1
    assert "WARNING: 2 packets dropped on lossless priorities (tor0 port 3 priority 3: 2)" \
        in r.output
    assert run("inspect", d, "--strict", "--no-crc").exit_code == 1
    assert json.loads(run("inspect", d, "--json").output)["ok"] is False


@pytest.mark.parametrize("args,message", [
    ([], "expected FILES, --fabric DIR, or both"),
    (["--fabric", "{d}", "--no-fabric"], "--fabric and --no-fabric exclude each other"),
    (["--fabric", "{d}", "--against", str(DANTE)], "--against needs FILES"),
])
def test_fabric_usage_errors(fabric_run, args, message):
    d, _ = fabric_run
    r = run("inspect", "--json", *[a.format(d=d) for a in args])
    assert r.exit_code == 2 and message in r.output


def test_bad_side_file_is_one_line_exit_1(fabric_run):
    d, _ = fabric_run
    path = d / "toy_fabric-queues.csv"
    lines = path.read_text().splitlines()
    cells = lines[1].split(",")
    cells[lines[0].split(",").index("priority")] = "9"
    lines[1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    r = run("inspect", d)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.output.strip().splitlines() == [
        f"error: {path}: line 2: column priority: got 9, expected an integer in 0..7"]
