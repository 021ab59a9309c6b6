"""Two planes (tokenpcap.schedule.engine.topology_planes, and the engine's plane ports).

Right values come from elsewhere than our code:

* the structure Alibaba HPN describes (SIGCOMM 2024): every NIC has one port in each plane, on
  a ToR of that plane (dual-ToR), no switch links two planes, each port at half the NIC's rate
  (2 x 200G for a 400G NIC); every NIC reaches every other within each plane;
* Linux mlx5's tx-port rule for RoCE LAG (``drivers/infiniband/hw/mlx5/qp.c``
  ``get_tx_affinity_rr``: ``atomic_add_return(1, &counter) % lag_ports + 1`` per device), run
  here as the counter it is, QP end by QP end;
* conservation: per plane, the bytes its ToRs hand to NICs are exactly the frames the NICs sent
  on QPs of that plane, and every switch sends what it received;
* physics: an incast onto one receiver with 2 planes x 200G is bounded by one 400G receiver
  link: frames x (frame + FCS + preamble + IFG) x 8 / 400 ns, plus one path's latency.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_cluster, load_scenario
from tokenpcap.config.types import TopologyConfig
from tokenpcap.errors import ProfileError
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import events as K
from tokenpcap.schedule.engine.port import PKT_ACK
from tokenpcap.schedule.engine.topology import build_topology, hpcc_topology_lines
from tokenpcap.schedule.engine.topology_planes import qp_planes, qp_planes_hash
from tokenpcap.schedule.runner import Schedule
from tests.schedule.engine.test_topology import _cluster as _topo_cluster
from tests.schedule.engine.test_topology import _paths

GPU = {"name": "H100-SXM", "peak_tflops": 989}
KINDS = st.sampled_from([("single-switch", {}), ("rail-optimized", {}),
                         ("rail-optimized", {"nodes_per_leaf": 1}),
                         ("leaf-spine", {"nodes_per_leaf": 1}),
                         ("clos3", {"pods": 1, "nodes_per_leaf": 1})])


@settings(max_examples=40, deadline=None)
@given(kind=KINDS, nodes=st.sampled_from([2, 4]), nics=st.sampled_from([1, 2, 4]),
       link=st.sampled_from([400.0, 200.0, 100.0]))
def test_two_planes_are_disjoint_copies_with_a_port_of_every_nic_at_half_rate(kind, nodes, nics,
                                                                             link):
    name, extra = kind
    c = _topo_cluster(nodes, nics, link=link, kind=name, planes=2, **extra)
    one = build_topology(_topo_cluster(nodes, nics, link=link / 2, kind=name, **extra))
    t = build_topology(c)
    n, s1 = nodes * nics, one.switches
    assert t.planes == 2 and t.switches == 2 * s1
    assert (t.switch_plane == np.repeat([0, 1], s1)).all()
    # no link between planes
    sw = np.flatnonzero(t.port_peer_port >= 0)
    peer_sw = t.port_switch[t.port_peer_port[sw]]
    assert (t.switch_plane[t.port_switch[sw]] == t.switch_plane[peer_sw]).all()
    # every NIC: one port per plane, on a ToR of that plane, two different ToRs, half the rate
    ports = t.plane_nic_port
    assert ports.shape == (2, n)
    for k in range(2):
        assert (t.port_peer_nic[ports[k]] == np.arange(n)).all()
        assert (t.switch_plane[t.port_switch[ports[k]]] == k).all()
        assert (t.switch_tier[t.port_switch[ports[k]]] == 1).all()
    assert (t.port_switch[ports[0]] != t.port_switch[ports[1]]).all()
    assert (t.port_gbps[ports] == link / 2).all()
    assert int((t.port_peer_nic >= 0).sum()) == 2 * n
    # each plane is the one-plane topology of a half-rate NIC, port for port
    for k in range(2):
        own = t.switch_plane[t.port_switch] == k
        assert (t.port_gbps[own] == one.port_gbps).all()
        assert (t.port_prop_ns[own] == one.port_prop_ns).all()
        assert (t.port_peer_nic[own] == one.port_peer_nic).all()
    assert [x.split("-", 1)[1] for x in t.switch_names[:s1]] == list(one.switch_names)
    # every NIC reaches every other within each plane, on every ECMP choice, never leaving it
    for k in range(2):
        leaf = t.port_switch[ports[k]]
        for a in range(n):
            for b in range(n):
                for path in _paths(t, int(leaf[a]), int(leaf[b])):
                    assert (t.switch_plane[path] == k).all()


def test_one_plane_is_todays_topology():
    a = build_topology(_topo_cluster(4, 2))
    b = build_topology(_topo_cluster(4, 2, planes=1))
    assert a.switch_names == b.switch_names and a.planes == 1
    assert (a.plane_nic_port[0] == a.nic_port).all()
    assert hpcc_topology_lines(a) == hpcc_topology_lines(b)


def test_the_ns3_file_gives_every_host_one_link_per_plane_at_the_port_rate():
    t = build_topology(_topo_cluster(2, 2, kind="single-switch", planes=2))
    lines = hpcc_topology_lines(t)
    assert lines[0] == "6 2 8\n" and lines[1] == "4 5\n"
    # hosts 0..3 to p0-switch0 (node 4), then to p1-switch0 (node 5), at 200G
    assert lines[2:] == [f"{h} {4 + k} 200Gbps 500ns 0\n" for k in range(2) for h in range(4)]


def _mlx5_counter_planes(qcodes: np.ndarray, n_nic: int, stride: int) -> dict:
    """The tx port of every QP end (nic, peer, conn, side), as mlx5's context counter gives
    it when the ends are created in (peer, conn, side) order: the first context on the device
    starts at 1 (mlx5_ib_alloc_ucontext), then port = ++counter % 2 + 1."""
    ends = set()
    for code in qcodes.tolist():
        side, rest = code % 2, code // 2
        conn, rest = rest % stride, rest // stride
        peer, me = rest % n_nic, rest // n_nic
        ends.add((me, peer, conn, side))
        ends.add((peer, me, conn, 1 - side))
    counter: dict[int, int] = {}
    port = {}
    for e in sorted(ends):
        counter[e[0]] = counter.get(e[0], 1) + 1
        port[e] = counter[e[0]] % 2 + 1
    return port


@settings(max_examples=60, deadline=None)
@given(n_nic=st.integers(2, 6), stride=st.sampled_from([1, 2, 4]), data=st.data())
def test_qps_take_the_ports_mlx5s_lag_round_robin_gives_them(n_nic, stride, data):
    codes = data.draw(st.sets(st.tuples(st.integers(0, n_nic - 1), st.integers(0, n_nic - 1),
                                        st.integers(0, stride - 1), st.integers(0, 1)),
                              min_size=1, max_size=20))
    q = np.array(sorted(((m * n_nic + p) * stride + c) * 2 + r for m, p, c, r in codes),
                 np.int64)
    got = qp_planes(q, n_nic, stride, 2)
    port = _mlx5_counter_planes(q, n_nic, stride)
    for i, code in enumerate(q.tolist()):
        side, rest = code % 2, code // 2
        conn, rest = rest % stride, rest // stride
        peer, me = rest % n_nic, rest // n_nic
        assert got[i, 0] == port[(me, peer, conn, side)] - 1
        assert got[i, 1] == port[(peer, me, conn, 1 - side)] - 1
    assert (qp_planes(q, n_nic, stride, 1) == 0).all()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.integers(0xC000, 0xFFFF)), min_size=1, max_size=8))
def test_five_tuple_planes_are_crc32_of_the_qps_5_tuple_each_way(qps):
    import struct
    import zlib
    sip, dip, sport = (np.array(x, np.int64) for x in zip(*qps))
    got = qp_planes_hash(sip, dip, sport, 2)
    for i, (a, b, p) in enumerate(qps):
        assert got[i, 0] == zlib.crc32(struct.pack(">IIHHB", a, b, p, 4791, 17)) % 2
        assert got[i, 1] == zlib.crc32(struct.pack(">IIHHB", b, a, p, 4791, 17)) % 2


def _cluster(nodes: int, nics: int, fabric: dict, gbps: float = 400) -> dict:
    return {"name": "t", "nodes": nodes, "gpus_per_node": nics, "nics_per_node": nics,
            "link_gbps": gbps, "nvlink_gbps": 3600, "gpu": GPU, "fabric": fabric}


def _scenario(tmp: Path, cluster: dict, workload: dict, channels: int) -> Path:
    path = tmp / "planes.yaml"
    path.write_text(yaml.safe_dump({
        "name": "planes", "cluster": cluster, "workload": workload,
        "collectives": {"algorithm": "ring", "channels": channels},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False}}))
    return path


def _frame_planes(sched, tx: np.ndarray) -> np.ndarray:
    """The plane of every frame a NIC sent: its QP's data plane, an ACK its ACK plane."""
    S = sched._eng.S
    qp = S.ms[tx["msg"], K.M_QPID]
    return S.q_plane[qp, (tx["kind"] == PKT_ACK).astype(np.int64)]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from([("single-switch", 4, 1), ("rail-optimized", 2, 2),
                             ("leaf-spine", 2, 2)]),
       wl=st.sampled_from(["incast", "alltoall"]), channels=st.sampled_from([1, 2]),
       preset=st.sampled_from(["hpcc-ns3", "th5-400g"]))
