"""export --to hpcc: flow, topology, config and trace files that the HPCC ns-3 simulator runs as
they are.

Independent sources: the plan's (stage 3, analytic) payload bytes per NIC; the simulator's own
parse of a start time (``istream >> double``, then ns-3.17 ``Seconds(double)``, which truncates
to ns), computed here in exact rational arithmetic (``fractions.Fraction``) rather than with the
module's integer code; the observation from a real run of the simulator that ``2.000039136``
became 2,000,039,135 ns (tests/cases/README.md, C15); and the list of keys ``scratch/third.cc``
reads (copied below from its source).
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_cluster, load_scenario
from tokenpcap.errors import InputError, OutputError
from tokenpcap.export.hpcc import (CC_MODES, SIBLINGS, START_OFFSET_NS, TOPOLOGIES, hpcc_flows,
                                   link_delay_ns, ns3_seconds_to_ns, path_links,
                                   start_seconds_text, write_hpcc)
from tokenpcap.pipeline import schedule_scenario
from tokenpcap.records import MESSAGE_DTYPE

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
CASES = ROOT / "tests" / "cases" / "hpcc"
#: every key scratch/third.cc compares against while reading its config (its source, in order)
THIRD_CC_KEYS = (
    "ENABLE_QCN USE_DYNAMIC_PFC_THRESHOLD CLAMP_TARGET_RATE PAUSE_TIME DATA_RATE LINK_DELAY "
    "PACKET_PAYLOAD_SIZE L2_CHUNK_SIZE L2_ACK_INTERVAL L2_BACK_TO_ZERO TOPOLOGY_FILE FLOW_FILE "
    "TRACE_FILE TRACE_OUTPUT_FILE SIMULATOR_STOP_TIME ALPHA_RESUME_INTERVAL RP_TIMER EWMA_GAIN "
    "FAST_RECOVERY_TIMES RATE_AI RATE_HAI ERROR_RATE_PER_LINK CC_MODE RATE_DECREASE_INTERVAL "
    "MIN_RATE FCT_OUTPUT_FILE HAS_WIN GLOBAL_T MI_THRESH VAR_WIN FAST_REACT U_TARGET INT_MULTI "
    "RATE_BOUND ACK_HIGH_PRIO DCTCP_RATE_AI PFC_OUTPUT_FILE LINK_DOWN ENABLE_TRACE KMAX_MAP "
    "KMIN_MAP PMAX_MAP BUFFER_SIZE QLEN_MON_FILE QLEN_MON_START QLEN_MON_END MULTI_RATE "
    "SAMPLE_FEEDBACK PINT_LOG_BASE PINT_PROB").split()
#: read by third.cc but absent from its shipped mix/config.txt: left at the program's defaults
UNUSED_KEYS = {"PAUSE_TIME", "DATA_RATE", "LINK_DELAY"}


def simulator_ns(text: str) -> int:
    """What third.cc makes of a start, in exact rationals: the nearest double ``v``; ns-3.17's
    ``int64x64_t(double)`` keeps ``floor(v)`` and the fraction truncated to 64 bits; times 10^9,
    integer part."""
    v = Fraction(float(text))
    hi = math.floor(v)
    lo = math.floor((v - hi) * 2**64)
    return hi * 10**9 + math.floor(Fraction(lo, 2**64) * 10**9)


@pytest.fixture(scope="module")
def dante():
    s, plan, sched = schedule_scenario(DANTE)
    return s, plan, sched.messages


def read_config(path: Path) -> dict[str, list[str]]:
    cfg = {}
    for line in path.read_text().splitlines():
        key, *vals = line.split()
        assert key not in cfg, key
        cfg[key] = vals
    return cfg


def test_the_simulators_parse_truncates_as_observed():
    """C15: the real simulator read 2.000039136 s as 2,000,039,135 ns; both the module's integer
    emulation and the exact oracle agree, and the written form lands on the nanosecond."""
    assert simulator_ns("2.000039136") == 2_000_039_135
    assert ns3_seconds_to_ns(np.array([2.000039136]))[0] == 2_000_039_135
    assert start_seconds_text(np.array([2_000_039_136])) == ["2.0000391365"]
    assert simulator_ns("2.0000391365") == 2_000_039_136


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10_000 * 10**9))
def test_every_start_up_to_1e4_s_survives_the_parse(t_ns):
    text = start_seconds_text(np.array([t_ns], np.int64))[0]
    assert simulator_ns(text) == t_ns
    assert ns3_seconds_to_ns(np.array([float(text)]))[0] == t_ns


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False))
def test_the_emulated_parse_equals_the_exact_one(v):
    assert ns3_seconds_to_ns(np.array([v]))[0] == simulator_ns(repr(v))


def test_the_64_bit_fraction_drops_what_a_real_truncation_keeps():
    """1e-05 is a double slightly above 10 µs, but below 2^-64 s above it: ns-3 makes 9,999 ns."""
    assert math.floor(Fraction(1e-05) * 10**9) == 10_000
    assert simulator_ns("1e-05") == ns3_seconds_to_ns(np.array([1e-05]))[0] == 9_999


def test_dante_flows_land_on_their_nanosecond_and_add_up_to_the_plan(tmp_path, dante):
    s, plan, m = dante
    paths = write_hpcc(m, s.cluster, tmp_path / "dante.txt")
    assert [p.name for p in paths] == ["dante.txt", "dante-topology.txt", "dante-config.txt",
                                       "dante-trace.txt"]
    tokens = paths[0].read_text().split()
    n = int(tokens[0])
    rows = [tokens[1 + 6 * i:7 + 6 * i] for i in range(n)]
    assert len(tokens) == 1 + 6 * n and n == int((m["kind"] == 0).sum()) == 3120  # NCCL p2p chunks (docs/p2p.md), NCCL's channels
    data = m[m["kind"] == 0]
    want = sorted((data["ready_ns"] + START_OFFSET_NS).tolist())
    got = [simulator_ns(r[5]) for r in rows]
    assert got == want                      # every start, as the simulator reads it, in order
    per_nic = Counter()
    for src, dst, pg, dport, size, _ in rows:
        assert pg == "3" and int(dport) >= 100 and src != dst
        per_nic[int(src)] += int(size)
    plan_nic = plan.nic_bytes_per_nic()
    assert [per_nic[g] for g in range(plan_nic.size)] == plan_nic.tolist()


def test_flows_start_when_the_data_may_leave(dante):
    """With clear-to-send the data leaves when its CTS has arrived (ready_ns), not when the
    collective posted it (start_ns): HPCC's transport has no CTS of its own."""
    s, _, m = dante
    f = hpcc_flows(m)
    d = m[f["msg"]]
    assert s.generation.clear_to_send and (d["ready_ns"] > d["start_ns"]).all()
    assert (f["start_ns"] == d["ready_ns"] + START_OFFSET_NS).all()
    assert (d["first_tx_ns"] >= d["ready_ns"]).all()


