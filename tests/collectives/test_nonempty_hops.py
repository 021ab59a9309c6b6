"""The hops that carry bytes, made without the empty ones (``nonempty_hops``), against the whole
hop table filtered; and every sum and transfer made from them against the same made from the
whole table (the two constructions side by side).

A ring deals ``S`` into ``N`` chunks (Patarasuk & Yuan 2009), so a message of fewer elements than
ranks leaves chunks empty: the 4-byte gradient-norm AllReduce over every rank of a ZeRO job moves
one element around the ring, ``2 (N - 1)`` hops with data among ``2 N (N - 1)``.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.collectives import rails, traffic, transfers as transfers_mod
from tokenpcap.collectives.algorithms import ALGORITHMS
from tokenpcap.collectives.algorithms.ring import Ring, ring_hops, ring_nonempty_hops
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.traffic import CallShape, hops, nonempty_hops
from tokenpcap.plan import wirebytes

RING_COLLECTIVES = ("AllReduce", "ReduceScatter", "AllGather", "Broadcast")


def clear_caches() -> None:
    """Forget every cached hop table, sum and transfer table (so the next call makes them)."""
    for f in (traffic._hops_cached, traffic._nonempty_cached, traffic._per_rank_cached,
              traffic._nic_sizes_cached, rails._rank_nic_cached, wirebytes._cached,
              wirebytes._p2p_cached, transfers_mod._transfers_cached):
        f.cache_clear()


@settings(max_examples=200, deadline=None)
@given(coll=st.sampled_from(RING_COLLECTIVES), n=st.integers(1, 40),
       elems=st.integers(0, 90), e=st.sampled_from([1, 2, 4]), tail=st.integers(0, 3))
def test_ring_nonempty_hops_are_the_whole_tables_rows_with_bytes(coll, n, elems, e, tail):
    group = tuple(range(100, 100 + 3 * n, 3))          # not 0..n-1: ranks are not positions
    s = elems * e + (tail % e)
    whole = ring_hops(coll, group, s, e)
    rows = np.flatnonzero(whole["bytes"] > 0)
    got = ring_nonempty_hops(coll, group, s, e)
    if got is None:          # every chunk holds data (or a Broadcast, a lone rank): no saving
        assert rows.size == len(whole) or coll == "Broadcast" or n == 1
        return
    table, index = got
    assert np.array_equal(index, rows)
    assert table.tobytes() == whole[rows].tobytes()


def test_a_4_byte_allreduce_over_16384_ranks_is_32766_hops():
    # one fp32 element: it goes once around the ring reduced (N - 1 hops) and once gathered
    group = tuple(range(16384))
    table, index = ring_nonempty_hops("AllReduce", group, 4, 4)
    assert len(table) == 2 * (16384 - 1)
    assert (table["bytes"] == 4).all() and (table["chunk"] == 0).all()
    assert index.max() < 2 * (16384 - 1) * 16384             # rows of the 536,838,144


LAYOUT = RankLayout(dp=32, tp=1, pp=1, gpus_per_node=4, nics_per_node=4)


def shapes():
    """Ring calls of few elements on groups that cross nodes, in ring order or shuffled."""
    return st.builds(
        lambda coll, ranks, elems, e: CallShape(coll, tuple(ranks), elems * e, e),
        st.sampled_from(("AllReduce", "ReduceScatter", "AllGather")),
        st.permutations(range(32)).map(lambda p: p[: max(2, p[0] % 32)]),
        st.integers(1, 40), st.sampled_from([2, 4]))


@settings(max_examples=40, deadline=None)
@given(call=shapes(), channels=st.sampled_from([1, 2, 4]),
       protocol=st.sampled_from(["Simple", "LL", "LL128"]))
def test_sums_and_transfers_equal_those_of_the_whole_table(call, channels, protocol):
    def made() -> tuple:
        t = transfers_mod.transfers(call, "ring", LAYOUT, channels, 1 << 12, protocol, window=8)
        return (traffic.per_rank_bytes(call, "ring", LAYOUT),
                traffic.nic_hop_sizes(call, "ring", LAYOUT),
                rails.rank_nic_bytes(call, "ring", LAYOUT, channels),
                wirebytes.protocol_wire_bytes(call, "ring", LAYOUT, channels, 1 << 12, protocol),
                t.table.tobytes(), t.dep_ptr, t.dep_list, t.rev_ptr, t.rev_list, t.src_ptr,
                t.src_list, t.dst_ptr, t.dst_list)

    clear_caches()
    sparse = made()
    clear_caches()
    saved = Ring.nonempty_hops
    Ring.nonempty_hops = lambda self, *a: None          # the whole table, filtered
    try:
        whole = made()
    finally:
        Ring.nonempty_hops = saved
        clear_caches()
    rb_s, sizes_s, rn_s, w_s, *t_s = sparse
    rb_w, sizes_w, rn_w, w_w, *t_w = whole
    assert np.array_equal(rb_s.nic_bytes, rb_w.nic_bytes)
    assert np.array_equal(rb_s.nvlink_bytes, rb_w.nvlink_bytes)
    assert sizes_s == sizes_w
    assert np.array_equal(rn_s, rn_w)
    assert np.array_equal(w_s.nic_bytes, w_w.nic_bytes)
    assert np.array_equal(w_s.nvlink_bytes, w_w.nvlink_bytes)
    assert np.array_equal(w_s.by_nic, w_w.by_nic)
    assert w_s.nic_message_sizes == w_w.nic_message_sizes
    for a, b in zip(t_s, t_w):
        assert (a == b) if isinstance(a, bytes) else np.array_equal(a, b)


def test_transfer_rows_name_their_row_of_the_whole_hop_table():
    # the hop column indexes hops(): the row's src, dst, step and chunk are that hop's
    call = CallShape("AllReduce", tuple(range(0, 32, 3)), 12, 4)
    t = transfers_mod.transfers(call, "ring", LAYOUT, 2, 1 << 20).table
    h = hops(call, "ring", LAYOUT)
    for f in ("src", "dst", "step", "chunk"):
        assert np.array_equal(t[f], h[f][t["hop"]])
    assert (h["bytes"][t["hop"]] > 0).all()


def test_other_algorithms_filter_their_whole_table():
    # a tree makes no table of its own: nonempty_hops is hops() with the empty rows dropped
    assert ALGORITHMS["tree"].nonempty_hops("AllReduce", (0, 4, 8, 12), 4, 4, LAYOUT) is None
    call = CallShape("AllReduce", (0, 4, 8, 12), 4, 4)
    table, index = nonempty_hops(call, "tree", LAYOUT)
    whole = hops(call, "tree", LAYOUT)
    assert np.array_equal(index, np.flatnonzero(whole["bytes"] > 0))
    assert table.tobytes() == whole[index].tobytes()