def test_a_queued_run_on_two_planes_keeps_every_frame_in_its_plane_and_conserves_bytes(
        tmp_path_factory, kind, wl, channels, preset):
    name, nodes, nics = kind
    topo = {"kind": name, "planes": 2, **({"nodes_per_leaf": 1} if name == "leaf-spine" else {})}
    fab = {"model": "queued", "preset": preset, "topology": topo}
    n = nodes * nics
    work = ({"kind": "incast", "senders": n - 1, "receiver": 0, "bytes": 256 << 10}
            if wl == "incast" else {"kind": "alltoall", "bytes": 128 << 10})
    path = _scenario(tmp_path_factory.mktemp("pl"), _cluster(nodes, nics, fab), work, channels)
    sched = Schedule(build_plan(load_scenario(path)), keep_history=False)
    tx = np.concatenate(list(sched.run()))
    S = sched._eng.S
    t = build_topology(load_scenario(path).cluster)
    assert sched._eng.sc[K.PKUSED] == 0 and sched.fabric_counters["drops"] == 0
    fp = S.fp
    data_b = fp[:, K.FP_TXB] - 60 * fp[:, K.FP_PFCS]
    plane_of = _frame_planes(sched, tx)
    fb = tx["frame_bytes"].astype(np.int64)
    for k in range(2):
        # what plane k hands to each NIC is what the NICs sent to it on plane k's QPs
        for d in range(n):
            sent = int(fb[(plane_of == k) & (tx["peer_nic"] == d)].sum())
            assert int(data_b[t.plane_nic_port[k, d]]) == sent
        # and nothing of plane 1 - k's flows ever crossed a plane-k switch port
        own = t.switch_plane[t.port_switch] == k
        to_nic = own & (t.port_peer_nic >= 0)
        assert int(data_b[to_nic].sum()) == int(fb[plane_of == k].sum())
    # every switch sent what it received (from NICs: their frames on that ToR's plane)
    rx = np.zeros(t.switches, np.int64)
    up = np.flatnonzero(t.port_peer_port >= 0)
    np.add.at(rx, t.port_switch[up], data_b[t.port_peer_port[up]])
    for k in range(2):
        for g in range(n):
            p = t.plane_nic_port[k, g]
            rx[t.port_switch[p]] += int(fb[(plane_of == k) & (tx["nic"] == g)].sum())
    tx_sw = np.bincount(t.port_switch, weights=data_b, minlength=t.switches).astype(np.int64)
    assert (rx == tx_sw).all()
    m = sched.messages
    assert (m["arrival_ns"] >= m["last_tx_end_ns"]).all()


