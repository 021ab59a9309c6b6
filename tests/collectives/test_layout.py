"""Rank layout against Megatron-LM's published example; properties of coordinates and NICs."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.collectives.layout import RankLayout


def test_megatron_docstring_example():
    # Megatron-LM megatron/core/parallel_state.py, initialize_model_parallel docstring:
    # 16 GPUs, tensor 2, pipeline 4.
    lay = RankLayout(dp=2, tp=2, pp=4, gpus_per_node=8, nics_per_node=8)
    assert lay.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14),
                                (13, 15)]
    assert lay.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13),
                                (14, 15)]
    assert lay.groups("pp") == [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)]
    # Megatron's embedding group: first and last rank of each pipeline group.
    assert lay.groups("emb") == [(0, 12), (1, 13), (2, 14), (3, 15)]
    assert lay.coords(13) == (3, 0, 1, 0)
    assert (lay.node(12), lay.local_gpu(12), lay.nic(12)) == (1, 4, 12)


def _megatron_rank_groups(sizes: dict[str, int], order: str, members: str) -> list[tuple]:
    """Megatron-core ``RankGenerator.get_ranks`` as its docstring describes it, written out
    independently of RankLayout: ranks enumerate the dimensions of ``order`` with the first one
    varying fastest; a group holds the ranks that differ only in the ``members`` dimensions."""
    names = order.split("-")
    world = 1
    for n in names:
        world *= sizes[n]
    groups: dict[tuple, list[int]] = {}
    for r in range(world):
        idx, x = {}, r
        for n in names:
            idx[n], x = x % sizes[n], x // sizes[n]
        key = tuple(idx[n] for n in names if n not in members.split("-"))
        groups.setdefault(key, []).append(r)
    return sorted(tuple(g) for g in groups.values())


def test_context_parallel_groups_in_megatron_order():
    # RankGenerator(tp=2, cp=2, dp=2, pp=2, order="tp-cp-ep-dp-pp"), 16 GPUs, worked by hand:
    # rank = ((pp * dp + dp_i) * cp + cp_i) * tp + tp_i.
    lay = RankLayout(dp=2, tp=2, pp=2, cp=2, gpus_per_node=8, nics_per_node=8)
    assert lay.world_size == 16 and lay.dpcp == 4
    assert lay.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13),
                                (14, 15)]
    assert lay.groups("cp") == [(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14),
                                (13, 15)]
    # get_data_parallel_group(with_context_parallel=True): the 'dp-cp' ranks
    assert lay.groups("dp") == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    assert lay.groups("pp") == [(0, 8), (1, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14),
                                (7, 15)]
    assert lay.groups("mp") == [(0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15)]
    assert lay.coords(13) == (1, 1, 1, 0) and lay.rank(1, 1, 1, 0) == 13
    assert lay.coords(6) == (0, 1, 0, 1)
    assert lay.stage_groups("cp", 1) == [(8, 10), (9, 11), (12, 14), (13, 15)]
    assert lay.stage_groups("tp", 0) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    sizes = {"tp": 2, "cp": 2, "dp": 2, "pp": 2}
    for dim, members in (("tp", "tp"), ("cp", "cp"), ("dp", "cp-dp"), ("pp", "pp"),
                         ("mp", "tp-pp")):
        assert lay.groups(dim) == _megatron_rank_groups(sizes, "tp-cp-dp-pp", members), dim


@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3), st.integers(1, 4))
def test_context_parallel_layout_matches_rank_generator(dp: int, tp: int, pp: int, cp: int):
    lay = RankLayout(dp=dp, tp=tp, pp=pp, cp=cp, gpus_per_node=1, nics_per_node=1)
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    for dim, members in (("tp", "tp"), ("cp", "cp"), ("dp", "cp-dp"), ("pp", "pp")):
        assert lay.groups(dim) == _megatron_rank_groups(sizes, "tp-cp-dp-pp", members), dim
    for r in range(lay.world_size):
        c = lay.coords(r)
        assert lay.rank(*c) == r


def test_expert_groups_with_context_parallelism():
    # The expert RankGenerator (order tp-ep-dp-pp, cp 1) spans the dp-cp ranks: with tp 1,
    # cp 2, dp 2, ep 2 the EP groups are [0, 1], [2, 3] and the expert-DP groups [0, 2], [1, 3].
    lay = RankLayout(dp=2, tp=1, pp=1, cp=2, ep=2, gpus_per_node=4, nics_per_node=4)
    assert lay.groups("ep") == [(0, 1), (2, 3)]
    assert lay.groups("edp") == [(0, 2), (1, 3)]
    assert lay.groups("ep") == _megatron_rank_groups({"tp": 1, "ep": 2, "dp": 2, "pp": 1},
                                                     "tp-ep-dp-pp", "ep")


def test_nic_mapping_with_fewer_nics_than_gpus():
    # 8 GPUs sharing 4 NICs: local GPU g uses local NIC g * 4 // 8.
    lay = RankLayout(dp=16, tp=1, pp=1, gpus_per_node=8, nics_per_node=4)
    assert [lay.nic(r) for r in range(16)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]


def test_intra_node_summary_of_the_dante_layout():
    lay = RankLayout(dp=4, tp=4, pp=2, gpus_per_node=8, nics_per_node=8)
    summ = lay.intra_node_summary()
    assert summ["tp"]["intra_node"] and not summ["dp"]["intra_node"]
    assert not summ["pp"]["intra_node"] and summ["dp"]["size"] == 4


def test_expert_groups_are_carved_out_of_dp():
    # Megatron-core order tp-ep-dp-pp for experts: EP varies fastest inside DP.
    lay = RankLayout(dp=8, tp=2, pp=1, gpus_per_node=8, nics_per_node=8, ep=4)
    assert lay.groups("ep")[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert lay.groups("edp")[:2] == [(0, 8), (1, 9)]
    for g in lay.groups("ep") + lay.groups("edp"):
        assert len({lay.coords(r).pp for r in g}) == 1 and len({lay.coords(r).tp for r in g}) == 1


def test_bad_arguments():
    with pytest.raises(InputError):
        RankLayout(dp=6, tp=1, pp=1, gpus_per_node=8, nics_per_node=8, ep=4)
    lay = RankLayout(dp=2, tp=2, pp=2, gpus_per_node=8, nics_per_node=8)
    with pytest.raises(InputError):
        lay.coords(8)
    with pytest.raises(InputError):
        lay.rank(0, 2, 0)
    with pytest.raises(InputError):
        lay.groups("sp")
    with pytest.raises(InputError):
        lay.rank(0, 0, 0, 1)
    with pytest.raises(InputError):
        RankLayout(dp=3, tp=1, pp=1, gpus_per_node=6, nics_per_node=6, ep=2, cp=1)


@given(st.integers(1, 8), st.integers(1, 8), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]))
def test_coordinates_round_trip_and_groups_partition(dp: int, tp: int, pp: int, gpn: int):
    if (dp * tp * pp) % gpn:
        gpn = 1
    lay = RankLayout(dp=dp, tp=tp, pp=pp, gpus_per_node=gpn, nics_per_node=gpn)
    world = set(range(lay.world_size))
    for r in world:
        c = lay.coords(r)
        assert lay.rank(*c) == r
        assert lay.rank(c.pp, c.dp, c.tp) == (c.pp * dp + c.dp) * tp + c.tp
        assert lay.node(r) == r // gpn
    for dim, size in (("tp", tp), ("dp", dp), ("pp", pp)):
        groups = lay.groups(dim)
        assert sorted(x for g in groups for x in g) == sorted(world)
        assert all(len(g) == size and list(g) == sorted(g) for g in groups)
