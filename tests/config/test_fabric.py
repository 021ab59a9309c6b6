"""The ``fabric:`` mapping of a cluster profile: absent means ideal and changes nothing; every
preset loads with the numbers of its primary sources; a key given overrides the preset's; every
kind of bad input is one line naming the file and the dotted key; the topology sizes follow the
documented rules."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from tokenpcap.errors import ProfileError

from tests.config.test_profiles import PROFILES, cluster_dict, expect_profile_error, write
from tokenpcap.config.fabric import (PRESETS, auto_headroom_bytes, fabric_shape,
                                     port_dynamic_th)
from tokenpcap.config.profiles import load_cluster
from tokenpcap.config.types import ClusterProfile, FabricProfile, GpuProfile, PfcConfig, TopologyConfig


def _load(tmp_path: Path, fabric, **over):  # type: ignore[no-untyped-def]
    return load_cluster(write(tmp_path / "c.yaml", cluster_dict(fabric=fabric, **over)))


def test_absent_fabric_is_ideal_and_the_cluster_is_otherwise_unchanged(tmp_path: Path):
    c = load_cluster(PROFILES / "clusters" / "h100-rocev2-400g.yaml")
    assert c.fabric == FabricProfile() and c.fabric.model == "ideal" and not c.fabric.queued
    assert _load(tmp_path, {"model": "ideal"}).fabric == FabricProfile()
    # ClusterProfile built elsewhere (tests, tools) still works and gets the ideal fabric
    other = ClusterProfile(name="x", nodes=1, gpus_per_node=1, nics_per_node=1, link_gbps=400,
                           nvlink_gbps=900, gpu=GpuProfile("g", 1.0))
    assert other.fabric == FabricProfile()


def test_fabric_settings_without_a_queued_model_are_one_line(tmp_path: Path):
    """Switch, PFC or topology settings under an ideal fabric (``model`` left out, or ideal)
    would change nothing: the profile says so instead of writing an ideal trace."""
    for fab in ({"model": "ideal", "switch": {"buffer_bytes": 1}},
                {"topology": {"kind": "leaf-spine", "nodes_per_leaf": 4}}):
        with pytest.raises(ProfileError, match=r"fabric\.model: got 'ideal', expected 'queued' "
                                               r"when the fabric sets (switch|topology)"):
            _load(tmp_path, fab)


def test_a_buffer_below_one_frame_per_port_and_a_nic_link_off_the_nic_rate_are_refused(tmp_path):
    with pytest.raises(ProfileError, match=r"fabric\.switch\.buffer_bytes: got 1, expected at least"):
        _load(tmp_path, {"model": "queued", "switch": {"buffer_bytes": 1},
                         "pfc": {"reserve_bytes": 0, "headroom_bytes": 0}})
    with pytest.raises(ProfileError, match=r"fabric\.topology\.nic_link_gbps: got 1"):
        _load(tmp_path, {"model": "queued", "topology": {"nic_link_gbps": 1}})


def test_an_ideal_fabric_is_the_same_profile_as_none(tmp_path: Path):
    """``model: ideal`` (with or without other keys at their defaults) loads the very profile
    an absent ``fabric:`` does, so everything computed from the cluster (plans, captures,
    exports, provenance) is the same."""
    plain = load_cluster(write(tmp_path / "a.yaml", cluster_dict()))
    for fabric in ({"model": "ideal"}, {}, None, {"model": "ideal", "ecmp": {}, "pfc": {}}):
        assert load_cluster(write(tmp_path / "a.yaml", cluster_dict(fabric=fabric))) == plain


def test_ideal_fabric_adds_nothing_to_the_generate_provenance(tmp_path: Path):
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.generate.options import GenerateOptions, provenance_comment

    s = load_scenario(PROFILES / "scenarios" / "dante.yaml")
    assert s.cluster.fabric == FabricProfile()
    line = provenance_comment(s, GenerateOptions(out_dir=tmp_path))
    assert "fabric" not in line and "queued" not in line


def test_queued_without_preset_takes_the_th5_values_and_rail_optimized(tmp_path: Path):
    f = _load(tmp_path, {"model": "queued"}).fabric
    th5 = _load(tmp_path, {"model": "queued", "preset": "th5-400g"}).fabric
    assert f.queued and f.preset is None and f.topology.kind == "rail-optimized"
    assert (f.topology, f.switch, f.pfc, f.ecmp, f.timing) == (
        th5.topology, th5.switch, th5.pfc, th5.ecmp, th5.timing)


def test_hpcc_ns3_preset_is_what_the_hpcc_export_and_third_cc_do(tmp_path: Path):
    f = _load(tmp_path, {"model": "queued", "preset": "hpcc-ns3"}).fabric
    # export/hpcc.py writes BUFFER_SIZE 16*400//50 = 128 (MiB, third.cc multiplies by 1024*1024)
    assert f.switch.buffer_bytes == 128 * 1024 * 1024
    assert (f.switch.forwarding, f.switch.pipeline_ns, f.switch.control_priority) == (
        "store-and-forward", 0, 0)
    assert (f.pfc.reserve_bytes, f.pfc.resume_offset_bytes, f.pfc.headroom_bytes) == (
        4096, 3072, None)
    assert (f.pfc.dynamic_th, f.pfc.dynamic_th_rate_scaled, f.pfc.pause_until_resume) == (
        -3, True, True)
    assert (f.ecmp.mode, f.ecmp.hash, f.timing) == ("five-tuple", "hpcc-murmur3", "hpcc-ns3")
    # export/hpcc.py link_delay_ns: latency_ns // 2 on every link
    assert f.topology.propagation_ns == (500, 500, 500) and f.pfc.priorities == (3,)
    f100 = _load(tmp_path, {"model": "queued", "preset": "hpcc-ns3"}, link_gbps=100).fabric
    assert f100.switch.buffer_bytes == 32 * 1024 * 1024          # HPCC run.py's 32 MB at 100G


def test_th5_and_spectrum4_presets_carry_the_sonic_numbers(tmp_path: Path):
    t = _load(tmp_path, {"model": "queued", "preset": "th5-400g"}).fabric
    assert (t.switch.buffer_bytes, t.pfc.reserve_bytes, t.pfc.headroom_bytes,
            t.pfc.resume_offset_bytes, t.pfc.dynamic_th, t.pfc.pause_quanta) == (
        165_660_324, 18_796, 612_140, 3_556, 0, 65_535)
    assert (t.switch.forwarding, t.switch.control_priority, t.ecmp.hash, t.timing) == (
        "cut-through", 6, "crc32", "rocev2")
    s = _load(tmp_path, {"model": "queued", "preset": "spectrum4-400g"}).fabric
    assert s.switch.buffer_bytes == 133_643_264 and s.pfc.headroom_bytes is None
    assert s.pfc.reserve_bytes == t.pfc.reserve_bytes and s.switch.forwarding == "cut-through"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_loads_and_a_given_key_overrides_it(tmp_path: Path, preset: str):
    base = _load(tmp_path, {"model": "queued", "preset": preset}).fabric
    assert base.preset == preset and base.queued
    f = _load(tmp_path, {"model": "queued", "preset": preset, "timing": "rocev2",
                         "switch": {"pipeline_ns": 123}, "pfc": {"headroom_bytes": 100_000},
                         "ecmp": {"seed": 7, "mode": "spray"},
                         "topology": {"kind": "leaf-spine", "propagation_ns": [1, 2, 3]}}).fabric
    assert (f.switch.pipeline_ns, f.pfc.headroom_bytes, f.ecmp.seed, f.ecmp.mode) == (
        123, 100_000, 7, "spray")
    assert f.topology.kind == "leaf-spine" and f.topology.propagation_ns == (1, 2, 3)
    assert f.timing == "rocev2"
    # keys not given keep the preset's
    assert f.switch.buffer_bytes == base.switch.buffer_bytes
    assert f.pfc.reserve_bytes == base.pfc.reserve_bytes and f.ecmp.hash == base.ecmp.hash


def test_propagation_and_priorities_follow_the_network(tmp_path: Path):
    f = _load(tmp_path, {"model": "queued", "topology": {"propagation_ns": 40}},
              network={"latency_ns": 3000, "pcp": 4}).fabric
    assert f.topology.propagation_ns == (40, 40, 40) and f.pfc.priorities == (4,)
    g = _load(tmp_path, {"model": "queued"}, network={"latency_ns": 1}).fabric
    assert g.topology.propagation_ns == (1, 1, 1)          # export/hpcc.py: max(1, latency // 2)


_Q = {"model": "queued"}


@pytest.mark.parametrize("fabric,over,key,got,expected", [
    ({"modle": "queued"}, {}, "fabric.modle", "'modle'", "a known key"),
    ({"model": "fluid"}, {}, "fabric.model", "'fluid'", "one of 'ideal', 'queued'"),
    ({**_Q, "preset": "th6"}, {}, "fabric.preset", "'th6'", "one of 'hpcc-ns3'"),
    ({**_Q, "topology": {"kind": "torus"}}, {}, "fabric.topology.kind", "'torus'",
     "one of 'single-switch'"),
    ({**_Q, "topology": {"radix": 64}}, {}, "fabric.topology.radix", "'radix'", "a known key"),
    ({**_Q, "ecmp": {"hash": "xxhash"}}, {}, "fabric.ecmp.hash", "'xxhash'",
     "one of 'crc32', 'hpcc-murmur3'"),
    ({**_Q, "ecmp": {"mode": "flowlet"}}, {}, "fabric.ecmp.mode", "'flowlet'", "one of"),
    ({**_Q, "topology": {"nodes_per_leaf": 3}}, {}, "fabric.topology.nodes_per_leaf", "3",
     "a divisor of the cluster's 4 nodes"),
    ({**_Q, "topology": {"kind": "clos3", "pods": 3}}, {}, "fabric.topology.pods", "3",
     "a divisor of the cluster's 4 nodes"),
    ({**_Q, "topology": {"kind": "clos3", "pods": 2, "nodes_per_leaf": 4}}, {},
     "fabric.topology.nodes_per_leaf", "4", "a divisor of the pod's 2 nodes"),
    ({**_Q, "topology": {"spines": 0}}, {}, "fabric.topology.spines", "0",
     "an integer in [1, 1024]"),
    ({**_Q, "topology": {"kind": "leaf-spine"}}, {"nodes": 256}, "fabric.topology.nodes_per_leaf",
     "None", "at most 1024 ports per switch (a leaf would have 2056"),
    ({**_Q, "topology": {"oversubscription": 0.5}}, {}, "fabric.topology.oversubscription",
     "0.5", ">= 1"),
    ({**_Q, "topology": {"propagation_ns": [1, 2]}}, {}, "fabric.topology.propagation_ns",
     "[1, 2]", "a list of 3"),
    ({**_Q, "pfc": {"headroom_bytes": 200_000_000}}, {}, "fabric.pfc.headroom_bytes",
     "200000000", "at most switch.buffer_bytes 165,660,324"),
    ({**_Q, "pfc": {"headroom_bytes": 15_000_000}}, {}, "fabric.pfc.headroom_bytes", "15000000",
     "reserve + headroom of the 12 ports x 1 lossless priorities of a leaf within "
     "switch.buffer_bytes"),
    ({**_Q, "pfc": {"headroom_bytes": None, "reserve_bytes": 20_000_000}}, {},
     "fabric.pfc.reserve_bytes", "20000000", "reserve + headroom of the 12 ports"),
    ({**_Q, "pfc": {"priorities": [3, 8]}}, {}, "fabric.pfc.priorities", "[3, 8]",
     "distinct priorities in [0, 7]"),
    ({**_Q, "pfc": {"priorities": [3, 3]}}, {}, "fabric.pfc.priorities", "[3, 3]", "distinct"),
    ({**_Q, "switch": {"control_priority": 8}}, {}, "fabric.switch.control_priority", "8",
     "an integer in [0, 7]"),
    ({**_Q, "switch": {"control_priority": 3}}, {}, "fabric.switch.control_priority", "3",
     "outside the lossless pfc.priorities [3]"),
    ({**_Q, "pfc": {"pause_quanta": 0}}, {}, "fabric.pfc.pause_quanta", "0",
     "an integer in [1, 65,535]"),
    ({**_Q, "pfc": {"pause_quanta": 65_536}}, {}, "fabric.pfc.pause_quanta", "65536",
     "an integer in [1, 65,535]"),
    ({**_Q, "qlen_sample_ns": 0}, {}, "fabric.qlen_sample_ns", "0", "an integer in [1,"),
    ({**_Q, "switch": {"forwarding": "wormhole"}}, {}, "fabric.switch.forwarding",
     "'wormhole'", "one of 'store-and-forward', 'cut-through'"),
    ({**_Q, "pfc": {"enabled": "yes"}}, {}, "fabric.pfc.enabled", "'yes'", "true or false"),
    ("queued", {}, "fabric", "'queued'", "a mapping"),
    (_Q, {"transport": "infiniband"}, "fabric.model", "'queued'",
     "'ideal' with transport 'infiniband' (a queued fabric needs transport rocev2"),
])
def test_fabric_errors(tmp_path: Path, fabric, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "c.yaml", cluster_dict(fabric=fabric, **over))
    expect_profile_error(lambda: load_cluster(f), f, key, got, expected)


def test_a_scenario_inline_cluster_names_its_fabric_keys(tmp_path: Path):
    from tests.config.test_profiles import scenario_dict
    from tokenpcap.config.profiles import load_scenario

    d = scenario_dict(tmp_path, cluster=cluster_dict(fabric={"model": "queued",
                                                             "pfc": {"pause_quanta": 0}}))
    f = write(tmp_path / "s.yaml", d)
    expect_profile_error(lambda: load_scenario(f), f, "cluster.fabric.pfc.pause_quanta", "0",
                         "an integer in [1, 65,535]")


def _shape(nodes: int, nics: int, **t):  # type: ignore[no-untyped-def]
    return fabric_shape(nodes, nics, 400.0, TopologyConfig(**t))


def test_default_rail_optimized_shape_is_the_hpcc_exports():
    """export/hpcc.py _topology: nics_per_node leaves and spines, uplinks ceil(nodes/nics) x NIC."""
    for nodes, nics in ((4, 8), (1, 1), (16, 8), (9, 4), (64, 8)):
        s = _shape(nodes, nics)
        assert (s.leaves, s.spines, s.leaf_nics, s.cores) == (nics, nics, nodes, 0)
        assert s.uplink_gbps == 400.0 * max(1, -(-nodes // nics))


@pytest.mark.parametrize("ratio", [1.0, 2.0, 3.0, 7.0, 2.5])
def test_uplinks_keep_the_oversubscription_at_most_the_ratio(ratio: float):
    for kind, npl in (("rail-optimized", 32), ("leaf-spine", 4)):
        s = _shape(64, 8, kind=kind, nodes_per_leaf=npl, oversubscription=ratio)
        down = s.leaf_nics * s.nic_gbps
        up = s.spines * s.uplink_gbps
        assert down / up <= ratio + 1e-12
        assert s.uplink_gbps == s.nic_gbps * math.ceil(s.leaf_nics / (ratio * s.spines))
    c = _shape(64, 8, kind="clos3", pods=16, core_oversubscription=7.0)
    # pod: 8 leaves of 16 NICs; uplink 2 x 400 (16 / 8); spine down 8 x 800, 8 cores
    assert (c.leaves, c.leaf_nics, c.uplink_gbps, c.cores, c.pods) == (8, 16, 800.0, 8, 4)
    assert (c.leaves * c.uplink_gbps) / (c.cores * c.core_gbps) <= 7.0
    e = _shape(64, 8, kind="clos3", pods=16, core_oversubscription=2.0)
    assert (e.leaves * e.uplink_gbps) / (e.cores * e.core_gbps) == 2.0   # divides: exact


def test_auto_headroom_and_rate_scaled_threshold_follow_third_cc():
    # third.cc: rate * delay / 8 / 1e9 * 3, integer arithmetic (400G, 500 ns: 25,000 B x 3)
    assert auto_headroom_bytes(400.0, 500) == 75_000
    assert auto_headroom_bytes(100.0, 1) == 36          # 100e9 * 1 / 8 / 1e9 = 12 -> 36
    p = PfcConfig(dynamic_th=-3, dynamic_th_rate_scaled=True)
    # pfc_a_shift 3 at the NIC rate; a 1600G port: 1600 > 400 -> 2 (800), 800 > 400 -> 1 (400)
    assert [port_dynamic_th(p, g, 400.0) for g in (400.0, 800.0, 1600.0, 3200.0, 6400.0)] == [
        -3, -2, -1, 0, 0]
    assert port_dynamic_th(PfcConfig(dynamic_th=-3), 1600.0, 400.0) == -3


def test_a_topology_given_by_its_kind_alone_is_that_kind_with_its_defaults(tmp_path: Path):
    """``topology: single-switch`` (the shorthand the fabric's own examples use) is
    ``topology: {kind: single-switch}``; a name that is no kind, or a list, is one line."""
    short = _load(tmp_path, {"model": "queued", "topology": "single-switch", "preset": "th5-400g"})
    full = _load(tmp_path, {"model": "queued", "topology": {"kind": "single-switch"},
                            "preset": "th5-400g"})
    assert short.fabric == full.fabric and short.fabric.topology.kind == "single-switch"
    with pytest.raises(ProfileError, match=r"fabric\.topology\.kind: got 'fat-tree', expected one "
                                           r"of 'single-switch'"):
        _load(tmp_path, {"model": "queued", "topology": "fat-tree"})
    with pytest.raises(ProfileError, match=r"fabric\.topology: got \[1\], expected a mapping "
                                           r"\(key: value\) or a topology kind: single-switch"):
        _load(tmp_path, {"model": "queued", "topology": [1]})