def test_an_incast_onto_two_200g_ports_is_bounded_by_one_400g_receiver_link(tmp_path):
    senders, size = 7, 4 << 20
    fab = {"model": "queued", "topology": {"kind": "single-switch", "planes": 2}}
    path = _scenario(tmp_path, _cluster(senders + 1, 1, fab),
                     {"kind": "incast", "senders": senders, "receiver": 0, "bytes": size}, 2)
    sched = Schedule(build_plan(load_scenario(path)), keep_history=False, nics=())
    for _ in sched.run():
        pass
    frames = senders * size // 4096
    physics = frames * (4096 + 78 + 24) * 8 / 400          # RoCEv2 frame + layer 1, at 400G
    span = int(sched.messages["arrival_ns"].max())
    # one path's latency on top: 2 x 500 ns propagation, 700 ns pipeline, a frame at 200G
    path_ns = 2 * 500 + 700 + 2 * 168
    # each port carries half the frames at ceil(4,198 x 8 / 200) = 168 ns each
    assert physics <= span <= frames // 2 * 168 + path_ns
    log, _ = sched.fabric_log()
    to0 = log["links"][log["links"]["peer_nic"] == 0]
    assert len(to0) == 2 and (to0["gbps"] == 200).all()
    # both ports of the receiver carried half the payload (QPs alternate planes per NIC)
    assert to0["tx_frames"][0] == to0["tx_frames"][1] == frames // 2


