"""The HPCC simulator's fct.txt read back and matched to our messages.

The fixtures in tests/cases/hpcc/ are real runs of the HPCC ns-3 simulator
(alibaba-edu/High-Precision-Congestion-Control, ``simulation/``, commit of December 2026), built
from its public source on Debian 12 with python 2.7 (pyenv) and g++ 12::

    CXXFLAGS="-std=gnu++11 -O2 -w -fpermissive" python2 ./waf configure --build-profile=optimized \\
        --enable-modules=point-to-point,internet,applications --disable-python \\
        --disable-tests --disable-examples
    python2 ./waf build -j2

``dante-scale64-fct.txt`` (560 flows, every one completed)::

    tokenpcap export profiles/scenarios/dante.yaml --to hpcc --scale 64 -o run/dante.txt
    cd run && LD_LIBRARY_PATH=$SIM/build $SIM/build/scratch/third dante-config.txt

``alone-fct.txt`` (18 flows, one at a time, 200 µs apart: sizes from 64 B to 4.8 MB, on one rail
3 -> 19 and across rails 3 -> 20 of Dante's cluster)::

    python3 -c "from tests.export.test_hpcc_fct import write_alone; write_alone('alone/alone.txt')"
    cd alone && LD_LIBRARY_PATH=$SIM/build $SIM/build/scratch/third alone-config.txt
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.export.hpcc import hpcc_flows, link_delay_ns, path_links, write_hpcc
from tokenpcap.export.hpcc_fct import (Comparison, alone_gap_ns, compare_hpcc, match_flows,
                                       read_fct)
from tokenpcap.records import VERB_WRITE_IMM
from tokenpcap.schedule.engine.nic import Engine

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "tests" / "cases" / "hpcc" / "dante-flows.yaml"   # Dante with p2p as its ns-3 run's flows
CASES = ROOT / "tests" / "cases" / "hpcc"
ALONE_SIZES = (64, 1186, 3072, 4096, 4097, 75390, 78126, 1_000_000, 4_825_000)
ALONE_PAIRS = ((3, 19), (3, 20))
ALONE_GAP_NS = 200_000


def alone_engine() -> Engine:
    """Dante's cluster with :data:`ALONE_SIZES` sent on each of :data:`ALONE_PAIRS`, one message
    at a time (each alone on the fabric), run to the end."""
    s = load_scenario(DANTE)
    eng = Engine(s.cluster, s.generation)
    for k, (a, b) in enumerate(p for p in ALONE_PAIRS for _ in ALONE_SIZES):
        eng.add_message(a, b, 2, ALONE_SIZES[k % len(ALONE_SIZES)], k * ALONE_GAP_NS)
    for _ in eng.run():
        pass
    return eng


def write_alone(out: str | Path) -> list[Path]:
    """Write the HPCC files of :func:`alone_engine` at ``out`` (how alone-fct.txt was made)."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    return write_hpcc(alone_engine().messages.copy(), load_scenario(DANTE).cluster, out)




@pytest.fixture(scope="module")
def dante64() -> Comparison:
    return compare_hpcc(DANTE, CASES / "dante-scale64-fct.txt", scale=64)


def test_every_simulated_dante_flow_matches_exactly_once(dante64):
    c = dante64
    fct = read_fct(CASES / "dante-scale64-fct.txt")
    assert c.flows.size == fct.size == 560
    assert c.completed.all()
    assert sorted(c.sim_line.tolist()) == fct["line"].tolist()        # each line used once
    # the matched line carries the flow's own numbers; the simulator read every start exactly
    row = c.sim_line - 1
    for name in ("src", "dst", "dport", "size_bytes", "start_ns"):
        assert (fct[name][row] == c.flows[name]).all(), name
    groups = {g["group"]: g for g in c.groups()}
    assert groups["all"]["flows"] == groups["all"]["completed"] == 560
    assert groups["all"]["not_completed"] == []
    assert sum(g["bytes"] for k, g in groups.items() if k != "all") == \
        int(c.flows["size_bytes"].sum()) == groups["all"]["bytes"]


def test_a_flow_missing_from_fct_is_not_completed(tmp_path, dante64):
    lines = (CASES / "dante-scale64-fct.txt").read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines[:100] + lines[101:]))
    c = compare_hpcc(DANTE, tmp_path / "fct.txt", scale=64)
    assert int((~c.completed).sum()) == 1
    i = int(np.flatnonzero(~c.completed)[0])
    # it is the flow that line 101 completed in the full run
    assert i == int(np.flatnonzero(dante64.sim_line == 101)[0])
    assert c.sim_fct_ns[i] == -1 and np.isnan(c.slowdown[i])
    groups = {g["group"]: g for g in c.groups()}
    assert groups["all"]["completed"] == 559 and groups["all"]["not_completed"] == [i + 2]
    assert groups[c.labels[i]]["not_completed"] == [i + 2]


