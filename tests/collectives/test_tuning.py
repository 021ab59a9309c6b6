"""NCCL's tuner against an oracle written out from src/graph/tuning.cc and src/enqueue.cc
(NVIDIA/nccl 5067397c), independently of tokenpcap.collectives.tuning's tables and loops."""
from __future__ import annotations

import pytest

from tokenpcap.collectives.tuning import (Graph, CommTopology, choose_collective, choose_p2p,
                                          comm_topology, parse_list)
from tokenpcap.errors import InputError


def _oracle_hopper_2x8(coll: str, n_bytes: int) -> tuple[str, str, int]:
    """tuning.cc by hand for 16 H100 ranks on 2 nodes (ppn 8, Intel host), ring/tree graph of 8
    channels at 48 GB/s, 16 communicator channels. Returns (algo, proto, nChannels)."""
    nRanks, nNodes, nCh, bw, commCh = 16, 2, 8, 48.0, 16
    # index2 = nNodes-1 = 1; index1 = 0 (Intel, multi-node)
    llMaxBw = 39.0                    # llMaxBws[0][1]
    perChMaxTreeBw = 41.4             # perChMaxTreeBws[Hopper][1]
    perChMaxRingLL128Bw = 36.7        # perChMaxRingLL128Bws[Hopper][1]
    perChMaxTreeLL128Bw = 36.7        # perChMaxTreeLL128Bws[Hopper][1]
    nsteps = 2 * (nRanks - 1) if coll == "AllReduce" else nRanks - 1
    cands = {}
    # --- Ring ---
    base = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
    nvl = {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}         # hwLatencies[NVLINK][RING]
    net = {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}        # hwLatencies[NET][RING]
    for p in ("LL", "LL128", "Simple"):
        busBw = nCh * bw                                   # nNodes <= 2: bwIntra
        if p == "LL":
            busBw = min(llMaxBw, busBw * .5)
        if p == "LL128":
            busBw = min(busBw * 0.92, nCh * perChMaxRingLL128Bw)
        busBw *= nRanks / nsteps
        netOverhead = 1.0 * (3 if p == "Simple" else 1)
        intraLat = max(nvl[p], netOverhead)
        nInter = 2 * (nNodes - 1) if coll == "AllReduce" else nNodes - 1
        lat = base[p] + (nsteps - nInter) * intraLat + nInter * net[p]
        if p == "Simple" and coll == "AllReduce" and n_bytes // (commCh * nRanks) >= 64:
            lat *= 1.4
        cands[("Ring", p)] = lat + n_bytes / (1000 * busBw)
    # --- Tree (AllReduce only) ---
    if coll == "AllReduce":
        base = {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}
        nvl = {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}
        net = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}
        corr = {"LL": [1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0],
                "LL128": [1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0],
                "Simple": [.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9]}
        for p in ("LL", "LL128", "Simple"):
            busBw = min(nCh * bw * .92, nCh * perChMaxTreeBw)
            if p == "LL":
                busBw = min(busBw / 3.8, llMaxBw)
            if p == "LL128":
                busBw = min(busBw * 120.0 / 128.0, nCh * perChMaxTreeLL128Bw)
            busBw *= .5
            lat = base[p] + 2 * ((nRanks // nNodes - 1) * nvl[p] + 1 * net[p])   # log2i(2) = 1
            logSize = (n_bytes >> 6).bit_length() - 1
            if 0 <= logSize < 23:
                busBw *= corr[p][logSize]
            cands[("Tree", p)] = lat + n_bytes / (1000 * busBw)
    (algo, proto) = min(cands, key=lambda k: cands[k])
    nt = {"LL": 512, "LL128": 640, "Simple": 512}[proto]
    thr = {"LL": 8, "LL128": 8, "Simple": 64}[proto] * (nRanks if (algo, proto) == ("Ring", "LL") else 1)
    nc = commCh
    while n_bytes < nc * nt * thr and nc >= 2:
        nc -= 1
    return algo, proto, nc


def test_graph_of_two_hopper_nodes_of_eight_nics():
    t = comm_topology(16, 2, 8, 400.0, 3600.0, 90)
    # 400 Gb/s = 50 GB/s -> sm90SpeedArrayInter 48; no duplication (48 < 50, 8 channels > 4); x2
    assert t.graph == Graph(8, 48.0, 48.0) and t.comm_channels == 16


def test_graph_of_one_gpu_per_node():
    t = comm_topology(16, 16, 8, 400.0, 3600.0, 90)
    # one NIC: 1 channel at 48 -> duplicated to 2 at 24 -> 4 communicator channels (24 <= 45)
    assert t.graph == Graph(2, 24.0, 24.0) and t.comm_channels == 4


@pytest.mark.parametrize("coll", ["AllReduce", "AllGather", "ReduceScatter"])
@pytest.mark.parametrize("n_bytes", [4, 4096, 65536, 1 << 20, 8 << 20, 64 << 20, 1 << 30])
def test_choice_matches_the_tuning_cc_oracle(coll, n_bytes):
    topo = CommTopology(16, 2, Graph(8, 48.0, 48.0), 16, 90)
    c = choose_collective(topo, coll, n_bytes)
    assert (c.algorithm, c.protocol, c.channels) == _oracle_hopper_2x8(coll, n_bytes)


def test_the_oracle_spans_every_protocol():
    seen = {_oracle_hopper_2x8(c, b)[:2] for c in ("AllReduce", "AllGather")
            for b in (4, 1 << 20, 8 << 20, 1 << 30)}
    assert {p for _, p in seen} == {"LL", "LL128", "Simple"} and ("Tree", "LL") in seen


def test_nccl_proto_and_algo_restrict_the_choice():
    topo = CommTopology(16, 2, Graph(8, 48.0, 48.0), 16, 90)
    assert choose_collective(topo, "AllReduce", 4, nccl_proto="Simple").protocol == "Simple"
    assert choose_collective(topo, "AllReduce", 4, nccl_algo="Ring").algorithm == "Ring"
    c = choose_collective(topo, "AllReduce", 4, nccl_proto="^LL;allreduce:LL128", nccl_algo="ring")
    assert (c.algorithm, c.protocol) == ("Ring", "LL128")
    with pytest.raises(InputError):
        choose_collective(topo, "AllGather", 4, nccl_algo="Tree")       # no AllGather tree
    with pytest.raises(InputError):
        parse_list("LL,Fast", ("LL", "LL128", "Simple"), "NCCL_PROTO")


def test_p2p_ll_threshold_per_channel():
    # enqueue.cc addP2pToPlan: LL iff bytes <= nChannels * NCCL_P2P_LL_THRESHOLD (16384)
    assert choose_p2p(32768, 2) == "LL"
    assert choose_p2p(32769, 2) == "Simple"
    assert choose_p2p(1024, 1, ll_threshold_bytes=0) == "Simple"


def _oracle_hopper_16x1_allgather(n_bytes: int) -> tuple[str, str]:
    """tuning.cc by hand for an AllGather over 16 H100s, one per node (ppn 1: PAT enabled,
    ncclPatEnable; the ring's network latency is the tree's, "With ppn=1 latencies are fully
    exposed"), graph of 2 channels at 24 GB/s (index2 = 2: llMaxBws[0][2] = 20.4)."""
    nRanks, nNodes, nCh, bw = 16, 16, 2, 24.0
    nsteps = nRanks - 1
    t = {}
    base = {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
    treeNet = {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}
    for p in ("LL", "LL128", "Simple"):
        busBw = nCh * bw                                   # nNodes > 2: bwInter
        if p == "LL":
            busBw = min(20.4, busBw * .5)
        if p == "LL128":
            busBw = min(busBw * 0.92, nCh * 36.7)
        busBw *= nRanks / nsteps
        # every step crosses nodes: nInterSteps = nNodes - 1 = nsteps
        lat = base[p] + nsteps * treeNet[p]
        t[("Ring", p)] = lat + n_bytes / (1000 * busBw)
    busBw = nCh * bw * .75                                 # PAT: no algbw ratio for AG/RS
    lat = 8.0 + 4 * (14.0 / 3.5) + nRanks * 2.8            # log2i(16) = 4, hwLat[NET][TREE][Simple]
    t[("PAT", "Simple")] = lat + n_bytes / (1000 * busBw)
    return min(t, key=lambda k: t[k])


@pytest.mark.parametrize("n_bytes", [64, 65536, 1 << 20, 8 << 20, 64 << 20, 1 << 30])
def test_pat_and_ring_with_one_gpu_per_node_match_the_oracle(n_bytes):
    topo = comm_topology(16, 16, 8, 400.0, 3600.0, 90)
    c = choose_collective(topo, "AllGather", n_bytes)
    assert (c.algorithm, c.protocol) == _oracle_hopper_16x1_allgather(n_bytes)