@pytest.mark.parametrize("topo, key, expected", [
    ({"planes": 3}, "planes", "an integer in [1, 2]"),
    ({"planes": 2, "dual_tor": False}, "dual_tor", "true or null with planes 2"),
    ({"dual_tor": True}, "dual_tor", "false or null with planes 1"),
    ({"planes": 2, "nic_link_gbps": 400}, "nic_link_gbps", "200"),
])
def test_impossible_planes_are_one_line_naming_the_key(tmp_path, topo, key, expected):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_cluster(2, 2, {"model": "queued", "topology": topo})))
    with pytest.raises(ProfileError) as e:
        load_cluster(p)
    msg = str(e.value)
    assert "\n" not in msg and f"fabric.topology.{key}" in msg and expected in msg


def test_planes_that_do_not_split_the_nic_rate_into_whole_mbps_are_refused(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(_cluster(2, 2, {"model": "queued", "topology": {"planes": 2}},
                                         gbps=0.001 * 3 + 1)))
    with pytest.raises(ProfileError, match="fabric.topology.planes"):
        load_cluster(p)
    assert TopologyConfig().planes == 1 and TopologyConfig().dual_tor is None


def test_the_bundled_hpn_cluster_is_two_planes_of_rail_optimized_200g_ports():
    from tests.conftest import ROOT
    c = load_cluster(ROOT / "profiles" / "clusters" / "h100-rocev2-hpn-2x200g-16n.yaml")
    t = build_topology(c)
    assert c.fabric.topology.planes == 2 and t.planes == 2
    # per plane one ToR per rail (8) and 8 spines; 128 NICs with a 200G port in each plane
    assert t.switches == 2 * (8 + 8)
    assert (t.port_gbps[t.plane_nic_port] == 200).all() and t.plane_nic_port.shape == (2, 128)
    rail = np.arange(128) % 8
    for k in range(2):
        tor = t.port_switch[t.plane_nic_port[k]]
        assert np.unique(tor).size == 8 and all(np.unique(rail[tor == s]).size == 1
                                                for s in np.unique(tor))


