"""ECN marks, CNPs and DCQCN in the compiled engine (tokenpcap.schedule.engine.ecn, npoint, rpoint,
pace, cclog) against sources other than our code:

* HPCC ns-3 with DCQCN on the same incasts (fixtures in tests/cases/hpcc, made by the commands
  of its README.md: ``third`` of alibaba-edu/High-Precision-Congestion-Control at 9f4be2a with
  ``CC_MODE 1`` on ``incast<S>x<M>-dcqcn-config.txt``): 63 -> 1 x 16 MiB flows take
  14,151,323 .. 24,497,456 ns (and, with ``NS_GLOBAL_VALUE=RngRun=N`` for N = 2..5, spans of
  23.59 .. 23.87 ms whose fastest flows take 10.26 .. 10.51 ms); with 4 MiB flows 57,606 of the 64,512 data packets reach host 0
  CE-marked (``incast63x4m-dcqcn-ce-at-host0.txt``, ``trace_reader``'s ``ecn:3``); 8 -> 1 x 1 MiB
  flows take 157,064 .. 451,693 ns;
* invariants: with ``cc: none`` a mark changes no time (the same frames at the same times, only
  the CE bit of their kind differs); a notification point never sends one QP two CNPs closer
  than ``min_time_between_cnps``; every CNP it sends reaches its reaction point once, and the
  capture, the counters and the side tables count the same marks and CNPs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.hpcc_fct import read_fct
from tokenpcap.plan.build import build_plan
from tokenpcap.records import PKT_CNP, TX_FLAG_CE
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[3]
SCEN = ROOT / "profiles" / "scenarios"
CASES = ROOT / "tests" / "cases" / "hpcc"
CLUSTER = ROOT / "profiles" / "clusters" / "h100-rocev2-64x1-hpcc-ns3.yaml"


def _run(path: Path, **kw):
    sched = Schedule(build_plan(load_scenario(path)), keep_history=False, **kw)
    tx = [t for t in sched.run()]
    return sched, (np.concatenate(tx) if tx else np.zeros(0))


def _flow_fct(m: np.ndarray) -> np.ndarray:
    """Per sending NIC: first ready to last arrival of its data (one flow per sender)."""
    d = m[m["kind"] == 0]
    nics = np.unique(d["src_nic"])
    return np.array([d["arrival_ns"][d["src_nic"] == n].max() - d["ready_ns"][d["src_nic"] == n].min()
                     for n in nics])


def _incast(tmp_path: Path, senders: int, nbytes: int, fabric: dict, name: str = "cc") -> Path:
    """An incast on the 64 x 1 hpcc-ns3 cluster with ``fabric`` keys over its own."""
    cl = yaml.safe_load(CLUSTER.read_text())
    cl["fabric"] = {**cl["fabric"], **fabric}
    cl["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "cluster": cl,
        "workload": {"kind": "incast", "senders": senders, "receiver": 0, "bytes": nbytes},
        "collectives": {"algorithm": "ring", "channels": 1, "slice_bytes": nbytes},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False,
                       "ack_every_packets": 1}}))
    return path


# ---------------------------------------------------------------- against HPCC ns-3


def test_incast_63_to_1_x_16mib_with_dcqcn_takes_what_ns3_takes():
    """ns-3's fastest flow depends on its RED draws: with its default stream (``RngRun`` 1, the
    fixture) 14.15 ms, with ``RngRun`` 2..5 (``incast63x16m-dcqcn-rngrun<N>-fct.txt``) 10.26 to
    10.51 ms; so ours is held to 10 % of that range, the span to 5 % of every run's."""
    sched, _ = _run(SCEN / "incast-63x16m-hpcc-ns3-dcqcn.yaml", nics=())
    runs = [read_fct(CASES / "incast63x16m-dcqcn-fct.txt")] + [
        read_fct(CASES / f"incast63x16m-dcqcn-rngrun{r}-fct.txt") for r in (2, 3, 4, 5)]
    spans = [int((f["start_ns"] + f["fct_ns"]).max() - f["start_ns"].min()) for f in runs]
    fastest = [int(f["fct_ns"].min()) for f in runs]
    assert spans[0] == 24_497_456 and fastest[0] == 14_151_323
    span = int(sched.messages["arrival_ns"].max())
    assert all(abs(span - s) <= 0.05 * s for s in spans), (span, spans)
    f = _flow_fct(sched.messages)
    assert 0.9 * min(fastest) <= f.min() <= 1.1 * max(fastest), (f.min(), fastest)
    c = sched.fabric_counters
    assert c["drops"] == 0 and c["ce_marks"] > 0 and c["cnps"] > 0


