"""The queued fabric's fast path (tokenpcap.schedule.engine.fabric_fast) against its per-packet
path: the same scenario run both ways gives identical results, byte for byte.

The oracle is the per-packet path itself (``fabstate.FAST_PATH = False``: every packet's arrival
at a NIC is an event of its own and a NIC wakes about at every frame it sends), whose timing the
fabric's own tests check against HPCC ns-3 and physics (tests/schedule/engine/test_fabric.py).
Compared: the message table, the timeline, the frames of the selected NICs at every capture
point (nic-tx, nic-rx, a switch port), the fabric's log (PFC events, queue depths, per-link and
per-NIC counters, drops) and its counters; and the fast path must take fewer events where it
applies (a rail-aligned ring, an incast's ACKs).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import ProfileError
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import events as K
from tokenpcap.schedule.engine import fabstate
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[3]
SCEN = ROOT / "profiles" / "scenarios"
GPU = {"name": "H100-SXM", "peak_tflops": 989}


def _cluster(nodes: int, nics: int, fabric: dict) -> dict:
    return {"name": "t", "nodes": nodes, "gpus_per_node": nics, "nics_per_node": nics,
            "link_gbps": 400, "nvlink_gbps": 3600, "gpu": GPU, "fabric": fabric}


def _scenario(tmp_path: Path, cluster, workload: dict, name: str = "fast", **gen) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "cluster": cluster, "workload": workload,
        "collectives": {"algorithm": "ring", "channels": gen.pop("channels", 1)},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False, **gen}}))
    return path


def _queued(path: Path, tmp_path: Path, fabric: dict) -> Path:
    """A bundled scenario with its cluster inline and ``fabric`` set on it."""
    data = yaml.safe_load(path.read_text())
    for key in ("corpus", "model"):
        if isinstance(data.get(key), str):
            data[key] = str((path.parent / data[key]).resolve())
    if isinstance(data.get("cluster"), str):
        data["cluster"] = yaml.safe_load((path.parent / data["cluster"]).read_text())
    data["cluster"]["fabric"] = fabric
    out = tmp_path / f"{path.stem}-queued.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def _outcome(plan, fast: bool, monkeypatch, **kw) -> dict:
    """Everything a run produces, with the fast path on or off."""
    monkeypatch.setattr(fabstate, "FAST_PATH", fast)
    sched = Schedule(plan, keep_history=True, **kw)
    tx = [t for t in sched.run()]
    log, summary = sched.fabric_log()
    got = {"frames": (np.concatenate(tx) if tx else np.zeros(0)).tobytes(),
           "counters": sched.fabric_counters, "summary": summary,
           "timeline": sched.timeline.tobytes(), "events": int(sched._eng.sc[K.SEQ])}
    if sched.keep_messages:
        got["messages"] = sched.messages.tobytes()
    for name, table in log.items():
        got[f"log {name}"] = table.tobytes()
    return got


def _same(plan, monkeypatch, **kw) -> tuple[dict, dict]:
    slow = _outcome(plan, False, monkeypatch, **kw)
    fast = _outcome(plan, True, monkeypatch, **kw)
    for key in slow:
        if key != "events":
            assert fast[key] == slow[key], key
    return slow, fast


@pytest.mark.parametrize("point", ["nic-tx", "nic-rx"])
def test_a_rail_aligned_ring_is_identical_and_takes_fewer_events(tmp_path, monkeypatch, point):
    # an AllReduce over 2 nodes x 4 NICs on a rail-optimized fabric, one leaf per rail
    fab = {"model": "queued", "topology": {"kind": "rail-optimized"}}
    path = _scenario(tmp_path, _cluster(2, 4, fab), {"kind": "allreduce", "bytes": 8 << 20},
                     channels=2)
    plan = build_plan(load_scenario(path))
    slow, fast = _same(plan, monkeypatch, point=point, nics=[0, 5])
    assert slow["counters"]["packet_hops"] > 0
    assert fast["events"] < 0.6 * slow["events"]


def test_the_incast_with_hpcc_conventions_is_identical(tmp_path, monkeypatch):
    # 8 -> 1 x 1 MiB into a 2 MB buffer: PFC pauses the senders; an ACK per packet
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "switch": {"buffer_bytes": 2_000_000}}
    path = _scenario(tmp_path, _cluster(9, 1, fab), {"kind": "incast", "senders": 8,
                                                     "bytes": 1 << 20}, ack_every_packets=1)
    plan = build_plan(load_scenario(path))
    for point, nics in (("nic-tx", [0, 1]), ("nic-rx", [1]), ("switch:switch0:0", [0])):
        slow, fast = _same(plan, monkeypatch, point=point, nics=nics)
        assert slow["counters"]["pfc_frames"] > 0
        assert fast["events"] < slow["events"]


def test_mixtral_small_is_identical_with_its_message_ring(tmp_path, monkeypatch):
    # the expert AllToAll and the rings of a real job, the message table kept as a ring of rows
    path = _queued(SCEN / "mixtral-8x7b-ep.yaml", tmp_path, {"model": "queued",
                                                             "preset": "hpcc-ns3"})
    plan = build_plan(load_scenario(path), scale=2000)
    _same(plan, monkeypatch, nics=[0, 9], keep_messages=False)


FABRICS = st.fixed_dictionaries({
    "model": st.just("queued"),
    "preset": st.sampled_from(["hpcc-ns3", "th5-400g", "spectrum4-400g"]),
    "switch": st.fixed_dictionaries({"buffer_bytes": st.sampled_from([2_000_000, 64 << 20])}),
})


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(fab=FABRICS, kind=st.sampled_from(["incast", "alltoall", "allreduce"]),
       kib=st.sampled_from([64, 1024]),
       topo=st.sampled_from([("single-switch", 6, 1), ("rail-optimized", 3, 2),
                             ("leaf-spine", 4, 2)]),
       ecmp=st.sampled_from(["five-tuple", "spray"]), every=st.sampled_from([0, 1, 4]),
       point=st.sampled_from(["nic-tx", "nic-rx"]), seed=st.integers(0, 3))
def test_random_small_fabrics_give_identical_results_on_both_paths(
        tmp_path_factory, monkeypatch, fab, kind, kib, topo, ecmp, every, point, seed):
    tmp = tmp_path_factory.mktemp("fast")
    kindname, nodes, nics = topo
    fab = {**fab, "topology": {"kind": kindname}, "ecmp": {"mode": ecmp, "seed": seed}}
    if kindname == "leaf-spine":
        fab["topology"]["nodes_per_leaf"] = 2
    n = nodes * nics
    wl = ({"kind": "incast", "senders": n - 1, "receiver": 0, "bytes": kib << 10}
          if kind == "incast" else {"kind": kind, "bytes": kib << 10})
    path = _scenario(tmp, _cluster(nodes, nics, fab), wl, ack_every_packets=every)
    try:
        s = load_scenario(path)
    except ProfileError:
        reject()                    # a buffer smaller than the preset's headroom needs
    plan = build_plan(s)
    _same(plan, monkeypatch, point=point, nics=[0, n - 1], keep_messages=seed % 2 == 0)
