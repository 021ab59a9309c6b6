"""Channels of rings and trees cross nodes on every NIC of the group (NCCL on rails).

Right values: NCCL builds one ring channel per NIC, each entering and leaving the node on its own
NIC (``src/graph/search.cc``, "NET n -> GPU a -> .. -> GPU x -> NET n"), and doubles the channels
in ``ncclTopoPostset`` (``src/graph/connect.cc``, ``nChannels * 2``; ``MAXCHANNELS`` 64 in
``src/include/device.h``). A ring AllReduce of S bytes over N ranks sends 2(N-1)/N·S out of every
node (Patarasuk & Yuan 2009), so each of the k NICs of a node's k group members carries
2(N-1)/N·S/k.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.rails import group_nics, rank_nic_bytes
from tokenpcap.collectives.traffic import CallShape, per_rank_bytes
from tokenpcap.collectives.transfers import transfers
from tokenpcap.config.profiles import default_channels, load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.rows import bytes_per_nic

ROOT = Path(__file__).resolve().parents[2]


def per_nic(call: CallShape, alg: str, lay: RankLayout, channels: int) -> np.ndarray:
    m = np.zeros((lay.world_size, lay.nics_per_node), np.int64)
    m[list(call.group)] = rank_nic_bytes(call, alg, lay, channels)
    return bytes_per_nic(m, lay)


def test_nccl_default_channels_are_two_per_nic_up_to_maxchannels():
    assert default_channels(8) == 16          # DGX H100: 8 NICs -> 8 ring channels, doubled
    assert default_channels(1) == 2
    # NCCL would run min(64, 2 x NICs); the QP numbering (dimension x channels + channel < 256
    # over 8 dimensions) holds 32: with 32 NICs per node `auto` was 64 and every run failed
    assert default_channels(16) == 32
    assert default_channels(32) == 32 and default_channels(40) == 32


def test_the_channel_bound_fits_the_qp_numbering_of_every_dimension():
    from tokenpcap.config.bounds import MAX_CHANNELS
    from tokenpcap.records import DIMS
    from tokenpcap.wire.qpn import QP_STRIDE

    assert (len(DIMS) - 1) * MAX_CHANNELS + MAX_CHANNELS - 1 < QP_STRIDE


@pytest.mark.parametrize("alg", ["ring", "tree"])
def test_every_nic_of_a_full_node_group_carries_2_n_minus_1_over_n_s_over_k(alg):
    lay = RankLayout(dp=32, tp=1, pp=1, gpus_per_node=8, nics_per_node=8)
    n, k, ch, e = 32, 8, 16, 2
    s = n * ch * e * 1000                     # whole elements in every chunk and channel
    call = CallShape("AllReduce", tuple(range(n)), s, e)
    got = per_nic(call, alg, lay, ch)
    if alg == "ring":
        assert got.tolist() == [2 * (n - 1) * s // n // k] * (4 * k)
    else:                                     # every NIC equal; the node's total is the tree's
        node_total = per_rank_bytes(call, alg, lay).nic_bytes.reshape(4, 8).sum(axis=1)
        assert (got.reshape(4, 8) == (node_total // k)[:, None]).all()
        assert (got > 0).all()


def test_four_members_per_node_use_their_four_nics():
    # Mixtral's DP group at tp 2: ranks 0,2,4,6 | 8,10,12,14 (two nodes, four GPUs each)
    lay = RankLayout(dp=8, tp=2, pp=2, gpus_per_node=8, nics_per_node=8)
    g = lay.groups("dp")[0]
    assert g == (0, 2, 4, 6, 8, 10, 12, 14)
    assert group_nics(g, lay) == {0: (0, 2, 4, 6), 1: (8, 10, 12, 14)}
    n, k, ch, e = 8, 4, 16, 4
    s = n * ch * e * 777
    got = per_nic(CallShape("AllReduce", g, s, e), "ring", lay, ch)
    want = np.zeros(32, np.int64)
    want[[0, 2, 4, 6, 8, 10, 12, 14]] = 2 * (n - 1) * s // n // k
    assert got.tolist() == want.tolist()


def test_hierarchical_and_point_to_point_stay_on_the_senders_nic():
    lay = RankLayout(dp=32, tp=1, pp=1, gpus_per_node=8, nics_per_node=8)
    call = CallShape("AllReduce", tuple(range(32)), 1 << 20, 2)
    rb = per_rank_bytes(call, "hierarchical", lay).nic_bytes
    got = per_nic(call, "hierarchical", lay, 16)
    assert got.tolist() == rb.tolist()        # rank r is NIC r on this layout
    p2p = per_nic(CallShape("SendRecv", (3, 11), 4096, 2), "ring", lay, 16)
    assert p2p[3] == 4096 and p2p.sum() == 4096


@settings(max_examples=30, deadline=None)
@given(n_nodes=st.integers(2, 4), per_node=st.sampled_from([1, 2, 4, 8]),
       coll=st.sampled_from(["AllReduce", "AllGather", "ReduceScatter"]),
       alg=st.sampled_from(["ring", "tree", "hierarchical"]), ch=st.integers(1, 20),
       s=st.integers(1, 3 << 20), e=st.sampled_from([1, 2, 4]))
def test_transfers_use_the_nics_the_plan_counts(n_nodes, per_node, coll, alg, ch, s, e):
    """The schedule's transfers (src_nic of each RDMA message) and the plan's closed form
    (rank_nic_bytes) put the same bytes on every NIC; the sending NIC is on the sender's node
    and the receiving NIC on the receiver's; rows add up to the rank's NIC bytes."""
    lay = RankLayout(dp=8 * n_nodes, tp=1, pp=1, gpus_per_node=8, nics_per_node=8)
    group = tuple(node * 8 + j for node in range(n_nodes) for j in range(per_node))
    call = CallShape(coll, group, s, e)
    t = transfers(call, alg, lay, ch, 1 << 20).table
    d = t[t["nic"]]
    assert (d["src_nic"] // 8 == d["src"] // 8).all() and (d["dst_nic"] // 8 == d["dst"] // 8).all()
    assert (t["src_nic"][~t["nic"]] == -1).all()
    from_transfers = np.bincount(d["src_nic"], weights=d["bytes"], minlength=8 * n_nodes)
    assert from_transfers.astype(np.int64).tolist() == per_nic(call, alg, lay, ch).tolist()
    assert rank_nic_bytes(call, alg, lay, ch).sum(axis=1).tolist() == \
        per_rank_bytes(call, alg, lay).nic_bytes.tolist()


def test_llama3_8b_zero3_spreads_dp_over_all_eight_nics():
    """The bundled scenario: NCCL's 16 channels put the DP ring on every NIC of every node,
    each within one slice of the node's bytes / 8 (was: all on NIC 7 of each node)."""
    s = load_scenario(ROOT / "profiles" / "scenarios" / "llama3-8b-zero3.yaml")
    assert s.collectives.channels == 16
    plan = build_plan(s, scale=64)
    per = plan.nic_bytes_per_nic().reshape(4, 8)
    node = per.sum(axis=1)
    assert (per > 0).all()
    assert (np.abs(per - node[:, None] / 8) <= node[:, None] * 1e-4).all()
    for f in plan.families:                   # every call: each NIC within one slice of S·(N-1)/N/8
        call = CallShape(f.collective, f.groups[0], f.message_bytes, f.elem_bytes)
        one = per_nic(call, s.collectives.algorithm, plan.layout, 16)
        assert (np.abs(one - f.message_bytes * 31 / 32 / 8) < s.collectives.slice_bytes).all()