def _murmur3_x86_32(data: bytes, seed: int) -> int:
    """MurmurHash3 x86_32 (Appleby's reference, as ns-3's ``hash-murmur3.cc``), pure Python."""
    m = 0xFFFFFFFF
    rotl = lambda x, r: ((x << r) | (x >> (32 - r))) & m   # noqa: E731
    h = seed & m
    for i in range(0, len(data) // 4 * 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = rotl((k * 0xCC9E2D51) & m, 15) * 0x1B873593 & m
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & m
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    return h ^ (h >> 16)


def test_ns3_runs_the_two_plane_export_each_port_at_200g_with_its_own_plane_choice(tmp_path):
    """The export is the simulator's input byte for byte; in the simulator's run the receiver's
    busier port carries what ns-3's NIC choice puts on it at 200G, as in ours with ours."""
    from tests.conftest import ROOT
    from tokenpcap.export.hpcc_fct import read_fct
    cases = ROOT / "tests" / "cases" / "hpcc"
    scen = cases / "incast7x4m-planes2.yaml"
    out = tmp_path / "incast7x4m-planes2.txt"
    from click.testing import CliRunner
    from tokenpcap.cli import main
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "--hpcc-cc", "none",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes() == (cases / "incast7x4m-planes2-flows.txt").read_bytes()
    for suffix in ("-topology.txt",):
        assert ((tmp_path / f"incast7x4m-planes2{suffix}").read_bytes()
                == (cases / f"incast7x4m-planes2{suffix}").read_bytes())
    fct = read_fct(cases / "incast7x4m-planes2-pfc-fct.txt")
    assert len(fct) == 28
    # rdma-hw.cc GetNicIdxOfQp: v[Hash32({sip, dip, sport, dport}) % 2], Hash32 seeded 0x8BADF00D
    ip = lambda n: 0x0B000001 + (n // 256) * 0x10000 + (n % 256) * 0x100   # noqa: E731
    nic = [_murmur3_x86_32(b"".join(x.to_bytes(w, "little") for x, w in (
        (ip(int(f["src"])), 4), (ip(int(f["dst"])), 4), (int(f["sport"]), 2),
        (int(f["dport"]), 2))), 0x8BADF00D) % 2 for f in fct]
    busier = max(nic.count(0), nic.count(1))
    assert busier == 16
    per_frame = (4096 + 48) * 8 // 200                      # ns-3's frame at 200G, truncated
    flow_frames = (1 << 20) // 4096
    span_ns3 = int((fct["start_ns"] + fct["fct_ns"]).max() - fct["start_ns"].min())
    assert abs(span_ns3 - busier * flow_frames * per_frame) <= 0.005 * span_ns3
    # ours: every sender's two QPs alternate planes, 14 flows on each receiver port
    sched = Schedule(build_plan(load_scenario(scen)), keep_history=False, nics=())
    for _ in sched.run():
        pass
    span = int(sched.messages["arrival_ns"].max())
    assert abs(span - 14 * flow_frames * per_frame) <= 0.005 * span


def test_a_pause_to_a_nic_port_names_the_ns3_device_of_that_plane():
    """third.cc installs a node's devices in the order of the topology file's lines that touch
    it (interface 0 the loopback): a host's interface i is its i-th line's link."""
    from tokenpcap.export.hpcc_pfc import ns3_device
    t = build_topology(_topo_cluster(2, 2, kind="rail-optimized", planes=2))
    lines = [tuple(map(int, x.split()[:2])) for x in hpcc_topology_lines(t)[2:]]
    n = 4
    for h in range(n):
        mine = [b - n for a, b in lines if a == h]          # host h's links, in file order
        for k in range(2):
            p = int(t.plane_nic_port[k, h])
            s, num = int(t.port_switch[p]), int(t.port_number[p])
            node, dev, _ = ns3_device(t, s, num)
            assert node == h and mine[dev - 1] == s


def test_both_plane_tors_pause_their_senders_and_nothing_is_lost(tmp_path):
    # 8 -> 1 x 1 MiB in two QPs per sender into 2 MB per plane switch: both ToRs send PFC
    fab = {"model": "queued", "preset": "hpcc-ns3",
           "topology": {"kind": "single-switch", "planes": 2},
           "switch": {"buffer_bytes": 2_000_000}}
    path = _scenario(tmp_path, _cluster(9, 1, fab),
                     {"kind": "incast", "senders": 8, "receiver": 0, "bytes": 1 << 20}, 2)
    sched = Schedule(build_plan(load_scenario(path)), keep_history=False, nics=())
    for _ in sched.run():
        pass
    log, summary = sched.fabric_log()
    names = summary.switch_names
    sent = {names[int(r["switch"])]: int(r["pfc_sent"]) for r in log["links"]}
    assert min(sent.get("p0-switch0", 0), sent.get("p1-switch0", 0)) > 0
    assert summary.drops_total == 0 and summary.headroom_overflows == 0
    assert int(log["nics"]["pfc_received"].sum()) == len(log["pfc"])
    d = sched.messages[sched.messages["kind"] == 0]
    assert int(d["size_bytes"].sum()) == 8 << 20 and sched._eng.sc[K.PKUSED] == 0
