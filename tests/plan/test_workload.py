"""The plan of a workload scenario (tokenpcap.plan.workload): each kind's transfers against an
analytic count (incast: n messages of S, S/PMTU packets each; AllToAll: n(n-1) pairs of S/n,
the cross-node ones on the NICs; ring AllReduce: 2(n-1)/n S per rank on the wire, AllGather and
ReduceScatter (n-1)/n S), and, for random small workloads, the plan's NIC bytes per phase and
NIC equal to the schedule's transfers and to the messages the engine times."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from tokenpcap.collectives.transfers import transfers
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.pipeline import prepare
from tokenpcap.plan.build import build_plan
from tokenpcap.records import KIND_DATA, phase_label
from tokenpcap.tokens import TokenizedCorpus

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
MiB = 1 << 20
#: 2 nodes x 4 GPUs x 2 NICs: NVLink inside a node, two rails between the nodes
SMALL = {"name": "small-2x4", "nodes": 2, "gpus_per_node": 4, "nics_per_node": 2,
         "link_gbps": 400, "nvlink_gbps": 3600, "gpu": {"name": "H100-SXM", "peak_tflops": 989}}
EIGHT_BY_ONE = str(ROOT / "profiles" / "clusters" / "h100-rocev2-8x1.yaml")


def scenario(tmp_path: Path, workload: dict, cluster=EIGHT_BY_ONE, channels: int = 1,
             algorithm: str = "ring", name: str = "wl",
             protocol: str = "Simple"):  # type: ignore[no-untyped-def]
    """A workload scenario; Simple by default (the data itself on the wire, the textbooks')."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"cluster": cluster, "workload": workload,
                                    "collectives": {"algorithm": algorithm, "channels": channels,
                                                    "NCCL_PROTO": protocol},
                                    "generation": {"clear_to_send": False}}))
    return load_scenario(path)


def nic_sums(tr: dict) -> tuple[dict, dict]:
    """Bytes of NIC transfers per (src rank, dst rank) and per sending NIC."""
    pair, nic = defaultdict(int), defaultdict(int)
    for a, b, n, x in zip(tr["rank_src"].tolist(), tr["rank_dst"].tolist(),
                          tr["src_nic"].tolist(), tr["size_bytes"].tolist()):
        pair[a, b] += x
        nic[n] += x
    return dict(pair), dict(nic)


