"""Per-algorithm bytes: published ring numbers, nccl-tests factors, closed-form totals, and a
simulation that checks the hop tables really reduce / gather every chunk."""
from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.traffic import (
    btree_parents,
    bus_bandwidth_factor,
    hops,
    per_rank_bytes,
    ring_chunk_bytes,
    total_traffic_bytes,
)

GiB, MiB = 1 << 30, 1 << 20


def call(collective: str, group, size: int, elem: int = 2):
    return SimpleNamespace(collective=collective, group=tuple(group), message_bytes=size,
                           elem_bytes=elem)


def test_ring_allreduce_of_1gib_over_8_ranks():
    # Ring AllReduce (NCCL's ring: ReduceScatter then AllGather, 2(N-1) steps of S/N; Patarasuk
    # and Yuan 2009): 14 steps of 128 MiB, 1,879,048,192 bytes sent per rank.
    lay = RankLayout(dp=8, tp=1, pp=1, gpus_per_node=8, nics_per_node=8)
    c = call("AllReduce", range(8), GiB)
    h = hops(c, "ring", lay)
    assert sorted(set(h["step"].tolist())) == list(range(14))
    assert set(h["bytes"].tolist()) == {128 * MiB}
    rb = per_rank_bytes(c, "ring", lay)
    assert rb.nvlink_bytes.tolist() == [1_879_048_192] * 8 and not rb.nic_bytes.any()


def test_nccl_tests_bus_bandwidth_factors():
    # nccl-tests doc/PERFORMANCE.md.
    assert bus_bandwidth_factor("AllReduce", 8) == Fraction(14, 8)
    for coll in ("AllGather", "ReduceScatter", "AllToAll"):
        assert bus_bandwidth_factor(coll, 8) == Fraction(7, 8)
    assert bus_bandwidth_factor("SendRecv", 2) == 1


def test_ring_chunks():
    assert ring_chunk_bytes(10, 3, 2).tolist() == [4, 4, 2]
    assert ring_chunk_bytes(11, 3, 2).tolist() == [4, 4, 3]
    assert ring_chunk_bytes(0, 4, 4).tolist() == [0, 0, 0, 0]
    with pytest.raises(InputError):
        ring_chunk_bytes(10, 0, 2)


@given(st.integers(0, 10**9), st.integers(1, 64), st.sampled_from([1, 2, 4]))
def test_ring_chunks_sum_to_s_in_whole_elements(s: int, n: int, e: int):
    c = ring_chunk_bytes(s, n, e)
    assert int(c.sum()) == s and len(c) == n
    assert all(x % e == 0 for x in c[:-1]) and c.max() - c[:-1].min(initial=c.max()) <= e + s % e


def test_nccl_btree_picture():
    # NCCL src/graph/trees.cc comment: the tree of 14 ranks (0 root, 8 its child, 4 and 12 under 8,
    # 2/6 under 4, 10/13 under 12, leaves 1,3 | 5,7 | 9,11).
    par = btree_parents(14).tolist()
    assert par == [-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12]


@pytest.mark.parametrize("n", range(1, 20))
@pytest.mark.parametrize("tree", [0, 1])
def test_btrees_are_trees(n: int, tree: int):
    par = btree_parents(n, tree)
    assert (par < 0).sum() == 1
    for r in range(n):
        seen, x = set(), r
        while par[x] >= 0:
            assert x not in seen
            seen.add(x)
            x = int(par[x])
        assert len(seen) < n


