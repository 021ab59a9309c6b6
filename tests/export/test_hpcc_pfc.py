"""The HPCC simulator's pfc.txt read back, and the incast fixtures of tests/cases/hpcc/ checked
against what they must be.

The fixtures are real runs of HPCC ns-3 (commit 9f4be2a, built as docs/compare.md describes;
inputs, commands and CPU times in tests/cases/hpcc/README.md): S senders to host 0 through one
switch, every link 400 Gb/s and 500 ns, PMTU 4096, PFC only (``CC_MODE 0``) or DCQCN. The
analytic oracle for a PFC-only incast: the switch's port to host 0 never idles once the first
frame is there, so the last ACK reaches its sender at

    span = t_frame + S·P·t_frame + 4·delay + 2·t_ack

(one serialization at a sender, the S·P frames back to back at the bottleneck, propagation out
and back over two links, the ACK's serialization on both), with ``t = floor(bytes·8 / rate)``
in ns: ``QbbNetDevice::TransmitStart`` (src/point-to-point/model/qbb-net-device.cc) waits
``Seconds(m_bps.CalculateTxTime(p->GetSize()))``, ``CalculateTxTime`` (src/network/utils/
data-rate.cc) is ``bytes * 8 / bps`` as a double and ns-3.17's ``Seconds`` truncates to whole ns.
Frames are payload + 48 B (third.cc ``qp_finish`` counts ``CustomHeader::GetStaticWholeHeaderSize()
- IntHeader::GetStaticSize()`` per packet; trace_reader prints every data frame of these runs as
``4144(4096)``: 82 ns), ACKs 60 B (rdma-hw.cc ``ReceiveUdp`` pads the ACK to
``60-14-20`` bytes before its IPv4 and Ethernet headers; trace_reader: ``60``; 1 ns).
"""
from __future__ import annotations

import gzip
import re
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.export.hpcc_fct import read_fct
from tokenpcap.export.hpcc_pfc import PFC_DTYPE, PFC_PAUSE, PFC_RESUME, pause_counts, read_pfc

CASES = Path(__file__).resolve().parents[2] / "tests" / "cases" / "hpcc"
HEADER_BYTES = 48          # third.cc qp_finish: whole header less INT, per packet
ACK_BYTES = 60             # rdma-hw.cc ReceiveUdp: Create<Packet>(max(60-14-20-hdr, 0))


def _config(name: str) -> dict[str, str]:
    return dict(line.rstrip("\n").split(" ", 1) for line in
                (CASES / name).read_text().splitlines(keepends=True))


def _topology(name: str) -> tuple[int, list[tuple[int, int, int, int]]]:
    """(switch id, [(a, b, rate_bps, delay_ns)]) of a one-switch topology file."""
    lines = (CASES / name).read_text().split("\n")
    nodes, switches, links = map(int, lines[0].split())
    assert switches == 1
    out = []
    for line in lines[2:2 + links]:
        a, b, rate, delay, _ = line.split()
        assert rate.endswith("Gbps") and delay.endswith("ns")
        out.append((int(a), int(b), int(rate[:-4]) * 10**9, int(delay[:-2])))
    return int(lines[1]), out


def _flows(name: str) -> list[tuple[int, int, int]]:
    """(src, dst, size_bytes) per flow of a flow file whose flows all start at 2 s."""
    lines = (CASES / name).read_text().split("\n")
    rows = [line.split() for line in lines[1:1 + int(lines[0])]]
    assert {r[5] for r in rows} == {"2.0"}
    return [(int(r[0]), int(r[1]), int(r[4])) for r in rows]


def _tx_ns(nbytes: int, rate_bps: int) -> int:
    return nbytes * 8 * 10**9 // rate_bps


INCASTS = [("incast63x16m", 63, 16 << 20, 13_021), ("incast63x4m", 63, 4 << 20, 2_467),
           ("incast8x1m", 8, 1 << 20, 0)]


