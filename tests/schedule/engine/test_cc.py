"""ECN marks, CNPs and DCQCN in the compiled engine (tokenpcap.schedule.engine.ecn, npoint, rpoint,
pace, cclog) against sources other than our code:

* HPCC ns-3 with DCQCN on the same incasts (fixtures in tests/cases/hpcc, made by the commands
  of its README.md: ``third`` of alibaba-edu/High-Precision-Congestion-Control at 9f4be2a with
  ``CC_MODE 1`` on ``incast<S>x<M>-dcqcn-config.txt``): 63 -> 1 x 16 MiB flows take
  14,151,323 .. 24,497,456 ns; with 4 MiB flows 57,606 of the 64,512 data packets reach host 0
  CE-marked (``incast63x4m-dcqcn-ce-at-host0.txt``, ``trace_reader``'s ``ecn:3``); 8 -> 1 x 1 MiB
  flows take 157,064 .. 451,693 ns;
* RED's definition (Floyd and Jacobson 1993; HPCC ``switch-mmu.cc`` ``ShouldSendCN``): no mark
  at or below K_min, every packet above K_max, in between a Bernoulli draw of
  P_max (q - K_min) / (K_max - K_min), checked against the binomial 99 % interval;
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
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.hpcc_fct import read_fct
from tokenpcap.plan.build import build_plan
from tokenpcap.records import PKT_CE_FLAG, PKT_CNP
from tokenpcap.schedule.engine.ccstate import PMAX_ONE
from tokenpcap.schedule.engine.ecn import red_mark
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


# ---------------------------------------------------------------- RED


@settings(max_examples=40, deadline=None)
@given(kmin=st.integers(0, 1 << 22), span=st.integers(1, 1 << 22), q=st.integers(0, 1 << 24),
       seed=st.integers(0, 1 << 40), key=st.integers(0, 1 << 50))
def test_red_never_marks_at_or_below_kmin_and_always_above_kmax(kmin, span, q, seed, key):
    kmax = kmin + span
    got = red_mark(q, kmin, kmax, PMAX_ONE // 5, seed, 3, 7, key)
    if q <= kmin:
        assert not got
    elif q > kmax:
        assert got


def test_red_marks_each_band_within_the_binomial_99_percent_interval():
    kmin, kmax, pmax = 1_600_000, 6_400_000, 0.2
    n = 4000
    for band in range(10):
        q = kmin + (kmax - kmin) * (2 * band + 1) // 20       # the band's middle
        p = pmax * (q - kmin) / (kmax - kmin)
        marks = sum(red_mark(q, kmin, kmax, int(pmax * PMAX_ONE), 0, 0, 1, key)
                    for key in range(band * n, (band + 1) * n))
        lo, hi = binom.interval(0.99, n, p)
        assert lo <= marks <= hi, (band, marks, lo, hi)


# ---------------------------------------------------------------- against HPCC ns-3


def test_incast_63_to_1_x_16mib_with_dcqcn_takes_what_ns3_takes():
    sched, _ = _run(SCEN / "incast-63x16m-hpcc-ns3-dcqcn.yaml", nics=())
    ns3 = read_fct(CASES / "incast63x16m-dcqcn-fct.txt")
    span_ns3 = int((ns3["start_ns"] + ns3["fct_ns"]).max() - ns3["start_ns"].min())
    assert span_ns3 == 24_497_456 and int(ns3["fct_ns"].min()) == 14_151_323
    f = _flow_fct(sched.messages)
    assert abs(int(sched.messages["arrival_ns"].max()) - span_ns3) <= 0.05 * span_ns3
    assert abs(f.min() - ns3["fct_ns"].min()) <= 0.10 * ns3["fct_ns"].min()
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
    ce = (tb["kind"] & PKT_CE_FLAG) != 0
    assert ce.sum() > 0 and not ((ta["kind"] & PKT_CE_FLAG) != 0).any()
    tb = tb.copy()
    tb["kind"] &= ~np.uint8(PKT_CE_FLAG)
    assert ta.tobytes() == tb.tobytes()
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