def test_topology_gives_rail_aligned_paths_our_latency(tmp_path, dante):
    s, _, m = dante
    topo = write_hpcc(m, s.cluster, tmp_path / "f.txt")[1]
    lines = topo.read_text().splitlines()
    nodes, switches, links = map(int, lines[0].split())
    hosts = s.cluster.nodes * s.cluster.nics_per_node
    assert nodes == hosts + switches and len(lines) == 2 + links
    assert [int(x) for x in lines[1].split()] == list(range(hosts, nodes))
    ends = Counter(int(x) for line in lines[2:] for x in line.split()[:2])
    assert all(ends[h] == 1 for h in range(hosts))                  # each NIC cabled once
    delays = {line.split()[3] for line in lines[2:]}
    assert delays == {f"{s.cluster.network.latency_ns // 2}ns"} == {f"{link_delay_ns(s.cluster)}ns"}
    # NCCL's rail-optimised rings stay on a rail: 2 links of latency/2 = our one-way latency
    f = hpcc_flows(m)
    assert (path_links(s.cluster, f["src"], f["dst"]) == 2).all()
    assert path_links(s.cluster, np.array([3]), np.array([20])).tolist() == [4]


def test_config_is_ready_to_run(tmp_path, dante):
    s, _, m = dante
    out = tmp_path / "dante.txt"
    paths = write_hpcc(m, s.cluster, out)
    cfg = read_config(paths[2])
    assert set(cfg) == set(THIRD_CC_KEYS) - UNUSED_KEYS
    assert cfg["FLOW_FILE"] == ["dante.txt"] and cfg["TOPOLOGY_FILE"] == ["dante-topology.txt"]
    assert cfg["TRACE_FILE"] == ["dante-trace.txt"] and cfg["FCT_OUTPUT_FILE"] == ["dante-fct.txt"]
    for key, suffix in SIBLINGS.items():                    # relative to the config's directory
        assert cfg[key] == [f"dante{suffix}"]
    for key in ("TOPOLOGY_FILE", "FLOW_FILE", "TRACE_FILE"):
        assert (paths[2].parent / cfg[key][0]).is_file()
    assert paths[3].read_text() == "0\n"
    assert cfg["CC_MODE"] == ["3"] and cfg["PACKET_PAYLOAD_SIZE"] == [str(s.cluster.pmtu_bytes)]
    # HPCC at 400 Gb/s as the simulator's run.py writes it: AI 10*bw/25 Mb/s, INT_MULTI bw/25
    assert cfg["RATE_AI"] == ["160Mb/s"] and cfg["INT_MULTI"] == ["16"]
    assert cfg["U_TARGET"] == ["0.95"] and cfg["HAS_WIN"] == ["1"]
    # one ECN entry per link speed of the topology, in bit/s as ns-3 parses "400Gbps"
    speeds = {line.split()[2] for line in paths[1].read_text().splitlines()[2:]}
    assert speeds == {"400Gbps"}
    assert cfg["KMIN_MAP"] == ["1", "400000000000", "1600"]
    assert cfg["KMAX_MAP"] == ["1", "400000000000", "6400"]
    assert cfg["PMAX_MAP"] == ["1", "400000000000", "0.20"]
    # the simulator runs until ten times our iteration after the first start, plus a second
    last = int(m["arrival_ns"].max())
    assert float(cfg["SIMULATOR_STOP_TIME"][0]) * 1e9 >= START_OFFSET_NS + 10 * last