@pytest.mark.parametrize("case, senders, size, pauses", INCASTS)
def test_pfc_only_incast_span_is_the_bottleneck_busy_from_first_frame_to_last(case, senders,
                                                                               size, pauses):
    cfg = _config(f"{case}-pfc-config.txt")
    assert cfg["CC_MODE"] == "0" and cfg["FLOW_FILE"] == f"{case}-flows.txt"
    switch, links = _topology(cfg["TOPOLOGY_FILE"])
    flows = _flows(cfg["FLOW_FILE"])
    assert flows == [(s, 0, size) for s in range(1, senders + 1)]
    assert {(b, r, d) for _, b, r, d in links} == {(switch, 400 * 10**9, 500)}
    payload = int(cfg["PACKET_PAYLOAD_SIZE"])
    rate, delay = links[0][2], links[0][3]
    packets = senders * -(-size // payload)
    t_frame = _tx_ns(payload + HEADER_BYTES, rate)
    assert t_frame == 82
    span = t_frame + packets * t_frame + 4 * delay + 2 * _tx_ns(ACK_BYTES, rate)
    fct = read_fct(CASES / f"{case}-pfc-fct.txt")
    assert fct.size == senders and set(fct["size_bytes"].tolist()) == {size}
    assert sorted(fct["src"].tolist()) == list(range(1, senders + 1)) and not fct["dst"].any()
    assert set(fct["start_ns"].tolist()) == {2_000_000_000}
    got = int((fct["start_ns"] + fct["fct_ns"]).max() - fct["start_ns"].min())
    assert got == span                       # exact to the ns
    if case == "incast63x16m":
        assert span == 258_048 * 82 + 2_084 == 21_162_020
    # no congestion control: the senders share the bottleneck, every flow ends in the last 2 %
    assert int(fct["fct_ns"].min()) > 0.98 * span
    pfc_name = f"{case}-pfc-pfc.txt" + (".gz" if (CASES / f"{case}-pfc-pfc.txt.gz").exists()
                                        else "")
    assert cfg["PFC_OUTPUT_FILE"] == f"{case}-pfc-pfc.txt"
    pfc = read_pfc(CASES / pfc_name)
    assert int((pfc["type"] == PFC_PAUSE).sum()) == int((pfc["type"] == PFC_RESUME).sum()) == pauses


@pytest.mark.parametrize("case, senders, size, pauses", INCASTS)
def test_dcqcn_incast_differs_from_pfc_only_in_the_cc_mode_and_is_slower(case, senders, size,
                                                                         pauses):
    pfc, dcqcn = _config(f"{case}-pfc-config.txt"), _config(f"{case}-dcqcn-config.txt")
    named = {"TRACE_FILE", "TRACE_OUTPUT_FILE", "FCT_OUTPUT_FILE", "PFC_OUTPUT_FILE",
             "QLEN_MON_FILE"}
    assert {k for k in pfc if pfc[k] != dcqcn[k]} == named | {"CC_MODE"}
    assert dcqcn["CC_MODE"] == "1"
    assert all(dcqcn[k] == pfc[k].replace("-pfc-", "-dcqcn-") for k in named)
    a, b = read_fct(CASES / f"{case}-pfc-fct.txt"), read_fct(CASES / f"{case}-dcqcn-fct.txt")
    assert b.size == senders
    span = lambda f: int((f["start_ns"] + f["fct_ns"]).max() - f["start_ns"].min())  # noqa: E731
    assert span(b) > span(a)                 # DCQCN leaves the bottleneck idle at times
    assert int(b["fct_ns"].min()) < int(a["fct_ns"].min())      # and lets some flows go first


def test_the_63x16m_pfc_fixture_pauses_every_sender_and_only_the_senders():
    pfc = read_pfc(CASES / "incast63x16m-pfc-pfc.txt.gz")
    assert pfc.size == 26_042 and pfc.dtype == PFC_DTYPE
    assert pfc["line"].tolist() == list(range(1, pfc.size + 1))
    assert (np.diff(pfc["time_ns"]) >= 0).all()
    assert set(pfc["node_type"].tolist()) == {0} and set(pfc["if_index"].tolist()) == {1}
    assert set(pfc["node"].tolist()) == set(range(1, 64))
    counts = pause_counts(pfc)
    assert set(counts) == {(n, 1) for n in range(1, 64)}
    assert all(p == r for p, r, _ in counts.values())           # each pause ends in a resume
    # pause and resume alternate on every device (no repeated pause while paused)
    for node in range(1, 64):
        kinds = pfc["type"][pfc["node"] == node]
        assert (kinds[0::2] == PFC_PAUSE).all() and (kinds[1::2] == PFC_RESUME).all()
    span = 21_162_020
    assert all(0 < ns < span for _, _, ns in counts.values())
    assert int(pfc["time_ns"].min()) > 2_000_000_000


def test_the_dcqcn_fixtures_send_fewer_pauses():
    for case, lines in (("incast63x16m", 1_342), ("incast63x4m", 914)):
        pfc = read_pfc(CASES / f"{case}-dcqcn-pfc.txt")
        assert pfc.size == lines and int((pfc["type"] == PFC_PAUSE).sum()) == lines // 2
    assert read_pfc(CASES / "incast8x1m-dcqcn-pfc.txt").size == 0


def test_mixtral_summaries_are_consistent_and_the_two_modes_agree():
    docs = {cc: json.loads((CASES / f"mixtral-8x7b-ep-scale64-{cc}-summary.json").read_text())
            for cc in ("pfc", "dcqcn")}
    for cc, doc in docs.items():
        assert doc["cc"] == cc and doc["scale"] == 64
        groups = {g["group"]: g for g in doc["groups"]}
        every = groups.pop("all")
        assert every["flows"] == every["completed"] == 630_547 and every["not_completed"] == []
        assert sum(g["flows"] for g in groups.values()) == every["flows"]
        assert sum(g["bytes"] for g in groups.values()) == every["bytes"]
        assert every["sim_ns"] >= max(g["sim_ns"] for g in groups.values())   # from its own start
        for g in doc["groups"]:
            assert g["p50"] <= g["p90"] <= g["p99"] <= g["max"]
        assert (round(every["p50"], 3), round(every["p90"], 3), round(every["p99"], 3)) == \
            (1.064, 1.997, 2.026)
    # no CNP ever reached a sender: DCQCN never acted, the runs are the same
    assert docs["pfc"]["groups"] == docs["dcqcn"]["groups"]


def _qlen(cc: str) -> np.ndarray:
    text = gzip.decompress((CASES / f"incast63x16m-{cc}-qlen-port1.txt.gz").read_bytes()).decode()
    return np.array([[int(x) for x in line.split()] for line in text.splitlines()
                     if not line.startswith("#")], np.int64)


def test_the_bottleneck_queue_fills_at_the_senders_excess_rate_and_stays_in_the_buffer():
    """PFC only: until the first pause, 63 senders at line rate into one port at line rate grow
    its queue by 62 frames per frame time; the first frame reaches the switch after one
    serialization and one propagation (82 + 500 ns). Never above the 128 MiB buffer."""
    buffer_bytes = int(_config("incast63x16m-pfc-config.txt")["BUFFER_SIZE"]) << 20
    for cc in ("pfc", "dcqcn"):
        q = _qlen(cc)
        # buckets with no event (the port idle, DCQCN) are left out
        assert (np.diff(q[:, 0]) > 0).all() and not (q[:, 0] % 10_000).any()
        assert q[0, 0] == 2_000_000_000
        assert (q[:, 1] >= q[:, 2]).all() and q[:, 1].max() < buffer_bytes
        assert q[-1, 2] == 0                                  # drained at the end
    q = _qlen("pfc")
    assert (np.diff(q[:, 0]) == 10_000).all()                 # PFC only: busy all along
    grow = 62 * (4096 + HEADER_BYTES) / 82 * (10_000 - 582)
    assert abs(q[0, 1] / grow - 1) < 0.005
    first_pause = int(read_pfc(CASES / "incast63x16m-pfc-pfc.txt.gz")["time_ns"][0])
    peak = int(q[np.argmax(q[:, 1]), 0])
    assert peak <= first_pause < peak + 10_000                # the queue peaks as PFC begins


def test_ce_marks_at_the_receiver_add_up():
    rows = np.loadtxt(CASES / "incast63x4m-dcqcn-ce-at-host0.txt", dtype=np.int64, comments="#")
    assert rows[:, 0].tolist() == list(range(1, 64))
    assert (rows[:, 1] == (4 << 20) // 4096).all() and (rows[:, 2] <= rows[:, 1]).all()
    assert (int(rows[:, 1].sum()), int(rows[:, 2].sum())) == (64_512, 57_606)


@pytest.mark.parametrize("text, message", [
    ("2000037736 4 0 1\n", "line 1: got 4 fields, expected 5"),
    ("\n2000037736 4 0 1 2\n", "line 2: type: got 2, expected 0 (resume) or 1 (pause)"),
    ("2000037736 4 3 1 1\n", "line 1: node_type: got 3, expected 0 (host) or 1 (switch)"),
    ("2.0 4 0 1 1\n", "line 1: time_ns: got '2.0', expected an integer from 0 to 10"),
    ("2000037736 -4 0 1 1\n", "line 1: node: got '-4', expected an integer"),
    ("2000037736 4 0 1999999999999999999 1\n", "line 1: if_index: got '1999999999999999999', "
                                               "expected an integer from 0 to 10"),
])
def test_malformed_pfc_lines_are_named(tmp_path, text, message):
    (tmp_path / "pfc.txt").write_text(text)
    with pytest.raises(InputError, match=re.escape(f"pfc.txt: {message}")):
        read_pfc(tmp_path / "pfc.txt")


def test_missing_empty_and_broken_files(tmp_path):
    with pytest.raises(InputError, match="nosuch.txt: got no such file, expected the "
                                         "simulator's PFC_OUTPUT_FILE"):
        read_pfc(tmp_path / "nosuch.txt")
    (tmp_path / "empty.txt").write_text("")
    assert read_pfc(tmp_path / "empty.txt").shape == (0,) and pause_counts(read_pfc(
        tmp_path / "empty.txt")) == {}
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="bad.txt.gz: cannot read"):
        read_pfc(tmp_path / "bad.txt.gz")
    (tmp_path / "bin.txt").write_bytes(b"\xff\n")
    with pytest.raises(InputError, match="bin.txt: cannot read"):
        read_pfc(tmp_path / "bin.txt")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 10**6)),
                max_size=40), st.booleans())