def test_incast_63_to_1_x_4mib_with_dcqcn_marks_what_ns3_marks_at_the_receiver():
    sched, _ = _run(SCEN / "incast-63x4m-hpcc-ns3-dcqcn.yaml", nics=())
    ce = np.loadtxt(CASES / "incast63x4m-dcqcn-ce-at-host0.txt", dtype=np.int64)
    frac_ns3 = ce[:, 2].sum() / ce[:, 1].sum()
    assert ce[:, 1].sum() == 64_512 and ce[:, 2].sum() == 57_606
    qps = sched.cc_log()["ce_qps"]
    got = int(qps["ce_received"][qps["dst_nic"] == 0].sum()) / 64_512
    assert abs(got - frac_ns3) <= 0.05


def test_incast_8_to_1_x_1mib_with_dcqcn_takes_what_ns3_takes():
    sched, _ = _run(SCEN / "incast-8x1m-hpcc-ns3-dcqcn.yaml", nics=())
    ns3 = read_fct(CASES / "incast8x1m-dcqcn-fct.txt")
    assert int(ns3["fct_ns"].min()) == 157_064 and int(ns3["fct_ns"].max()) == 451_693
    f = _flow_fct(sched.messages)
    assert abs(f.max() - ns3["fct_ns"].max()) <= 0.10 * ns3["fct_ns"].max()
    assert abs(f.min() - ns3["fct_ns"].min()) <= 0.10 * ns3["fct_ns"].min()
    assert sched.fabric_counters["pfc_frames"] == 0


# ---------------------------------------------------------------- invariants


def test_marks_without_congestion_control_change_no_time_only_the_ce_bit(tmp_path):
    plain = _incast(tmp_path, 8, 1 << 20, {}, "plain")
    marked = _incast(tmp_path, 8, 1 << 20, {"ecn": {"enabled": True}}, "marked")
    (sa, ta), (sb, tb) = _run(plain, point="nic-rx", nics=[0]), _run(marked, point="nic-rx", nics=[0])
    assert sa.messages.tobytes() == sb.messages.tobytes()
    assert ta.dtype == TX_DTYPE and "flags" in tb.dtype.names
    ce = (tb["flags"] & TX_FLAG_CE) != 0
    assert ce.sum() > 0 and ((tb["kind"] == 0) | ~ce).all()        # only data is marked
    assert ta.tobytes() == tb[list(TX_DTYPE.names)].astype(TX_DTYPE).tobytes()
    log = sb.cc_log()
    assert int(ce.sum()) == int(log["ce_qps"]["ce_received"].sum()) == sb.fabric_counters["ce_marks"]
    assert sb.fabric_counters["cnps"] == 0 and len(log["cnps"]) == 0 and len(log["rates"]) == 0


def test_connectx_cnps_leave_the_receiver_at_most_one_per_qp_per_4us_and_reach_the_sender(tmp_path):
    path = _incast(tmp_path, 8, 1 << 20, {"cc": "dcqcn", "np": {"cnp_in_ack": False,
                                                                "min_time_between_cnps": 4,
                                                                "cnp_802p_prio": 0}})
    sched, tx = _run(path, nics=[0])
    cnp = tx[tx["kind"] == PKT_CNP]
    assert len(cnp) > 0 and (cnp["nic"] == 0).all()
    src = cnp["peer_nic"]
    for s in np.unique(src):
        t = cnp["time_ns"][src == s]          # one QP per sender in an incast
        assert (np.diff(t) >= 4000).all()
    log = sched.cc_log()
    assert len(log["cnps"]) == len(cnp) == sched.fabric_counters["cnps"]
    assert (log["cnps"]["np_nic"] == 0).all()
    assert sorted(log["cnps"]["rp_nic"].tolist()) == sorted(src.tolist())
    assert len(log["rates"]) > 0 and (log["rates"]["new_bps"] < 400e9).any()


