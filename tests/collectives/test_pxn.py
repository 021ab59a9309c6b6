"""NCCL's PXN for p2p sends, against ``ncclTopoGetNetDev`` written out apart.

``_nccl_get_net_dev`` below transcribes NVIDIA/nccl 5067397c ``src/graph/search.cc`` l. 1400-1460
(the branch without a graph) on a node of ``gpn`` NVLink-switched GPUs and ``npn`` NICs, GPU
``g`` next to NIC ``g * npn // gpn`` (``ncclTopoGetLocalNet``; ``ncclTopoGetLocalGpu`` of a NIC
is the first GPU next to it), every GPU's path to another GPU's NIC ``PATH_PXN``. It does not
import the module under test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.conftest import simple_on
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.pxn import p2p_route, p2p_routes
from tokenpcap.collectives.rails import rank_nic_bytes
from tokenpcap.collectives.traffic import CallShape, hops
from tokenpcap.collectives.transfers import transfers
from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan, rank_layout, scenario_p2p_net
from tokenpcap.plan.rows import bytes_per_nic
from tokenpcap.plan.wirebytes import p2p_wire_bytes

PROFILES = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def _nccl_get_net_dev(rank, peerRank, gpn, npn, PXN_DISABLE=0, P2P_PXN_LEVEL=2,  # noqa: N803
                      CROSS_NIC=2):
    """(netDev as a global NIC, proxyRank) of ncclTopoGetNetDev(comm, rank, NULL, 0, peerRank)."""
    node = rank // gpn

    def getLocalNet(r):  # noqa: N802
        return node * npn + (r % gpn) * npn // gpn

    def getLocalGpu(net):  # noqa: N802 - first GPU next to the NIC
        return next(node * gpn + g for g in range(gpn) if g * npn // gpn == net - node * npn)

    netDev = getLocalNet(rank)                                   # start with our local NIC
    proxyRank = rank
    pxnLevel = 0 if PXN_DISABLE == 1 else P2P_PXN_LEVEL
    if CROSS_NIC == 0 or pxnLevel != 0:
        localRank = node * gpn + peerRank % gpn                  # the peer's nvmlDev on our node
        netId = getLocalNet(localRank)
        if CROSS_NIC == 0:
            netDev = netId
        if pxnLevel == 1:
            # gpu->paths[NET][n].type <= PATH_PXN: the own NIC (PIX) or another GPU's (PXN)
            netDev = netId
            proxyRank = rank if netId == getLocalNet(rank) else getLocalGpu(netId)
        elif pxnLevel == 2:
            g2 = getLocalGpu(netId)                              # NVLink to us, PIX to the NIC
            proxyRank = g2
            netDev = netId
    return netDev, proxyRank


@settings(max_examples=40, deadline=None)
@given(gpn=st.sampled_from([2, 4, 8]), ratio=st.sampled_from([1, 2]), data=st.data(),
       disable=st.integers(0, 1), level=st.integers(0, 2), cross=st.integers(0, 2))
def test_route_is_nccls(gpn, ratio, data, disable, level, cross):
    npn = gpn // ratio
    lay = RankLayout(dp=4 * gpn, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=npn)
    src = data.draw(st.integers(0, lay.world_size - 1))
    dst = data.draw(st.integers(0, lay.world_size - 1).filter(lambda d: d // gpn != src // gpn))
    lvl = 0 if disable else level
    nic, proxy = _nccl_get_net_dev(src, dst, gpn, npn, disable, level, cross)
    assert p2p_route(src, dst, lay, lvl, cross) == (proxy, nic, lay.nic(dst))
    p, s, d = p2p_routes(np.array([src]), np.array([dst]), lay, lvl, cross)
    assert (int(p[0]), int(s[0]), int(d[0])) == (proxy, nic, lay.nic(dst))


def _ep_group(name):
    sc = load_scenario(PROFILES / f"{name}.yaml")
    lay = rank_layout(sc)
    group = tuple(lay.groups("ep")[0])
    return sc, lay, group


@pytest.mark.parametrize("name", ["deepseek-v3-2048", "mixtral-8x7b-ep"])
def test_alltoall_is_rail_local_with_its_nvlink_copies(name):
    """Every inter-node AllToAll message goes NIC j -> NIC j; each is preceded by an NVLink copy
    of its bytes to the sender node's GPU j unless the sender is GPU j; the plan's NVLink bytes
    hold the copies and its per-NIC egress equals the sender's-own-NIC rule's (uniform
    AllToAll)."""
    sc, lay, group = _ep_group(name)
    c = sc.collectives
    gpn = lay.gpus_per_node
    call = CallShape("AllToAll", group, len(group) * 2 * 131_072, 2)
    tr = transfers(call, c.algorithm, lay, c.channels, c.slice_bytes, "Simple",
                   scenario_p2p_net(sc), 8)
    t = tr.table
    nic = t[t["nic"]]
    npn = lay.nics_per_node
    assert len(nic) and (nic["src_nic"] % npn == nic["dst_nic"] % npn).all()
    assert (nic["src_nic"] == lay.nic_array(nic["src"] // gpn * gpn + nic["dst"] % gpn)).all()
    copies = t[~t["nic"] & (t["via"] >= 0)]
    moved = nic[nic["src"] % gpn != nic["dst"] % gpn]
    assert len(copies) == len(moved) and int(copies["bytes"].sum()) == int(moved["bytes"].sum())
    assert (copies["via"] == copies["src"] // gpn * gpn + copies["dst"] % gpn).all()
    # each copy's network message waits for it
    for i in np.flatnonzero(t["nic"] & (t["via"] >= 0))[:50].tolist():
        deps = tr.dep_list[tr.dep_ptr[i]:tr.dep_ptr[i + 1]].tolist()
        (c_row,) = [d for d in deps if not t["nic"][d]]
        assert t["byte_offset"][c_row] == t["byte_offset"][i] and t["src"][c_row] == t["src"][i]
    # the plan's accounting of the call (p2p_wire_bytes) against hops
    w = p2p_wire_bytes(call, c.algorithm, lay, c.channels, scenario_p2p_net(sc))
    h = hops(call, c.algorithm, lay)
    cross = h["src"] // gpn != h["dst"] // gpn
    copy = cross & (h["src"] % gpn != h["dst"] % gpn)
    pos = {r: i for i, r in enumerate(group)}
    want_nvl = np.zeros(len(group), np.int64)
    for s_, b, x in zip(h["src"].tolist(), h["bytes"].tolist(), (~cross | copy).tolist()):
        want_nvl[pos[s_]] += b * x
    assert (w.nvlink_bytes == want_nvl).all() and w.nvlink_bytes.sum() > 0
    assert (w.by_nic.sum(axis=1) == w.nic_bytes).all()
    per_nic = np.zeros(lay.nodes * lay.nics_per_node, np.int64)
    np.add.at(per_nic, lay.nic_array(h["src"][cross]), h["bytes"][cross])     # main's rule
    mine = np.zeros(lay.world_size, np.int64).repeat(lay.nics_per_node).reshape(lay.world_size, -1)
    mine[list(group)] = w.by_nic
    assert (bytes_per_nic(mine, lay) == per_nic).all()


def test_mixtral_plan_alltoall_rows():
    """mixtral-8x7b-ep at --scale 1024 (a uniform AllToAll: 32 KiB per peer): per phase, the
    AllToAll rows' NVLink bytes add the PXN copies and the per-NIC egress equals the sender's
    own NIC rule (rails.rank_nic_bytes)."""
    # Simple: the per-NIC rule counts data, LL's lines would double the 32 KiB messages
    plan = build_plan(load_scenario(PROFILES / "mixtral-8x7b-ep.yaml", simple_on()), scale=1024)
    lay, gpn = plan.layout, plan.layout.gpus_per_node
    rows = [r for r in plan.rows if r.collective == "AllToAll"]
    assert rows
    for r in rows:
        calls = [c for c in plan.calls(0) if c.label == r.name]
        own = np.zeros((lay.world_size, lay.nics_per_node), np.int64)
        nvl = 0
        for c in calls:
            own[list(c.group)] += rank_nic_bytes(c, plan.algorithm, lay, plan.channels(c))
            h = hops(c, plan.algorithm, lay)
            cross = h["src"] // gpn != h["dst"] // gpn
            nvl += int(h["bytes"][~cross | (h["src"] % gpn != h["dst"] % gpn)].sum())
        assert (r.nic_bytes_by_nic(lay) == bytes_per_nic(own, lay)).all()
        assert r.nvlink_bytes == nvl > 0


@pytest.mark.parametrize("pxn_disable", [0, 1])
def test_on_a_rail_optimized_fabric_mixtral_puts_nothing_on_the_spine_with_pxn(tmp_path,
                                                                                pxn_disable):
    """mixtral-8x7b-ep (its AllToAlls, the DP rings, every CTS and ACK) at --scale 4000 on a
    queued rail-optimized fabric (a leaf per rail, spines between them): with PXN every frame
    stays on its rail, no byte crosses a leaf-spine link; with NCCL_PXN_DISABLE 1 the AllToAll
    leaves from the sender's own NIC and crosses the spine (docs/p2p.md has the timings)."""
    import yaml

    from tests.schedule.engine.test_fabric_fast import _queued
    from tokenpcap.schedule.runner import Schedule

    path = _queued(PROFILES / "mixtral-8x7b-ep.yaml", tmp_path,
                   {"model": "queued", "preset": "hpcc-ns3",
                    "topology": {"kind": "rail-optimized"}})
    doc = yaml.safe_load(path.read_text())
    doc.setdefault("collectives", {})["NCCL_PXN_DISABLE"] = pxn_disable
    path.write_text(yaml.safe_dump(doc))
    sched = Schedule(build_plan(load_scenario(path), scale=4000), nics=())
    for _ in sched.run():
        pass
    links = sched.fabric_log()[0]["links"]                 # the links that carried frames
    spine = links["peer_switch"] >= 0                      # a switch at both ends of the cable
    assert links["tx_bytes"][~spine].sum() > 0
    assert (int(links["tx_bytes"][spine].sum()) == 0) is (pxn_disable == 0)