def test_written_lines_read_back_and_pauses_add_up(tmp_path_factory, events, gz):
    """Any time-ordered sequence of alternating pause/resume lines per device (as get_pfc
    writes them) reads back field for field, and paused_ns adds up each pause to its resume."""
    t, state, lines, expect = 2_000_000_000, {}, [], {}
    for node, dev, dt in events:
        t += dt
        key = (node, dev)
        kind = PFC_RESUME if state.get(key) is not None else PFC_PAUSE
        c = expect.setdefault(key, [0, 0, 0])
        if kind == PFC_PAUSE:
            state[key] = t
            c[0] += 1
        else:
            c[1] += 1
            c[2] += t - state.pop(key)
        lines.append((t, node, int(node == 0), dev, kind))
    for key, t0 in state.items():
        expect[key][2] += t - t0
    text = "".join("%d %d %d %d %d\n" % row for row in lines)
    path = tmp_path_factory.mktemp("pfc") / ("pfc.txt.gz" if gz else "pfc.txt")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    got = read_pfc(path)
    assert [tuple(r)[1:] for r in got.tolist()] == lines
    assert got["line"].tolist() == list(range(1, len(lines) + 1))
    assert pause_counts(got) == {k: tuple(v) for k, v in expect.items()}


@pytest.mark.slow
def test_the_63x16m_pauses_beside_our_queued_fabric():
    """Our queued fabric's PFC frames beside the simulator's per device: every sender's device
    (host h, if_index 1: its only QbbNetDevice) is paused by our switch port h in both, nothing
    else is; the XOFF counts within 5 % and the paused time within 1 % in total."""
    from tokenpcap.export.hpcc_fct import compare_hpcc

    scen = CASES.parents[2] / "profiles" / "scenarios" / "incast-63x16m-hpcc-ns3.yaml"
    c = compare_hpcc(scen, CASES / "incast63x16m-pfc-fct.txt",
                     pfc_path=CASES / "incast63x16m-pfc-pfc.txt.gz")
    rows = c.pfc
    assert [(r["node"], r["if_index"]) for r in rows] == [(h, 1) for h in range(1, 64)]
    assert [(r["device"], r["sender"]) for r in rows] == [(f"nic {h}", f"switch0:{h}")
                                                         for h in range(1, 64)]
    assert all(r["sim_pauses"] == r["sim_resumes"] and r["ours_xoff"] == r["ours_xon"] > 0
               for r in rows)
    sim = sum(r["sim_pauses"] for r in rows)
    ours = sum(r["ours_xoff"] for r in rows)
    assert sim == 13_021 and abs(ours - sim) <= 0.05 * sim
    sim_t = sum(r["sim_paused_ns"] for r in rows)
    ours_t = sum(r["ours_paused_ns"] for r in rows)
    assert abs(ours_t - sim_t) <= 0.01 * sim_t


