"""The queued fabric in the compiled engine (tokenpcap.schedule.engine.fabric, fabstate, fablog).

Right values come from elsewhere than our code:

* HPCC ns-3 run on the same incasts (fixtures in tests/cases/hpcc, their commands in its
  README.md; alibaba-edu/High-Precision-Congestion-Control at 9f4be2a, ``scratch/third``,
  ``CC_MODE 0``, PFC only): the 63 -> 1 x 16 MiB incast's span is 21,162,020 ns and the
  8 -> 1 x 1 MiB flows take 169,446..170,020 ns;
* physics: a receiver link at 400 Gb/s carries 63 x 16 MiB of RoCEv2 frames (4,154 B each +
  24 B of FCS, preamble and inter-frame gap) in 258,048 x 4,178 x 8 / 400 ns = 21.56 ms;
* invariants that hold for any fabric: every packet that enters a switch leaves it, queues are
  never negative and end empty, a lossless priority never drops, a link never carries more than
  its rate (consecutive frames on a port start at least one serialization apart), and the
  payload of every message arrives;
* 802.1Qbb: no data frame starts on a paused port between a pause's arrival and its resume.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError, ProfileError
from tokenpcap.export.hpcc_fct import read_fct
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import events as K
from tokenpcap.records import PKT_PFC
from tokenpcap.schedule.engine.port import PKT_ACK
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[3]
SCEN = ROOT / "profiles" / "scenarios"
CASES = ROOT / "tests" / "cases" / "hpcc"
GPU = {"name": "H100-SXM", "peak_tflops": 989}


def _cluster(nodes: int, nics: int, fabric: dict, gbps: float = 400) -> dict:
    return {"name": "t", "nodes": nodes, "gpus_per_node": nics, "nics_per_node": nics,
            "link_gbps": gbps, "nvlink_gbps": 3600, "gpu": GPU, "fabric": fabric}


def _scenario(tmp_path: Path, cluster: dict, workload: dict, name: str = "fab", **gen) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "cluster": cluster, "workload": workload,
        "collectives": {"algorithm": "ring", "channels": 1},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False, **gen}}))
    return path


def _run(path: Path, scale: int = 1, **kw):
    s = load_scenario(path)
    sched = Schedule(build_plan(s, scale=scale), keep_history=False, **kw)
    tx = [t for t in sched.run()]
    return sched, (np.concatenate(tx) if tx else np.zeros(0))


def _flow_fct(m: np.ndarray) -> np.ndarray:
    """Per sending NIC: first ready to last arrival of its data (one flow per sender)."""
    d = m[m["kind"] == 0]
    nics = np.unique(d["src_nic"])
    last = np.array([d["arrival_ns"][d["src_nic"] == n].max() for n in nics])
    first = np.array([d["ready_ns"][d["src_nic"] == n].min() for n in nics])
    return last - first


def test_incast_63_to_1_with_hpcc_conventions_takes_what_ns3_takes():
    sched, _ = _run(SCEN / "incast-63x16m-hpcc-ns3.yaml", nics=())
    ns3 = read_fct(CASES / "incast63x16m-pfc-fct.txt")
    span_ns3 = int((ns3["start_ns"] + ns3["fct_ns"]).max() - ns3["start_ns"].min())
    m = sched.messages
    span = int(m["arrival_ns"].max())
    assert span_ns3 == 21_162_020
    assert abs(span - span_ns3) <= 0.005 * span_ns3
    f = _flow_fct(m)
    assert abs(f.min() - ns3["fct_ns"].min()) <= 0.01 * ns3["fct_ns"].min()
    assert abs(f.max() - ns3["fct_ns"].max()) <= 0.01 * ns3["fct_ns"].max()
    c = sched.fabric_counters
    assert c["drops"] == 0 and c["headroom_overflows"] == 0 and c["pfc_frames"] > 0


def test_incast_8_to_1_with_hpcc_conventions_takes_what_ns3_takes(tmp_path):
    cl = str(ROOT / "profiles" / "clusters" / "h100-rocev2-64x1-hpcc-ns3.yaml")
    path = _scenario(tmp_path, cl, {"kind": "incast", "senders": 8, "receiver": 0,
                                    "bytes": 1 << 20}, ack_every_packets=1)
    sched, _ = _run(path, nics=())
    ns3 = read_fct(CASES / "incast8x1m-pfc-fct.txt")
    f = _flow_fct(sched.messages)
    assert ns3["fct_ns"].min() == 169_446 and ns3["fct_ns"].max() == 170_020
    assert abs(f.min() - ns3["fct_ns"].min()) <= 0.01 * ns3["fct_ns"].min()
    assert abs(f.max() - ns3["fct_ns"].max()) <= 0.01 * ns3["fct_ns"].max()


def test_incast_63_to_1_with_our_frames_is_the_receiver_link_at_line_rate():
    sched, _ = _run(SCEN / "incast-63x16m.yaml", nics=())
    frames = 63 * (16 << 20) // 4096
    physics = frames * (4096 + 14 + 20 + 8 + 12 + 4 + 24) * 8 / 400   # ns, RoCEv2 + layer 1
    span = int(sched.messages["arrival_ns"].max())
    assert physics == pytest.approx(21_562_000, rel=1e-3)
    assert abs(span - physics) <= 0.01 * physics
    assert sched.fabric_counters["drops"] == 0


def test_an_ideal_fabric_named_in_the_profile_changes_no_frame(tmp_path):
    wl = {"kind": "alltoall", "bytes": 65536}
    a = _scenario(tmp_path, _cluster(2, 2, {"model": "ideal"}), wl, "a")
    b = _scenario(tmp_path, {k: v for k, v in _cluster(2, 2, {}).items() if k != "fabric"}, wl, "b")
    (sa, ta), (sb, tb) = _run(a), _run(b)
    assert ta.tobytes() == tb.tobytes()
    assert sa.messages.tobytes() == sb.messages.tobytes()
    with pytest.raises(RuntimeError, match="fabric is ideal"):
        sa.fabric_log()


def _ser(fb: np.ndarray, gbps: float = 400) -> np.ndarray:
    return np.ceil((fb.astype(np.int64) + 24) * 8 / gbps).astype(np.int64)


def _check_invariants(sched, plan_bytes: int) -> None:
    S, sc = sched._eng.S, sched._eng.sc
    assert sc[K.PKUSED] == 0                            # every packet left every switch
    assert (S.fq[:, K.Q8_BYTES] == 0).all() and (S.fq[:, K.Q8_HEAD] == -1).all()
    assert (S.fsw[:, K.FS_QUEUED] == 0).all() and (S.fsw[:, K.FS_SHARED] == 0).all()
    assert (S.fi[:, K.I8_BYTES] == 0).all() and (S.fi[:, K.I8_HDRM] == 0).all()
    log, summary = sched.fabric_log()
    assert (log["queues"]["max_bytes"] > 0).all()
    assert summary.drops_total == 0                     # lossless: nothing lost
    m = sched.messages
    d = m[m["kind"] == 0]
    assert (d["arrival_ns"] >= d["last_tx_end_ns"]).all()
    assert int(d["size_bytes"].sum()) == plan_bytes     # all the payload arrived
    # per link: what switches sent equals what they received (switch ports + NIC uplinks)
    nic_rx = int(log["nics"]["rx_frames"].sum())
    assert int(log["links"]["tx_frames"].sum()) >= nic_rx
    # every PFC event of the log is one frame a port sent
    assert len(log["pfc"]) == int(log["links"]["pfc_sent"].sum())
    xoff = log["pfc"][log["pfc"]["xoff"] == 1]
    assert (xoff["quanta"] > 0).all()


FABRICS = st.fixed_dictionaries({
    "model": st.just("queued"),
    "preset": st.sampled_from(["hpcc-ns3", "th5-400g", "spectrum4-400g"]),
    "switch": st.fixed_dictionaries({"buffer_bytes": st.sampled_from([2_000_000, 8_000_000, 64 << 20])}),
})


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(fab=FABRICS, kind=st.sampled_from(["incast", "alltoall"]),
       kib=st.sampled_from([64, 512, 2048]),
       topo=st.sampled_from([("single-switch", 8, 1), ("rail-optimized", 4, 2),
                             ("leaf-spine", 4, 2)]),
       seed=st.integers(0, 3))
def test_random_small_fabrics_conserve_packets_and_bytes_and_never_exceed_link_rate(
        tmp_path_factory, fab, kind, kib, topo, seed):
    tmp = tmp_path_factory.mktemp("fab")
    kindname, nodes, nics = topo
    fab = {**fab, "topology": {"kind": kindname},
           "ecmp": {"seed": seed}}
    if kindname == "leaf-spine":
        fab["topology"]["nodes_per_leaf"] = 2
    n = nodes * nics
    wl = ({"kind": "incast", "senders": n - 1, "receiver": 0, "bytes": kib << 10}
          if kind == "incast" else {"kind": "alltoall", "bytes": kib << 10})
    path = _scenario(tmp, _cluster(nodes, nics, fab), wl)
    try:
        s = load_scenario(path)
    except ProfileError:
        reject()                    # a buffer smaller than the preset's headroom needs
    plan = build_plan(s)
    # the payload that crosses nodes (the rest stays on NVLink)
    want = (n - nics) * (kib << 10) if kind == "incast" else n * (n - nics) * (kib << 10)
    # the receiver's downlink: frames arriving at NIC 0 never overlap on the wire
    sched = Schedule(plan, keep_history=False, point="nic-rx", nics=[0])
    rx = np.concatenate(list(sched.run()))
    _check_invariants(sched, want)
    gap = np.diff(rx["time_ns"])
    fb = rx["frame_bytes"][:-1].astype(np.int64)
    if fab["preset"] == "hpcc-ns3":
        # ns-3's frame: payload + 48 B, at most the frame - 74 + 48 (FIRST has a 16-B RETH), floor
        least = np.maximum(fb - 74 + 48, 0) * 8 // 400
    else:
        least = _ser(fb)
    assert (gap >= least).all()


def test_pause_frames_reach_the_sender_and_stop_its_data_until_the_resume(tmp_path):
    # 8 -> 1 x 1 MiB into a 2 MB buffer: the switch pauses the senders
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "switch": {"buffer_bytes": 2_000_000}}
    path = _scenario(tmp_path, _cluster(9, 1, fab), {"kind": "incast", "senders": 8,
                                                     "bytes": 1 << 20})
    s = load_scenario(path)
    plan = build_plan(s)
    rx_s = Schedule(plan, keep_history=False, point="nic-rx", nics=[1])
    rx = np.concatenate(list(rx_s.run()))
    tx_s = Schedule(plan, keep_history=False, point="nic-tx", nics=[1])
    tx = np.concatenate(list(tx_s.run()))
    pfc = rx[rx["kind"] == PKT_PFC]
    log, _ = rx_s.fabric_log()
    port1 = log["links"][log["links"]["peer_nic"] == 1]
    assert len(pfc) > 0 and len(pfc) == int(port1["pfc_sent"][0])
    assert (pfc["index"] == 1 << 3).all()                       # priority 3's bit
    # XOFF and XON alternate; the data of priority 3 stops from an XOFF's arrival to its XON's
    q = pfc["msg"]
    assert (q[0::2] > 0).all() and (q[1::2] == 0).all()
    ser = int(np.floor(64 * 8 / 400))                           # ns-3's 64-byte PFC frame
    data = tx[tx["kind"] != PKT_ACK]["time_ns"]
    for on, off in zip(pfc["time_ns"][0::2] + ser, np.append(pfc["time_ns"][1::2] + ser, 1 << 62)):
        assert not ((data >= on) & (data < off)).any()
    # the same frames in both runs: timing does not depend on what is captured
    assert rx_s.messages.tobytes() == tx_s.messages.tobytes()


def test_a_full_buffer_without_pfc_stops_the_run_in_one_line_naming_where(tmp_path):
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "switch": {"buffer_bytes": 200_000}, "pfc": {"enabled": False}}
    path = _scenario(tmp_path, _cluster(9, 1, fab), {"kind": "incast", "senders": 8,
                                                     "bytes": 1 << 20})
    with pytest.raises(InfeasiblePlanError, match=r"fabric: switch 0 dropped a data packet at "
                                                  r"its port 0, priority 3, at [0-9,]+ ns"):
        _run(path, nics=())