def test_incast_63_messages_of_16_mib_at_the_pmtu():
    s = load_scenario(SCEN / "incast-63x16m.yaml")
    plan = build_plan(s)
    (row,) = plan.rows
    assert (row.name, row.calls, row.message_bytes) == ("wl/run/SendRecv", 63, 16 * MiB)
    per_nic = plan.nic_bytes_per_nic()
    assert per_nic[0] == 0 and (per_nic[1:] == 16 * MiB).all() and per_nic.size == 64
    pmtu = s.cluster.pmtu_bytes
    assert plan.pcap["data_packets"] == 63 * (16 * MiB // pmtu)
    j = plan.to_json()
    assert j["model"] is None and j["workload"]["receiver_bytes"] == 63 * 16 * MiB
    assert j["workload"]["receiver_wire_time_ns"] == -(-63 * 16 * MiB * 8 // 400)
    sched = prepare(s, nics=()).schedule
    pair, _ = nic_sums(sched.nic_transfers([0]))
    assert pair == {(r, 0): 16 * MiB for r in range(1, 64)}
    for _ in sched.run():
        pass
    m = sched.messages
    assert (m["dst_nic"] == 0).all() and m["size_bytes"].sum() == 63 * 16 * MiB
    # NCCL's network p2p chunks (docs/p2p.md): computeBuffSizes (src/init.cc) makes the step
    # NCCL_P2P_NET_CHUNKSIZE (128 KiB, at most NCCL_BUFFSIZE / NCCL_STEPS = 512 KiB); one channel
    # (collectives.channels 1) is one part; addP2pToPlan keeps the chunk at the whole step for a
    # send of at least 8 steps, so each 16 MiB send is divUp(16 MiB, 128 KiB) = 128 messages of
    # 128 KiB, each 128 KiB / PMTU packets (the ns-3 validation's one flow per sender is
    # incast-63x16m-hpcc-ns3.yaml, with NCCL_P2P_NET_CHUNKSIZE 0)
    step = s.collectives.NCCL_P2P_NET_CHUNKSIZE
    assert step == 128 << 10 and step * 8 <= (4 << 20) and 16 * MiB >= 8 * step
    per_send = -(-16 * MiB // step)
    assert plan.p2p_messages == 63 * per_send
    assert len(m) == 63 * per_send and (m["size_bytes"] == step).all()
    assert (m["n_packets"] == -(-step // pmtu)).all()


def test_alltoall_64_has_n_n_minus_1_pairs_and_the_cross_node_ones_on_the_nics():
    s = load_scenario(SCEN / "alltoall-64.yaml")
    plan = build_plan(s)
    (row,) = plan.rows
    assert (row.name, row.message_bytes, row.group_size) == ("wl/run/AllToAll", 64 * MiB, 64)
    call = next(plan.calls())
    t = transfers(call, plan.algorithm, plan.layout, s.collectives.channels,
                  s.collectives.slice_bytes).table
    every: dict = defaultdict(int)
    for a, b, x in zip(t["src"].tolist(), t["dst"].tolist(), t["bytes"].tolist()):
        every[a, b] += x
    assert every == {(i, j): MiB for i in range(64) for j in range(64) if i != j}   # 64 * 63
    node = plan.layout.node_array(np.arange(64))
    assert (t["nic"] == (node[t["src"]] != node[t["dst"]])).all()
    tr = prepare(s, nics=()).schedule.nic_transfers([0])
    pair, nic = nic_sums(tr)
    assert pair == {(i, j): MiB for i in range(64) for j in range(64) if node[i] != node[j]}
    # PXN (docs/p2p.md, NCCL ncclTopoGetNetDev, NCCL_P2P_PXN_LEVEL 2): rank i sends to rank j
    # of another node from NIC local(j) of its own node, after an NVLink copy to that node's GPU
    # local(j) unless it is i itself; the receiver uses its own NIC
    g = s.cluster.gpus_per_node
    assert s.cluster.nics_per_node == g and (node == np.arange(64) // g).all()
    local = np.arange(64) % g
    want_src_nic = node[tr["rank_src"]] * g + local[tr["rank_dst"]]
    assert (tr["src_nic"] == want_src_nic).all() and (tr["dst_nic"] == tr["rank_dst"]).all()
    nvlink, on_nic = np.zeros(64, np.int64), np.zeros(64, np.int64)
    for i in range(64):
        for j in range(64):
            if i == j:
                continue
            if node[i] == node[j] or local[i] != local[j]:
                nvlink[i] += MiB               # a local peer, or the copy to the proxy GPU
            if node[i] != node[j]:
                on_nic[node[i] * g + local[j]] += MiB
    # 7 local peers + 49 remote ones behind another GPU's NIC; each NIC: 8 GPUs x 7 nodes
    assert (nvlink == (7 + 49) * MiB).all() and (on_nic == 8 * 7 * MiB).all()
    assert (plan.nvlink_bytes_per_rank == nvlink).all() and (plan.nic_bytes_per_rank == on_nic).all()
    assert nic == {n: int(on_nic[n]) for n in range(64)}


@pytest.mark.parametrize("kind,collective,per_rank", [
    ("allreduce", "AllReduce", lambda n, s: 2 * (n - 1) * s // n),
    ("allgather", "AllGather", lambda n, s: (n - 1) * s // n),
    ("reducescatter", "ReduceScatter", lambda n, s: (n - 1) * s // n)])
def test_ring_collectives_put_their_textbook_bytes_on_every_nic(tmp_path, kind, collective,
                                                                 per_rank):
    size = 8 * MiB                                    # 8 ranks, one per node: all on the wire
    s = scenario(tmp_path, {"kind": kind, "bytes": size, "repeat": 2}, channels=2)
    plan = build_plan(s)
    (row,) = plan.rows
    assert (row.name, row.calls, row.message_bytes) == (f"wl/run/{collective}", 2, size)
    assert (plan.nic_bytes_per_rank == 2 * per_rank(8, size)).all()
    _, nic = nic_sums(prepare(s, nics=()).schedule.nic_transfers([0]))
    assert nic == {n: 2 * per_rank(8, size) for n in range(8)}


@pytest.mark.parametrize("kind,collective,steps", [
    ("allreduce", "AllReduce", 14), ("allgather", "AllGather", 7),
    ("reducescatter", "ReduceScatter", 7)])
def test_under_nccl_s_choice_an_8_mib_ring_goes_as_ll128_lines(tmp_path, kind, collective, steps):
    """8 MiB over 8 ranks on NCCL's choice (NCCL_PROTO auto): the tuner picks LL128 (ring on
    Hopper, tuning.cc), each step's 1 MiB chunk in 2 channels of 512 KiB, one message each
    (at most one LL128 step, 576,000 data bytes); on the wire 2,048-byte warp slices of 1,920 data
    bytes (prims_ll128.h): ceil(524,288 / 1,920) x 2,048 = 561,152 bytes a message."""
    size = 8 * MiB
    s = scenario(tmp_path, {"kind": kind, "bytes": size, "repeat": 2}, channels=2,
                 protocol="auto")
    plan = build_plan(s)
    (row,) = plan.rows
    # the data stays the textbook's: steps x S/n per rank and call, 8 ranks, 2 calls
    assert row.protocols == {"LL128": 2} and row.nic_payload_bytes == 8 * 2 * steps * (size // 8)
    wire = 2 * steps * 2 * (-(-(size // 8 // 2) // 1920) * 2048)
    assert (plan.nic_bytes_per_rank == wire).all()
    _, nic = nic_sums(prepare(s, nics=()).schedule.nic_transfers([0]))
    assert nic == {n: wire for n in range(8)}


def test_sendrecv_pairs_repeat_and_scale(tmp_path):
    s = scenario(tmp_path, {"kind": "sendrecv", "pairs": [[0, 1], [1, 0], [2, 7]],
                            "bytes": 3 * MiB, "repeat": 4})
    plan = build_plan(s, scale=3)
    calls = list(plan.calls())
    assert len(calls) == 12 and {c.message_bytes for c in calls} == {MiB}
    assert [c.microbatch for c in calls] == [k for k in range(4) for _ in range(3)]
    assert [(c.src, c.dst) for c in calls[:3]] == [(0, 1), (1, 0), (2, 7)]
    pair, _ = nic_sums(prepare(s, scale=3, nics=()).schedule.nic_transfers([0]))
    assert pair == {(0, 1): 4 * MiB, (1, 0): 4 * MiB, (2, 7): 4 * MiB}


def test_a_workload_takes_no_tokens(tmp_path):
    s = scenario(tmp_path, {"kind": "alltoall", "bytes": 1024})
    toks = TokenizedCorpus.__new__(TokenizedCorpus)
    with pytest.raises(InputError, match=r"wl.yaml: a workload scenario has no model: it takes "
                       "no tokens$"):
        build_plan(s, toks)
    assert build_plan(s).tokens_per_iteration == 0


# ------------------------------------------------------------------ random small workloads

@st.composite
def workloads(draw):  # type: ignore[no-untyped-def]
    world = 8
    kind = draw(st.sampled_from(["incast", "alltoall", "allreduce", "allgather",
                                 "reducescatter", "sendrecv"]))
    w: dict = {"kind": kind, "bytes": 4 * draw(st.integers(1, 20_000)),
               "repeat": draw(st.integers(1, 2))}
    ranks = draw(st.permutations(range(world)))
    if kind == "incast":
        n = draw(st.integers(1, world - 1))
        w.update(receiver=ranks[0], senders=list(ranks[1:1 + n]))
        w["start_offsets_ns"] = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    elif kind == "sendrecv":
        pairs = draw(st.lists(st.tuples(st.integers(0, world - 1), st.integers(0, world - 1))
                              .filter(lambda p: p[0] != p[1]), min_size=1, max_size=6,
                              unique=True))
        w["pairs"] = [list(p) for p in pairs]
    else:
        w["ranks"] = list(ranks[:draw(st.integers(2, world))])
    return w


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w=workloads(), channels=st.integers(1, 3), alg=st.sampled_from(["ring", "tree"]),
       scale=st.sampled_from([1, 3]), iterations=st.integers(1, 2))
def test_random_workloads_plan_bytes_equal_the_schedules_transfers(tmp_path, w, channels, alg,
                                                                    scale, iterations):
    s = scenario(tmp_path, w, cluster=SMALL, channels=channels, algorithm=alg)
    plan = build_plan(s, scale=scale)
    sched = prepare(s, scale=scale, iterations=iterations, nics=()).schedule
    tr = sched.nic_transfers([0])
    label: dict = defaultdict(int)
    for d, p, c, x in zip(tr["dim"].tolist(), tr["phase"].tolist(), tr["collective"].tolist(),
                          tr["size_bytes"].tolist()):
        label[phase_label(d, p, c)] += x
    assert dict(label) == {r.name: r.nic_bytes for r in plan.rows if r.nic_bytes}
    _, nic = nic_sums(tr)
    want = plan.nic_bytes_per_nic()
    assert [nic.get(i, 0) for i in range(want.size)] == want.tolist()
    for _ in sched.run():                       # every rank ends its program, bytes kept
        pass
    m = sched.messages
    d = m[m["kind"] == KIND_DATA]
    got = np.bincount(d["src_nic"], weights=d["size_bytes"], minlength=want.size)
    assert got.astype(np.int64).tolist() == (iterations * want).tolist()