def test_every_link_speed_gets_its_ecn_entry(tmp_path):
    """128 nodes of 8 NICs: uplinks at 16 x 400 Gb/s beside the 400 Gb/s host links."""
    cluster = load_cluster(ROOT / "profiles" / "clusters" / "h100-rocev2-400g-128n.yaml")
    m = np.zeros(2, MESSAGE_DTYPE)
    m["src_nic"], m["dst_nic"], m["size_bytes"], m["start_ns"] = [0, 8], [8, 1000], 4096, [0, 7]
    paths = write_hpcc(m, cluster, tmp_path / "big.txt", cc="dctcp")
    speeds = {line.split()[2] for line in paths[1].read_text().splitlines()[2:]}
    assert speeds == {"400Gbps", "6400Gbps"}
    cfg = read_config(paths[2])
    assert cfg["CC_MODE"] == ["8"]
    # DCTCP in run.py: KMIN = KMAX = 30*r/10 KB, PMAX 1
    assert cfg["KMIN_MAP"] == cfg["KMAX_MAP"] == ["2", "400000000000", "1200",
                                                  "6400000000000", "19200"]
    assert cfg["PMAX_MAP"] == ["2", "400000000000", "1.00", "6400000000000", "1.00"]
    assert [simulator_ns(line.split()[5]) for line in paths[0].read_text().splitlines()[1:]] == \
        [START_OFFSET_NS, START_OFFSET_NS + 7]


@pytest.mark.parametrize("cc", sorted(CC_MODES))
def test_each_cc_mode_is_a_flag(tmp_path, cc):
    m = np.zeros(1, MESSAGE_DTYPE)
    m["src_nic"], m["dst_nic"], m["size_bytes"] = 0, 8, 100
    cluster = load_cluster(ROOT / "profiles" / "clusters" / "h100-rocev2-400g.yaml")
    cfg = read_config(write_hpcc(m, cluster, tmp_path / "x.txt", cc=cc)[2])
    assert cfg["CC_MODE"] == [str(CC_MODES[cc])]
    assert set(cfg) == set(THIRD_CC_KEYS) - UNUSED_KEYS