def test_a_pfc_line_of_another_topology_is_named(tmp_path):
    from tokenpcap.config.profiles import load_cluster
    from tokenpcap.export.hpcc_pfc import pfc_beside
    from tokenpcap.records.fabric import empty_log
    from tokenpcap.schedule.engine.topology import build_topology

    topo = build_topology(load_cluster(CASES.parents[2] / "profiles" / "clusters"
                                       / "h100-rocev2-64x1-hpcc-ns3.yaml"))
    line = lambda node, kind, dev: np.array([(1, 5, node, kind, dev, 1)], PFC_DTYPE)  # noqa: E731
    assert pfc_beside(np.empty(0, PFC_DTYPE), empty_log(), topo) == []
    with pytest.raises(InputError, match="node 3 if_index 2: got a device the exported "
                                         "topology does not have"):
        pfc_beside(line(3, 0, 2), empty_log(), topo)
    with pytest.raises(InputError, match="node 65 if_index 1: got a device"):
        pfc_beside(line(65, 1, 1), empty_log(), topo)
    with pytest.raises(InputError, match="node 64 if_index 3: got a switch port facing a host"):
        pfc_beside(line(64, 1, 3), empty_log(), topo)


@pytest.mark.slow
def test_our_bottleneck_queue_follows_the_simulators():
    """The switch's egress queue to host 0 (ns-3 node 64 interface 1 = our switch0 port 0,
    priority 3) in the 63 x 16 MiB PFC-only incast, per 10 µs bucket, beside the fixture
    derived from the simulator's trace (README: the largest ``GetNBytes(3)`` at an Enqu/Dequ):
    the peaks one 4,144-B frame apart or closer, in the same bucket, and the buckets on average
    within 1 % of the simulator's mean queue."""
    from tokenpcap.pipeline import schedule_scenario

    scen = CASES.parents[2] / "profiles" / "scenarios" / "incast-63x16m-hpcc-ns3.yaml"
    tables, summary = schedule_scenario(scen).schedule.fabric_log()
    q = tables["queues"]
    q = q[(q["switch"] == 0) & (q["port"] == 0) & (q["priority"] == 3)]
    assert summary.qlen_sample_ns == 1000 and 10_000 % summary.qlen_sample_ns == 0
    with gzip.open(CASES / "incast63x16m-pfc-qlen-port1.txt.gz", "rt") as f:
        sim = np.loadtxt(f, dtype=np.int64)
    sim_b = (sim[:, 0] - 2_000_000_000) // 10_000
    n = int(max(sim_b.max(), q["time_ns"].max() // 10_000)) + 1
    theirs, ours = np.zeros(n, np.int64), np.zeros(n, np.int64)
    theirs[sim_b] = sim[:, 1]
    np.maximum.at(ours, q["time_ns"] // 10_000, q["max_bytes"])
    assert theirs.max() == 118_452_096
    assert abs(int(ours.max()) - int(theirs.max())) <= 4144
    assert int(np.argmax(ours)) == int(np.argmax(theirs))
    assert np.abs(ours - theirs).mean() <= 0.01 * theirs.mean()
