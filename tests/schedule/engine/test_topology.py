"""The fabric topology as arrays: switch, port and link counts per kind follow from the
profile's sizes; every NIC reaches every other along the routes with any ECMP choice, in 2, 4
or 6 links (shortest, valley-free); the default rail-optimized topology is exactly the file
``export --to hpcc`` writes; the uplinks keep the oversubscription ratio."""
from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_cluster
from tokenpcap.config.types import (ClusterProfile, EcmpConfig, FabricProfile, GpuProfile,
                                    NetworkProfile, TopologyConfig)
from tokenpcap.errors import ProfileError
from tokenpcap.export.hpcc import _rail_leaf_spine as export_topology
from tokenpcap.schedule.engine.topology import (build_topology, hpcc_topology_lines,
                                                splitmix32)
from tests.conftest import ROOT


def _cluster(nodes: int, nics: int, link: float = 400.0, latency_ns: int = 1000,
             ecmp: EcmpConfig | None = None, **topo) -> ClusterProfile:  # type: ignore[no-untyped-def]
    t = TopologyConfig(propagation_ns=(max(1, latency_ns // 2),) * 3, **topo)
    return ClusterProfile(name="t", nodes=nodes, gpus_per_node=nics, nics_per_node=nics,
                          link_gbps=link, nvlink_gbps=900.0, gpu=GpuProfile("g", 1.0),
                          network=NetworkProfile(latency_ns=latency_ns),
                          fabric=FabricProfile(model="queued", topology=t,
                                               ecmp=ecmp or EcmpConfig()))


def _paths(t, src_leaf: int, dst_leaf: int, limit: int = 8):  # type: ignore[no-untyped-def]
    """Every switch path (list of switches) the routes allow from src_leaf to dst_leaf."""
    out = []
    stack = [[src_leaf]]
    while stack:
        path = stack.pop()
        s = path[-1]
        if s == dst_leaf:
            out.append(path)
            continue
        cands = t.candidates(s, dst_leaf)
        assert cands.size, f"no route at {t.switch_names[s]} towards {t.switch_names[dst_leaf]}"
        assert len(path) < limit, path
        for p in cands.tolist():
            assert t.port_switch[p] == s and t.port_peer_port[p] >= 0
            stack.append(path + [int(t.port_switch[t.port_peer_port[p]])])
    return out


def _check_reachability(c: ClusterProfile) -> dict[tuple[int, int], set[int]]:
    """Links per (src NIC, dst NIC) over every ECMP choice, checked against the structure."""
    t = build_topology(c)
    n = c.nodes * c.nics_per_node
    leaf = t.leaf_of(np.arange(n))
    assert (t.switch_tier[leaf] == 1).all()
    assert (t.port_peer_nic[t.nic_port] == np.arange(n)).all()
    assert (t.route_ptr[np.arange(t.switches) * t.switches + np.arange(t.switches)]
            == t.route_ptr[np.arange(t.switches) * t.switches + np.arange(t.switches) + 1]
            )[t.switch_tier == 1].all(), "a leaf routes nothing towards itself"
    hops: dict[tuple[int, int], set[int]] = {}
    leaves = sorted(set(leaf.tolist()))
    by_pair = {(a, b): {len(p) + 1 for p in _paths(t, a, b)} for a in leaves for b in leaves}
    for a, b in itertools.product(range(n), repeat=2):
        hops[(a, b)] = by_pair[(int(leaf[a]), int(leaf[b]))]        # NIC links: +1 each end
    return hops


def _pod(c: ClusterProfile, nic: int) -> int:
    pods = c.fabric.topology.pods or c.nodes
    return (nic // c.nics_per_node) // pods


@pytest.mark.parametrize("kind,nodes,nics,topo,switches,ports", [
    # single switch: every NIC on it
    ("single-switch", 4, 2, {}, 1, 8),
    # rail-optimized default: nics leaves + nics spines; leaf = nodes NICs + nics uplinks
    ("rail-optimized", 4, 8, {}, 16, 8 * (4 + 8) + 8 * 8),
    # two scalable units of 2 nodes: 2 x 4 leaves, 4 spines
    ("rail-optimized", 4, 4, {"nodes_per_leaf": 2}, 12, 8 * (2 + 4) + 4 * 8),
    # leaf-spine, 2 nodes (8 NICs) per leaf, 3 spines
    ("leaf-spine", 6, 4, {"nodes_per_leaf": 2, "spines": 3}, 6, 3 * (8 + 3) + 3 * 3),
    # clos3: 2 pods of 2 nodes, 2 rails: 2 x 2 leaves, 2 x 2 spines, 2 cores
    ("clos3", 4, 2, {"pods": 2}, 10, 4 * (2 + 2) + 4 * (2 + 2) + 2 * 4),
])
def test_counts_per_kind(kind, nodes, nics, topo, switches, ports):  # type: ignore[no-untyped-def]
    c = _cluster(nodes, nics, kind=kind, **topo)
    t = build_topology(c)
    assert t.switches == switches and t.port_switch.size == ports
    links = t.link_ends.shape[0]
    assert 2 * links - nodes * nics == ports            # every link has two ends, NIC ends aside
    assert (np.diff(t.port_switch) >= 0).all(), "ports of a switch are contiguous"
    first = np.searchsorted(t.port_switch, t.port_switch)
    assert (t.port_number == np.arange(ports) - first).all()
    # links are symmetric: my peer's peer is me, with the same rate and delay
    sw = t.port_peer_port >= 0
    assert (t.port_peer_port[t.port_peer_port[sw]] == np.flatnonzero(sw)).all()
    assert (t.port_gbps[t.port_peer_port[sw]] == t.port_gbps[sw]).all()
    assert ((t.port_peer_nic >= 0) ^ sw).all()
    tiers = {"single-switch": {1}, "rail-optimized": {1, 2}, "leaf-spine": {1, 2},
             "clos3": {1, 2, 3}}[kind]
    assert set(t.switch_tier.tolist()) == tiers
    assert t.switch_seed.dtype == np.uint32 and t.route_ptr.size == switches ** 2 + 1


@pytest.mark.parametrize("kind,nodes,nics,topo", [
    ("single-switch", 3, 2, {}),
    ("rail-optimized", 4, 4, {}),
    ("rail-optimized", 4, 2, {"nodes_per_leaf": 2, "spines": 3}),
    ("leaf-spine", 4, 2, {"nodes_per_leaf": 2}),
    ("clos3", 8, 2, {"pods": 4, "nodes_per_leaf": 2, "spines": 2}),
])
def test_every_nic_reaches_every_nic_in_2_4_or_6_links(kind, nodes, nics, topo):  # type: ignore[no-untyped-def]
    c = _cluster(nodes, nics, kind=kind, **topo)
    t = build_topology(c)
    leaf = t.leaf_of(np.arange(nodes * nics))
    for (a, b), hops in _check_reachability(c).items():
        if kind == "single-switch" or leaf[a] == leaf[b]:
            want = 2
        elif kind != "clos3" or _pod(c, a) == _pod(c, b):
            want = 4
        else:
            want = 6
        assert hops == {want}, (a, b, hops)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["rail-optimized", "leaf-spine", "clos3"]),
       pods=st.integers(1, 3), units=st.integers(1, 3), npl=st.integers(1, 2),
       nics=st.integers(1, 3), spines=st.none() | st.integers(1, 3))
def test_routes_are_complete_and_valley_free_for_any_sizes(kind, pods, units, npl, nics, spines):  # type: ignore[no-untyped-def]
    nodes = pods * units * npl
    topo = {"nodes_per_leaf": npl, "spines": spines}
    if kind == "clos3":
        topo["pods"] = units * npl
    c = _cluster(nodes, nics, kind=kind, **topo)
    t = build_topology(c)
    for (_, _), hops in _check_reachability(c).items():
        assert len(hops) == 1 and hops <= {2, 4, 6}
    # valley-free: along a path the tier goes up, then down, never up again
    leaves = np.flatnonzero(t.switch_tier == 1)
    for a, b in itertools.product(leaves.tolist(), repeat=2):
        for path in _paths(t, a, b):
            tiers = t.switch_tier[path]
            top = int(np.argmax(tiers))
            assert (np.diff(tiers[:top + 1]) > 0).all() and (np.diff(tiers[top:]) < 0).all()


@pytest.mark.parametrize("name", ["h100-rocev2-400g", "h100-rocev2-400g-16n", "h100-rocev2-8x1",
                                  "a100-hdr-ib"])
def test_default_rail_optimized_is_the_hpcc_export_topology(name: str):
    c = load_cluster(ROOT / "profiles" / "clusters" / f"{name}.yaml")
    assert hpcc_topology_lines(build_topology(c)) == export_topology(c)[0]


@pytest.mark.parametrize("nodes,nics,link,latency", [(3, 2, 100.0, 1), (9, 4, 25.0, 2001),
                                                     (1, 1, 400.0, 1000), (5, 8, 12.5, 700)])
def test_hpcc_lines_equal_the_export_for_odd_sizes(nodes, nics, link, latency):  # type: ignore[no-untyped-def]
    c = _cluster(nodes, nics, link=link, latency_ns=latency)
    assert hpcc_topology_lines(build_topology(c)) == export_topology(c)[0]


def test_hpcc_seeds_are_the_ns3_node_ids_and_others_spread():
    c = _cluster(4, 8, ecmp=EcmpConfig(hash="hpcc-murmur3"))
    t = build_topology(c)
    assert t.switch_seed.tolist() == list(range(32, 48))    # hosts 0..31, then the switches
    a = build_topology(_cluster(4, 8, ecmp=EcmpConfig(seed=1))).switch_seed
    b = build_topology(_cluster(4, 8, ecmp=EcmpConfig(seed=2))).switch_seed
    assert len(set(a.tolist())) == 16 and (a != b).all()
    assert (a == splitmix32((np.uint64(1) << np.uint64(32)) | np.arange(16, dtype=np.uint64))).all()


@pytest.mark.parametrize("kind,ratio,nodes,nics,topo", [
    ("rail-optimized", 1.0, 8, 4, {}),
    ("rail-optimized", 2.0, 8, 4, {"nodes_per_leaf": 8, "spines": 2}),
    ("leaf-spine", 3.0, 6, 4, {"nodes_per_leaf": 3, "spines": 2}),
    ("clos3", 1.0, 16, 2, {"pods": 8, "spines": 2}),
    # the NIC-rate multiple cannot go below one NIC rate: at most the ratio
    ("rail-optimized", 2.0, 8, 4, {"nodes_per_leaf": 4}),
])
def test_leaf_uplinks_hold_the_oversubscription(kind, ratio, nodes, nics, topo):  # type: ignore[no-untyped-def]
    c = _cluster(nodes, nics, kind=kind, oversubscription=ratio, core_oversubscription=2.0,
                 **topo)
    exact = not (kind == "rail-optimized" and topo.get("nodes_per_leaf") == 4)
    t = build_topology(c)
    for s in range(t.switches):
        mine = t.port_switch == s
        peer_sw = np.where(t.port_peer_port >= 0, t.port_switch[np.maximum(t.port_peer_port, 0)],
                           -1)
        down = mine & ((t.port_peer_nic >= 0) | ((peer_sw >= 0)
                                                  & (t.switch_tier[peer_sw] < t.switch_tier[s])))
        up = mine & (peer_sw >= 0) & (t.switch_tier[np.maximum(peer_sw, 0)] > t.switch_tier[s])
        if not up.any():
            continue
        r = t.port_gbps[down].sum() / t.port_gbps[up].sum()
        want = ratio if t.switch_tier[s] == 1 else 2.0
        assert r <= want + 1e-12, (t.switch_names[s], r)
        if exact:
            assert r == pytest.approx(want), (t.switch_names[s], r)


def test_propagation_per_tier_and_nic_rate_override():
    c = _cluster(4, 2, kind="clos3", pods=2, nic_link_gbps=200.0)
    c = replace(c, fabric=replace(c.fabric, topology=replace(c.fabric.topology,
                                                             propagation_ns=(5, 50, 500))))
    t = build_topology(c)
    assert (t.port_prop_ns[t.nic_port] == 5).all() and (t.port_gbps[t.nic_port] == 200.0).all()
    tier_of_link = {frozenset((1, 2)): 50, frozenset((2, 3)): 500}
    sw = np.flatnonzero(t.port_peer_port >= 0)
    for p in sw.tolist():
        pair = frozenset((int(t.switch_tier[t.port_switch[p]]),
                          int(t.switch_tier[t.port_switch[t.port_peer_port[p]]])))
        assert t.port_prop_ns[p] == tier_of_link[pair]


def test_a_cluster_that_cannot_be_built_names_the_key():
    c = _cluster(4, 2, kind="leaf-spine", nodes_per_leaf=3)
    with pytest.raises(ProfileError, match=r"fabric\.topology\.nodes_per_leaf: got 3"):
        build_topology(c)