def test_a_flow_of_another_export_is_an_error(tmp_path):
    lines = (CASES / "dante-scale64-fct.txt").read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines + lines[:1]))
    with pytest.raises(InputError, match=r"fct.txt: line 561: flow .* got it completed "
                                         r"more than once, expected once"):
        compare_hpcc(DANTE, tmp_path / "fct.txt", scale=64)
    with pytest.raises(InputError, match=r"line 1: flow .* got no such exported flow, expected "
                                         r"the export's scenario, --scale"):
        compare_hpcc(DANTE, CASES / "dante-scale64-fct.txt", scale=32)


@pytest.mark.parametrize("text, message", [
    ("0b000301 0b001301 10000 102 3072 2000040140\n", "line 1: got 6 fields, expected 8"),
    ("0b0003 0b001301 10000 102 3072 2000040140 1 1\n", "line 1: column 1 \\(sip\\): got '0b0003', "
                                                        "expected 8 hex digits"),
    # int(t, 16) takes these, ns-3's "%08x" never writes them
    ("0x000301 0b001301 10000 102 3072 2000040140 1 1\n", "line 1: column 1 \\(sip\\): got "
                                                          "'0x000301', expected 8 hex digits"),
    ("0b000301 +b001301 10000 102 3072 2000040140 1 1\n", "line 1: column 2 \\(dip\\): got "
                                                          "'\\+b001301', expected 8 hex digits"),
    ("0b000301 0b00_301 10000 102 3072 2000040140 1 1\n", "line 1: column 2 \\(dip\\): got "
                                                          "'0b00_301', expected 8 hex digits"),
    ("\n0b000301 0b001301 10000 102 -5 2000040140 1 1\n", "line 2: column 5 \\(size_bytes\\): got '-5', "
                                                          "expected an integer from 0"),
    ("0b000301 0b001301 10000 102 3072 2.0 1 1\n", "line 1: column 6 \\(start_ns\\): got '2.0', expected"),
    ("0b000301 0b001301 10000 102 3072 2000040140 99999999999999999999 1\n",
     "line 1: column 7 \\(fct_ns\\): got '99999999999999999999', expected an integer from 0 to 10"),
])
def test_malformed_fct_lines_are_named(tmp_path, text, message):
    (tmp_path / "fct.txt").write_text(text)
    with pytest.raises(InputError, match=f"fct.txt: {message}"):
        read_fct(tmp_path / "fct.txt")


@pytest.mark.parametrize("text", ["", "\n\n", "   \n"])
def test_an_fct_file_without_a_flow_is_refused(tmp_path, text):
    """third.cc writes a line per completed flow: a file without one is a run that completed
    nothing, not a comparison of zero flows."""
    (tmp_path / "fct.txt").write_text(text)
    with pytest.raises(InputError, match="fct.txt: got no flow line, expected one line per flow"):
        read_fct(tmp_path / "fct.txt")


def test_a_missing_fct_file_is_named(tmp_path):
    with pytest.raises(InputError, match="nosuch.txt: got no such file, expected the "
                                         "simulator's FCT_OUTPUT_FILE"):
        read_fct(tmp_path / "nosuch.txt")


def test_alone_on_the_fabric_the_models_differ_by_the_per_hop_terms():
    """One flow at a time: fct − ours = the simulator's extra propagation there and back
    (2·(links·latency/2 − latency): 0 on one rail, 2 µs across) plus one store-and-forward of
    the largest packet per switch, within 2 ns per packet and link, for flows up to one BDP;
    longer flows also meet HPCC's rate control (U_TARGET 0.95): at most 10 % longer."""
    eng = alone_engine()
    s = load_scenario(DANTE)
    m = eng.messages.copy()
    flows = hpcc_flows(m)
    fct = read_fct(CASES / "alone-fct.txt")
    row = match_flows(flows, fct)
    assert (row >= 0).all() and sorted(row.tolist()) == list(range(fct.size))
    mm = m[flows["msg"]]
    lat = s.cluster.network.latency_ns
    ours = mm["arrival_ns"] - mm["ready_ns"] + lat
    sim = fct["fct_ns"][row]
    links = path_links(s.cluster, flows["src"], flows["dst"])
    frames = [eng.frames(int(n), VERB_WRITE_IMM) for n in flows["size_bytes"]]
    packets = np.array([f[0] for f in frames])
    biggest = np.array([max(f[1]) for f in frames])
    gap = alone_gap_ns(links, link_delay_ns(s.cluster), lat, biggest)
    bdp = s.cluster.link_gbps / 8 * 2 * (links * link_delay_ns(s.cluster))     # bytes
    short = flows["size_bytes"] <= bdp
    assert short.sum() == 14 and set(links.tolist()) == {2, 4}
    err = sim - ours - gap
    assert (np.abs(err[short]) <= 2 * (packets[short] + links[short])).all(), err
    assert (err[packets == 1] == 0).all()                       # one packet: exact to the ns
    slow = (sim - gap)[~short] / ours[~short]
    assert (slow >= 1).all() and (slow <= 1.1).all(), slow