def test_hierarchical_splits_nvlink_and_nic():
    # 16 ranks on 4 nodes of 4: intra RS + AG on NVLink ((k-1)/k S each), inter-node AllReduce of
    # S/k over 4 nodes on the NIC (2 (M-1)/M S/k).
    lay = RankLayout(dp=16, tp=1, pp=1, gpus_per_node=4, nics_per_node=4)
    s = 4 * 4 * 2 * 1000
    rb = per_rank_bytes(call("AllReduce", range(16), s), "hierarchical", lay)
    assert rb.nvlink_bytes.tolist() == [2 * 3 * s // 4] * 16
    assert rb.nic_bytes.tolist() == [2 * 3 * (s // 4) // 4] * 16


def test_p2p_and_direct_alltoall():
    lay = RankLayout(dp=4, tp=1, pp=1, gpus_per_node=2, nics_per_node=2)
    rb = per_rank_bytes(call("SendRecv", (1, 2), 1000), "ring", lay)
    assert rb.nic_bytes.tolist() == [1000, 0] and rb.nvlink_bytes.tolist() == [0, 0]
    rb = per_rank_bytes(call("AllToAll", range(4), 4000, 4), "tree", lay)
    assert rb.nic_bytes.tolist() == [2000] * 4 and rb.nvlink_bytes.tolist() == [1000] * 4
    with pytest.raises(InputError):
        hops(call("SendRecv", (1, 2, 3), 10), "ring", lay)
    with pytest.raises(InputError):
        hops(call("AllReduce", (1, 2), 10), "butterfly", lay)


def simulate(h: np.ndarray, group, start: dict[int, list[int]]) -> dict[int, list[int]]:
    """Run hops step by step: the receiver ORs the sender's contribution set into its chunk."""
    state = {r: list(v) for r, v in start.items()}
    for step in sorted(set(h["step"].tolist())):
        snap = {r: list(v) for r, v in state.items()}
        for hop in h[h["step"] == step]:
            state[int(hop["dst"])][int(hop["chunk"])] |= snap[int(hop["src"])][int(hop["chunk"])]
    return state


@given(st.integers(2, 12), st.integers(1, 10**7))
def test_ring_hops_really_reduce_and_gather(n: int, size: int):
    lay = RankLayout(dp=n, tp=1, pp=1, gpus_per_node=1, nics_per_node=1)
    g = tuple(range(n))
    full = (1 << n) - 1
    own = {r: [1 << r] * n for r in g}
    ar = simulate(hops(call("AllReduce", g, size), "ring", lay), g, own)
    assert all(v == [full] * n for v in ar.values())
    rs = simulate(hops(call("ReduceScatter", g, size), "ring", lay), g, own)
    assert all(rs[r][r] == full for r in g)          # rank i owns the reduction of chunk i
    only = {r: [(1 << r) if c == r else 0 for c in range(n)] for r in g}
    ag = simulate(hops(call("AllGather", g, size), "ring", lay), g, only)
    assert all(ag[r][c] == 1 << c for r in g for c in range(n))


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "SendRecv",
                     "Broadcast"]),
    st.sampled_from(selectable_algorithms()),
    st.sampled_from([1, 2, 4, 8]), st.integers(1, 8), st.integers(0, 10**8),
    st.sampled_from([1, 2, 4]), st.data(),
)
def test_per_rank_bytes_sum_to_the_collective_total(coll, alg, gpn, nodes, size, e, data):
    """Hypothesis: per-rank bytes summed over a group equal the collective's total."""
    nodes = max(nodes, 2 // gpn)
    lay = RankLayout(dp=gpn * nodes, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=gpn)
    ranks = data.draw(st.lists(st.integers(0, lay.world_size - 1), min_size=2, unique=True,
                               max_size=2 if coll == "SendRecv" else 64))
    group = tuple(ranks) if coll == "SendRecv" else tuple(sorted(ranks))
    c = call(coll, group, size, e)
    rb = per_rank_bytes(c, alg, lay)
    assert int(rb.nic_bytes.sum() + rb.nvlink_bytes.sum()) == \
        total_traffic_bytes(coll, alg, size, group, lay)
    h = hops(c, alg, lay)
    assert (h["src"] != h["dst"]).all()
    cross = (h["src"] // gpn) != (h["dst"] // gpn)
    assert int(rb.nic_bytes.sum()) == int(h["bytes"][cross].sum())
    n = len(group)
    if alg == "ring" and coll == "AllReduce" and size % (n * e) == 0:
        per = rb.nic_bytes + rb.nvlink_bytes
        assert per.tolist() == [2 * (n - 1) * size // n] * n
    if coll in ("ReduceScatter", "AllGather", "AllToAll") and size % (n * e) == 0:
        assert (rb.nic_bytes + rb.nvlink_bytes).tolist() == [(n - 1) * size // n] * n


def test_the_registry_is_what_scenarios_may_choose_and_what_runs():
    """Every registered algorithm runs the collectives it names with the closed form it states
    (the hops' bytes add up to it), and a scenario may choose exactly the non-exclusive ones (the
    profile check reads the registry); SendRecv is always p2p, AllToAll always direct."""
    from tokenpcap.collectives.algorithms import ALGORITHMS, effective_algorithm
    from tokenpcap.config import scenario_spec
    from tokenpcap.errors import ProfileError

    assert selectable_algorithms() == ("ring", "tree", "hierarchical")
    check = scenario_spec.COLLECTIVES_SPEC["algorithm"][0]
    assert [check(None, "collectives.algorithm", a) for a in selectable_algorithms()] == \
        list(selectable_algorithms())
    with pytest.raises(ProfileError, match="one of 'ring', 'tree', 'hierarchical'"):
        check(None, "collectives.algorithm", "direct")
    lay = RankLayout(dp=16, tp=1, pp=1, gpus_per_node=8, nics_per_node=8)
    for name, alg in ALGORITHMS.items():
        for coll in sorted(alg.runs):
            chosen = selectable_algorithms() if alg.exclusive else (name,)
            assert {effective_algorithm(coll, c) for c in chosen} == {name}
            group = (0, 1) if coll == "SendRecv" else tuple(range(16))
            h = alg.hops(coll, group, 1 << 20, 2, lay)
            assert int(h["bytes"].sum()) == alg.total_bytes(coll, group, 1 << 20, lay), (name, coll)
    assert effective_algorithm("AllGather", "tree") == "ring"
