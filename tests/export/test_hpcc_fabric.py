"""export --to hpcc of a queued fabric: the simulator's topology and buffer from the fabric
profile, and the list of what ns-3 cannot model.

Independent sources: the switch and link counts of each topology kind, counted by hand from the
cabling rules (docs: one leaf per rail and unit, every leaf to every spine of its pod, every pod
spine to every core); HPCC ns-3's fixed MMU constants as its source writes them
(``switch-mmu.cc`` ``SwitchMmu::SwitchMmu``: ``reserve = 4 * 1024``, ``resume_offset = 3 *
1024``) and ``third.cc``'s ``ConfigBufferSize(buffer_size * 1024 * 1024)``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_cluster
from tokenpcap.export.hpcc import write_hpcc
from tokenpcap.export.hpcc_fabric import buffer_mib, ns3_gaps
from tokenpcap.records import MESSAGE_DTYPE

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "hpcc"
HPCC_CLUSTER = ROOT / "profiles" / "clusters" / "h100-rocev2-64x1-hpcc-ns3.yaml"


def cluster_file(tmp_path: Path, fabric: dict, nodes: int = 16, nics: int = 2) -> Path:
    doc = {"name": "t", "nodes": nodes, "gpus_per_node": nics, "nics_per_node": nics,
           "link_gbps": 400, "nvlink_gbps": 3600, "gpu": {"name": "H100-SXM", "peak_tflops": 989},
           "transport": "rocev2", "pmtu_bytes": 4096, "fabric": fabric}
    p = tmp_path / f"c{len(list(tmp_path.iterdir()))}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def messages(pairs) -> np.ndarray:
    m = np.zeros(len(pairs), MESSAGE_DTYPE)
    m["src_nic"], m["dst_nic"] = zip(*pairs)
    m["size_bytes"] = 4096
    return m


def read_config(path: Path) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in path.read_text().splitlines()}


def test_the_hpcc_ns3_cluster_writes_the_fixtures_topology_and_config(tmp_path):
    """No engine: the 64x1 hpcc-ns3 cluster's files are the incast fixture's topology byte for
    byte and its config but for the file names and the stop time."""
    c = load_cluster(HPCC_CLUSTER)
    paths = write_hpcc(messages([(s, 0) for s in range(1, 64)]), c, tmp_path / "i.txt", cc="none")
    assert paths[1].read_text() == (CASES / "incast63x16m-topology.txt").read_text()
    got, want = read_config(paths[2]), read_config(CASES / "incast63x16m-pfc-config.txt")
    assert list(got) == list(want)
    assert {k for k in got if got[k] != want[k]} <= {
        "TOPOLOGY_FILE", "FLOW_FILE", "TRACE_FILE", "TRACE_OUTPUT_FILE", "FCT_OUTPUT_FILE",
        "PFC_OUTPUT_FILE", "QLEN_MON_FILE", "SIMULATOR_STOP_TIME"}
    assert ns3_gaps(c.fabric) == []


@pytest.mark.parametrize("topology, switches, links, speeds", [
    # 32 NICs; rail-optimized, 8 nodes per leaf: 2 units x 2 rails = 4 leaves, 2 spines,
    # 32 + 4 x 2 links; uplinks ceil(8 x 400 / (2 x 400)) = 4 x 400 G
    ({"kind": "rail-optimized", "nodes_per_leaf": 8}, 6, 40, {400, 1600}),
    # leaf-spine, 8 nodes (16 NICs) per leaf: 2 leaves, 2 spines; uplinks 16 x 400 / 2 = 3.2 T
    ({"kind": "leaf-spine", "nodes_per_leaf": 8}, 4, 36, {400, 3200}),
    # single switch: 32 links at the NIC rate
    ({"kind": "single-switch"}, 1, 32, {400}),
    # clos3, pods of 8 nodes, 4 nodes per leaf: per pod 2 units x 2 rails = 4 leaves and
    # 2 spines; 2 cores; 32 + 8 x 2 + 4 x 2 links
    ({"kind": "clos3", "pods": 8, "nodes_per_leaf": 4}, 14, 56, None),
])
def test_every_topology_kind_exports_with_its_own_links(tmp_path, topology, switches, links,
                                                        speeds):
    fabric = {"model": "queued", "preset": "hpcc-ns3", "topology": topology}
    c = load_cluster(cluster_file(tmp_path, fabric))
    paths = write_hpcc(messages([(1, 0), (5, 30)]), c, tmp_path / "x.txt", cc="dcqcn")
    lines = paths[1].read_text().splitlines()
    assert lines[0].split() == [str(32 + switches), str(switches), str(links)]
    assert lines[1].split() == [str(32 + s) for s in range(switches)]
    body = [ln.split() for ln in lines[2:]]
    assert len(body) == links
    hosts = [int(a) for a, b, *_ in body if int(a) < 32] + [int(b) for a, b, *_ in body
                                                            if int(b) < 32]
    assert sorted(hosts) == list(range(32))                 # every host on exactly one link
    assert all(r[3] == "500ns" and r[4] == "0" for r in body)
    got = {int(r[2][:-4]) for r in body}                    # "1600Gbps" -> 1600
    if speeds is not None:
        assert got == speeds
    cfg = read_config(paths[2])
    bps = sorted(g * 10**9 for g in got)
    assert cfg["KMAX_MAP"][0] == str(len(bps)) and [int(x) for x in cfg["KMAX_MAP"][1::2]] == bps
    assert cfg["BUFFER_SIZE"] == ["128"]                     # 16 x 400 / 50 MiB (the preset)


def test_a_profile_asking_what_ns3_cannot_model_is_listed_and_warned(tmp_path):
    """th5-400g: cut-through with a pipeline, SONiC's reserve/headroom/resume offset, alpha 1,
    pause timers, control priority 6, CRC32 ECMP, RoCEv2 frame timing: each one line; the
    buffer 165,660,324 B is 157.99 MiB: BUFFER_SIZE 157."""
    path = cluster_file(tmp_path, {"model": "queued", "preset": "th5-400g",
                                   "topology": {"kind": "single-switch"}}, nodes=8, nics=1)
    c = load_cluster(path)
    gaps = ns3_gaps(c.fabric)
    keys = [g.split(":")[0] for g in gaps]
    assert keys == ["fabric.switch.buffer_bytes", "fabric.switch.forwarding",
                    "fabric.switch.pipeline_ns", "fabric.switch.control_priority",
                    "fabric.pfc.reserve_bytes", "fabric.pfc.headroom_bytes",
                    "fabric.pfc.resume_offset_bytes", "fabric.pfc.dynamic_th",
                    "fabric.pfc.pause_until_resume", "fabric.ecmp", "fabric.timing"]
    assert gaps[0] == ("fabric.switch.buffer_bytes: got 165,660,324, HPCC ns-3 takes whole MiB "
                       "(BUFFER_SIZE 157: 164,626,432 B)")
    assert buffer_mib(c.fabric) == 165_660_324 // (1024 * 1024) == 157
    m = messages([(1, 0)])
    assert read_config(write_hpcc(m, c, tmp_path / "t.txt")[2])["BUFFER_SIZE"] == ["157"]
    # an ideal fabric has nothing to say
    ideal = load_cluster(cluster_file(tmp_path, {"model": "ideal"}, nodes=8, nics=1))
    assert ns3_gaps(ideal.fabric) == []
    # the CLI prints them on stderr, after the files
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({
        "name": "s", "cluster": str(path), "workload": {"kind": "incast", "senders": 2,
                                                        "bytes": 65536},
        "generation": {"clear_to_send": False}}))
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "-o",
                                  str(tmp_path / "o" / "s.txt")])
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert len(warn) == len(gaps) and warn[1].endswith(
        "fabric.switch.forwarding: got cut-through, HPCC ns-3 stores and forwards every packet")
    assert r.stdout.splitlines()[0].endswith("s.txt")


def test_the_last_acks_way_back_is_propagation_and_serialization_per_hop(tmp_path):
    """HPCC ns-3 (store-and-forward, 60-B ACK truncated to whole ns: 1 ns at 400 Gb/s, 0 ns at
    1.6 Tb/s and more): one switch 2 x (500 + 1) ns (the fixtures' span: tests/cases/hpcc/
    README.md); across rails, via a spine, 2 x 501 + 2 x 500; across clos3 pods, via a core,
    2 more links. Cut-through with a pipeline (th5-400g): the ACK is serialized once (62 B + 24,
    rounded up: 2 ns) and each switch adds its 700 ns."""
    from tokenpcap.export.hpcc_fabric import ack_return_ns
    from tokenpcap.schedule.engine.topology import build_topology

    def back(fabric, pairs, nodes=16, nics=2):
        c = load_cluster(cluster_file(tmp_path, fabric, nodes, nics))
        src, dst = np.array(pairs).T
        return ack_return_ns(c, build_topology(c), src, dst, 62).tolist()

    assert back({"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"}},
                [(5, 0), (0, 31)]) == [1002, 1002]
    rail = {"model": "queued", "preset": "hpcc-ns3",
            "topology": {"kind": "rail-optimized", "nodes_per_leaf": 8}}
    # NIC 0 and 2: rail 0, one leaf; NIC 0 and 1: two rails; NIC 0 and 17: another leaf too
    assert back(rail, [(2, 0), (1, 0), (17, 0)]) == [1002, 2002, 2002]
    clos = {"model": "queued", "preset": "hpcc-ns3",
            "topology": {"kind": "clos3", "pods": 8, "nodes_per_leaf": 4}}
    assert back(clos, [(16, 0), (8, 0)]) == [1002 + 4 * 500 + 4 * 0, 2002]
    assert back({"model": "queued", "preset": "th5-400g", "topology": {"kind": "single-switch"}},
                [(1, 0)], nodes=8, nics=1) == [2 + 2 * 500 + 700]


def test_a_pfc_frame_reaches_the_device_the_topology_files_order_gives(tmp_path):
    """third.cc installs one device per topology line on both ends, in file order, after the
    loopback: the k-th line touching a node is its if_index k. Read from the written file
    alone, the frame our switch s port p sends lands on the device at the line's other end."""
    from tokenpcap.export.hpcc_pfc import ns3_device
    from tokenpcap.schedule.engine.topology import build_topology, hpcc_topology_lines

    c = load_cluster(cluster_file(tmp_path, {"model": "queued", "preset": "hpcc-ns3",
                                             "topology": {"kind": "clos3", "pods": 8,
                                                          "nodes_per_leaf": 4}}))
    topo = build_topology(c)
    lines = hpcc_topology_lines(topo)
    n_nic = 32
    seen: dict[int, int] = {}
    checked = 0
    for line in lines[2:]:
        a, b = (int(x) for x in line.split()[:2])
        seen[a], seen[b] = seen.get(a, 0) + 1, seen.get(b, 0) + 1
        for me, peer in ((a, b), (b, a)):
            if me >= n_nic:
                node, dev, _ = ns3_device(topo, me - n_nic, seen[me] - 1)
                assert (node, dev) == (peer, seen[peer])
                checked += 1
    assert checked == 32 + 2 * (16 + 8)