SCENARIOS = ROOT / "profiles" / "scenarios"
#: the fixtures' analytic PFC-only span (tests/cases/hpcc/README.md, tests/export/test_hpcc_pfc.py):
#: 82 + S·P·82 + 4·500 + 2·1 ns
SPAN_63X16M_NS = 82 + 63 * 4096 * 82 + 4 * 500 + 2 * 1
SPAN_8X1M_NS = 82 + 8 * 256 * 82 + 4 * 500 + 2 * 1


@pytest.fixture(scope="module")
def incast63() -> Comparison:
    return compare_hpcc(SCENARIOS / "incast-63x16m-hpcc-ns3.yaml",
                        CASES / "incast63x16m-pfc-fct.txt")


@pytest.mark.slow
def test_the_queued_63x16m_incast_ends_with_the_simulators_last_ack(incast63):
    """Our queued fabric (preset hpcc-ns3) on the 63 -> 1 x 16 MiB PFC-only incast: every
    simulated flow matched once (src, dst, dport 100, size, start 2 s), the span within 0.5 % of
    the simulator's (and of the analytic 21,162,020 ns), the per-flow FCT min and max within
    1 % of the simulator's."""
    c = incast63
    assert c.fabric == "queued" and c.completed.all() and c.flows.size == 63
    assert sorted(c.sim_line.tolist()) == list(range(1, 64))
    assert set(c.flows["dport"].tolist()) == {100} and set(c.flows["dst"].tolist()) == {0}
    g = c.groups()[-1]
    assert g["sim_ns"] == SPAN_63X16M_NS == 21_162_020
    assert abs(g["ours_ns"] - g["sim_ns"]) <= 0.005 * g["sim_ns"]
    for ours, sim in ((c.ours_fct_ns.min(), c.sim_fct_ns.min()),
                      (c.ours_fct_ns.max(), c.sim_fct_ns.max())):
        assert abs(int(ours) - int(sim)) <= 0.01 * int(sim)


@pytest.mark.slow
def test_the_queued_8x1m_incast_matches_every_flow_within_1_percent():
    """8 -> 1 x 1 MiB, no PFC in the simulator: each of our flows within 1 % of its own
    simulated FCT (169,446 .. 170,020 ns), the span the analytic one."""
    c = compare_hpcc(SCENARIOS / "incast-8x1m-hpcc-ns3.yaml", CASES / "incast8x1m-pfc-fct.txt")
    assert c.fabric == "queued" and c.completed.all() and c.flows.size == 8
    assert c.sim_fct_ns.min() == 169_446 and c.sim_fct_ns.max() == 170_020
    assert (np.abs(c.ours_fct_ns - c.sim_fct_ns) <= 0.01 * c.sim_fct_ns).all()
    assert c.groups()[-1]["sim_ns"] == SPAN_8X1M_NS
    assert abs(c.groups()[-1]["ours_ns"] - SPAN_8X1M_NS) <= 0.005 * SPAN_8X1M_NS


@pytest.mark.slow
def test_a_leaf_spine_fabric_exports_and_agrees_within_a_leaf(tmp_path):
    """The 2:1 leaf-spine of tests/cases/hpcc/leafspine8x1-cluster.yaml (two leaves of four
    hosts, two 400 Gb/s spines), an all-to-all of 4 MiB per pair, PFC only: the export is the
    input the simulator ran (topology byte for byte, config but the file names), every flow
    matched, no pause in either. Within a leaf (one path) each flow is within 0.5 % of the
    simulator's; across the spines the two choose ECMP paths from different ports (ns-3's
    sport 10000 + n per host pair, ours RoCEv2's; docs/compare.md), so those flows are only
    bounded: slowdown 0.75 .. 1.5 (measured 0.78 .. 1.43)."""
    from click.testing import CliRunner

    from tokenpcap.cli import main

    scen = CASES / "alltoall8x4m-leafspine.yaml"
    out = tmp_path / "alltoall8x4m-leafspine.txt"
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "--hpcc-cc", "none",
                                  "-o", str(out)])
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    for suffix in ("-topology.txt", "-config.txt"):
        assert out.with_name(out.stem + suffix).read_text() == \
            (CASES / f"alltoall8x4m-leafspine{suffix}").read_text()
    c = compare_hpcc(scen, CASES / "alltoall8x4m-leafspine-fct.txt",
                     pfc_path=CASES / "alltoall8x4m-leafspine-pfc.txt")
    assert c.fabric == "queued" and c.completed.all() and c.flows.size == 56 and c.pfc == []
    same = c.flows["src"] // 4 == c.flows["dst"] // 4
    assert same.sum() == 24
    assert (np.abs(c.ours_fct_ns - c.sim_fct_ns)[same] <= 0.005 * c.sim_fct_ns[same]).all()
    assert ((c.slowdown >= 0.75) & (c.slowdown <= 1.5)).all()