def test_a_cnp_row_gets_a_comment_of_its_own_that_reads_back_as_a_cnp():
    from tokenpcap.records.comments import CONTROL_PREFIXES, comment_text, parse_comment
    text = comment_text(PKT_CNP, 0, 0, 7, 0, -1, 0, -1, -1)
    assert text.startswith("cnp ") and "cnp " in CONTROL_PREFIXES and "pfc " not in CONTROL_PREFIXES
    assert parse_comment(text)["kind"] == PKT_CNP


def _flows(tmp_path: Path, rows: list[tuple[int, int, int]], fabric: dict, name: str) -> Path:
    """A ``flows`` workload (HPCC flow-file lines ``src dst 3 100 bytes 2.0``, every flow at the
    same start) on the 64 x 1 hpcc-ns3 cluster with ``fabric`` keys over its own."""
    (tmp_path / f"{name}.txt").write_text(
        f"{len(rows)}\n" + "".join(f"{s} {d} 3 100 {b} 2.0\n" for s, d, b in rows))
    cl = yaml.safe_load(CLUSTER.read_text())
    cl["fabric"] = {**cl["fabric"], **fabric}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "cluster": cl, "workload": {"kind": "flows", "file": f"{name}.txt"},
        "collectives": {"algorithm": "ring", "channels": 1, "slice_bytes": 1 << 20},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False,
                       "ack_every_packets": 1}}))
    return path


def test_a_dcqcn_timer_costs_nothing_for_a_qp_that_never_saw_a_cnp(tmp_path):
    """DCQCN's timers start at a QP's first CNP (docs/dcqcn.md, "One timer per QP, none without
    a CNP"). Measured on the engine's heap (``sc[SEQ]``: every event ever pushed): 8 -> 1 x 1 MiB
    congests host 0's port, 9 -> 10 x 1 MiB runs beside it alone on its ports. (1) With DCQCN,
    the QPs that got no CNP (the bystander, and every QP of the ACK direction) end in the state
    they started in (no alpha, no timer due, no rate row). (2) With nothing marked (K_min above
    any queue) a DCQCN run pushes exactly the events of a ``cc: none`` run and gives the same
    times: for a QP without CNP the timers cost no event at all."""
    from tokenpcap.schedule.engine import events as K
    from tokenpcap.schedule.engine.dcqcn import dcqcn_next_due_ns, dcqcn_state

    rows = [(s, 0, 1 << 20) for s in range(1, 9)] + [(9, 10, 1 << 20)]
    sched, _ = _run(_flows(tmp_path, rows, {"cc": "dcqcn"}, "dcqcn"), nics=())
    log = sched.cc_log()
    hit = set(log["cnps"]["qp"].tolist())
    rp = sched._eng.S.rp
    fresh = dcqcn_state(rp.shape[0], sched._eng.S.rpp)
    senders = {int(r["qp"]): int(r["src_nic"]) for r in log["ce_qps"]}
    assert {senders[q] for q in hit} == set(range(1, 9)) and len(log["rates"]) > 0
    assert set(log["rates"]["qp"].tolist()) <= hit
    quiet = [q for q in range(rp.shape[0]) if q not in hit]
    assert len(quiet) > 0
    for q in quiet:
        assert np.array_equal(rp[q], fresh[q]) and dcqcn_next_due_ns(rp, q) == -1
    none = {"ecn": {"kmin_bytes": 1 << 30, "kmax_bytes": 1 << 30}}
    a, _ = _run(_flows(tmp_path, rows, {"cc": "dcqcn", **none}, "quiet"), nics=())
    b, _ = _run(_flows(tmp_path, rows, {"cc": "none", **none}, "plain"), nics=())
    assert a.fabric_counters["cnps"] == a.fabric_counters["ce_marks"] == 0
    assert int(a._eng.sc[K.SEQ]) == int(b._eng.sc[K.SEQ])
    assert a.messages.tobytes() == b.messages.tobytes()