def test_bad_cc_and_unwritable_output_leave_nothing(tmp_path, dante):
    s, _, m = dante
    with pytest.raises(InputError, match="--hpcc-cc: got 'bbr', expected one of hpcc"):
        write_hpcc(m, s.cluster, tmp_path / "a.txt", cc="bbr")
    (tmp_path / "a-config.txt").mkdir()           # a directory where the config must go
    with pytest.raises(OutputError, match="a-config.txt: cannot write: got a directory"):
        write_hpcc(m, s.cluster, tmp_path / "a.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-config.txt"]


def test_cli_hpcc_cc_flag(tmp_path):
    out = tmp_path / "d" / "dante.txt"
    r = CliRunner().invoke(main, ["export", str(DANTE), "--to", "hpcc", "--scale", "64",
                                  "--hpcc-cc", "dcqcn", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert read_config(out.with_name("dante-config.txt"))["CC_MODE"] == ["1"]
    r = CliRunner().invoke(main, ["export", str(DANTE), "--to", "csv", "--hpcc-cc", "dcqcn",
                                  "-o", str(tmp_path / "m.csv")])
    assert r.exit_code == 2 and "expected it only with --to hpcc" in r.output
    assert not (tmp_path / "m.csv").exists()


def load_scenario_cluster():
    return load_scenario(DANTE).cluster


def _incast(senders: int, size_bytes: int) -> np.ndarray:
    m = np.zeros(senders, MESSAGE_DTYPE)
    m["src_nic"], m["dst_nic"], m["size_bytes"] = np.arange(1, senders + 1), 0, size_bytes
    return m


@pytest.mark.parametrize("cc, fixture", [("none", "pfc"), ("dcqcn", "dcqcn")])
def test_single_switch_writes_the_incast_fixtures_inputs(tmp_path, cc, fixture):
    """The 63 -> 1 incast that the HPCC fixtures ran (tests/cases/hpcc/README.md): 64 hosts of
    Dante's 400 Gb/s cluster on one switch. The topology is the fixture's byte for byte, the
    config key for key but for the file names and the stop time, the flows the same numbers
    (the fixture writes its start as 2.0, the export 2 s plus half a ns: the same ns)."""
    cluster = dataclasses.replace(load_scenario_cluster(), nodes=8)
    paths = write_hpcc(_incast(63, 16 << 20), cluster, tmp_path / "incast.txt", cc=cc,
                       topology="single-switch", buffer_mb=128)
    assert paths[1].read_text() == (CASES / "incast63x16m-topology.txt").read_text()
    got, want = read_config(paths[2]), read_config(CASES / f"incast63x16m-{fixture}-config.txt")
    assert list(got) == list(want)                                  # same keys, same order
    names = set(SIBLINGS) | {"FLOW_FILE", "SIMULATOR_STOP_TIME"}
    assert {k for k in got if got[k] != want[k]} <= names
    assert float(got["SIMULATOR_STOP_TIME"][0]) >= 3
    ours = [line.split() for line in paths[0].read_text().splitlines()]
    theirs = [line.split() for line in (CASES / "incast63x16m-flows.txt").read_text().splitlines()]
    assert ours[0] == theirs[0] == ["63"]
    assert [r[:5] for r in ours[1:]] == [r[:5] for r in theirs[1:]]
    assert {simulator_ns(r[5]) for r in ours[1:]} == {simulator_ns(r[5]) for r in theirs[1:]} \
        == {START_OFFSET_NS}
    assert paths[3].read_text() == "0\n"


def test_pfc_settings_and_traced_nodes_are_written_as_given(tmp_path):
    cluster = load_scenario_cluster()
    m = _incast(3, 4096)
    default = read_config(write_hpcc(m, cluster, tmp_path / "a.txt")[2])
    assert default["BUFFER_SIZE"] == ["128"] and default["USE_DYNAMIC_PFC_THRESHOLD"] == ["1"]
    assert "PAUSE_TIME" not in default and default["ENABLE_TRACE"] == ["0"]
    paths = write_hpcc(m, cluster, tmp_path / "b.txt", buffer_mb=32, dynamic_pfc_threshold=False,
                       pause_time=10, trace_nodes=(0, 32))
    cfg = read_config(paths[2])
    assert cfg["BUFFER_SIZE"] == ["32"] and cfg["USE_DYNAMIC_PFC_THRESHOLD"] == ["0"]
    assert cfg["PAUSE_TIME"] == ["10"] and cfg["ENABLE_TRACE"] == ["1"]
    assert set(cfg) == set(THIRD_CC_KEYS) - UNUSED_KEYS | {"PAUSE_TIME"}
    assert paths[3].read_text() == "2\n0\n32\n"
    with pytest.raises(InputError, match="topology: got 'torus', expected one of "
                                         "rail-leaf-spine, single-switch"):
        write_hpcc(m, cluster, tmp_path / "c.txt", topology="torus")
    with pytest.raises(InputError, match="buffer_mb: got 0, expected >= 1"):
        write_hpcc(m, cluster, tmp_path / "c.txt", buffer_mb=0)
    assert not list(tmp_path.glob("c*"))
    assert set(TOPOLOGIES) == {"rail-leaf-spine", "single-switch"}


@pytest.mark.slow
def test_the_queued_incast_scenario_exports_the_fixtures_inputs(tmp_path):
    """``incast-63x16m-hpcc-ns3`` (fabric: queued, preset hpcc-ns3, single switch) exported with
    ``--hpcc-cc none`` is the input the PFC-only fixture ran: the topology byte for byte, the
    config but for file names and the stop time, the same 63 flows (start 2 s, the same ns)."""
    scen = ROOT / "profiles" / "scenarios" / "incast-63x16m-hpcc-ns3.yaml"
    out = tmp_path / "incast.txt"
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "--hpcc-cc", "none",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "warning" not in r.output
    assert out.with_name("incast-topology.txt").read_text() == \
        (CASES / "incast63x16m-topology.txt").read_text()
    got = read_config(out.with_name("incast-config.txt"))
    want = read_config(CASES / "incast63x16m-pfc-config.txt")
    assert list(got) == list(want)
    assert {k for k in got if got[k] != want[k]} <= set(SIBLINGS) | {"FLOW_FILE",
                                                                     "SIMULATOR_STOP_TIME"}
    ours = [line.split() for line in out.read_text().splitlines()]
    theirs = [line.split() for line in (CASES / "incast63x16m-flows.txt").read_text().splitlines()]
    assert [r[:5] for r in ours] == [r[:5] for r in theirs]
    assert [simulator_ns(r[5]) for r in ours[1:]] == [simulator_ns(r[5]) for r in theirs[1:]]
    assert out.with_name("incast-trace.txt").read_text() == "0\n"


def test_a_name_that_is_not_utf8_is_written_into_the_config_as_its_bytes(tmp_path):
    """``-o DIR/$'r\\xff'``: the flow file and its siblings are made, and the config's
    ``FLOW_FILE`` line names them by their own bytes (ns-3 opens what it reads); writing the
    config died with a UnicodeEncodeError and left its ``.part`` files (found by the fuzz
    campaign's path surface)."""
    import os

    out = os.fsdecode(os.fsencode(tmp_path) + b"/r\xff")
    r = CliRunner().invoke(main, ["export", str(DANTE), "--scale", "64", "--to", "hpcc",
                                  "-o", out])
    assert r.exit_code == 0, r.output
    names = sorted(os.listdir(os.fsencode(tmp_path)))
    assert names == [b"r\xff", b"r\xff-config.txt", b"r\xff-topology.txt", b"r\xff-trace.txt"]
    config = (tmp_path / os.fsdecode(b"r\xff-config.txt")).read_bytes()
    assert b"\nFLOW_FILE r\xff\n" in config and b"\nTOPOLOGY_FILE r\xff-topology.txt\n" in config
