"""Stage 4: collective calls → transfers (channels, slices, dependencies, NIC vs NVLink).

Right values come from the algorithms' definitions, not from our code: a ring AllReduce of S bytes
over N ranks sends 2(N-1)/N·S per rank (Patarasuk & Yuan 2009; nccl-tests bus bandwidth factor),
NCCL's default slice is NCCL_BUFFSIZE / NCCL_STEPS · ALLREDUCE_SLICESTEPS = 4 MiB / 8 · 2, and in a
ring rank i receives from i-1 the chunk it forwards at the next step.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.transfers import (slice_elements_bytes, smallest_message_elements,
                                             transfers)
from tokenpcap.plan.calls import scaled_bytes
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.config.profiles import CollectivesConfig
from tokenpcap.collectives.traffic import CallShape as Call
from tokenpcap.collectives.traffic import hops


def layout(gpus_per_node: int, world: int) -> RankLayout:
    return RankLayout(dp=world, tp=1, pp=1, gpus_per_node=gpus_per_node,
                      nics_per_node=gpus_per_node)


def test_nccl_default_slice_is_one_mib():
    # NCCL Simple protocol: NCCL_BUFFSIZE 4 MiB, NCCL_STEPS 8, ALLREDUCE_SLICESTEPS = NCCL_STEPS/4
    nccl_slice = (4 << 20) // 8 * (8 // 4)
    assert CollectivesConfig().slice_bytes == nccl_slice == 1 << 20


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_allreduce_puts_2_n_minus_1_over_n_s_on_each_nic(n):
    s = 64 << 20                                   # divisible into n equal chunks
    tr = transfers(Call("AllReduce", tuple(range(n)), s, 2), "ring", layout(1, n), 2, 1 << 20)
    t = tr.table
    assert t["nic"].all()
    per_rank = np.bincount(t["src"], weights=t["bytes"], minlength=n)
    assert (per_rank == 2 * (n - 1) * s // n).all()
    assert t["bytes"].max() == 1 << 20             # slices of at most 1 MiB
    # N ranks x 2(N-1) steps x 2 channels x (S/N/2) / 1 MiB slices
    assert len(t) == n * 2 * (n - 1) * 2 * (s // n // 2 // (1 << 20))


def test_only_cross_node_hops_reach_a_nic():
    # ring over 4 ranks on 2 nodes of 2: only 1 -> 2 and 3 -> 0 cross nodes
    s = 8 << 20
    tr = transfers(Call("AllReduce", (0, 1, 2, 3), s, 2), "ring", layout(2, 4), 2, 1 << 20)
    t = tr.table
    assert (t["nic"] == (t["src"] // 2 != t["dst"] // 2)).all()
    nic = np.bincount(t["src"][t["nic"]], weights=t["bytes"][t["nic"]], minlength=4)
    assert nic.tolist() == [0, 2 * 3 * s // 4, 0, 2 * 3 * s // 4]
    assert sorted(set(zip(t["src"][t["nic"]].tolist(), t["dst"][t["nic"]].tolist()))) == [(1, 2), (3, 0)]


def test_ring_step_depends_on_the_predecessors_previous_step_same_slice():
    n, s = 4, 16 << 20
    tr = transfers(Call("AllReduce", tuple(range(n)), s, 2), "ring", layout(1, n), 2, 1 << 20)
    t = tr.table
    for x, deps in enumerate(tr.deps):
        if t["step"][x] == 0:
            assert deps == ()
            continue
        assert len(deps) == 1
        d = deps[0]
        assert t["step"][d] == t["step"][x] - 1
        assert t["dst"][d] == t["src"][x] and t["src"][d] == (t["src"][x] - 1) % n
        assert (t["channel"][d], t["slice"][d]) == (t["channel"][x], t["slice"][x])
        assert t["chunk"][d] == t["chunk"][x]           # the same data moves on
        assert t["bytes"][d] == t["bytes"][x]


def test_channels_split_a_hop_into_contiguous_element_aligned_parts():
    tr = transfers(Call("SendRecv", (0, 1), 10 * (1 << 20) + 6, 2), "ring", layout(1, 2), 2, 1 << 20)
    t = tr.table
    assert t["bytes"].sum() == 10 * (1 << 20) + 6
    for ch in (0, 1):
        part = t[t["channel"] == ch]
        assert (part["slice"] == np.arange(len(part))).all()
        assert (part["bytes"][:-1] == 1 << 20).all()
        assert (np.diff(part["byte_offset"]) == part["bytes"][:-1]).all()
    assert t["byte_offset"][t["channel"] == 1][0] == t["bytes"][t["channel"] == 0].sum()
    assert (t["bytes"] % 2 == 0).all()


def test_tree_reduce_waits_for_children_and_broadcast_for_parent():
    lay = layout(1, 8)
    tr = transfers(Call("AllReduce", tuple(range(8)), 1 << 20, 4), "tree", lay, 1, 1 << 20)
    t = tr.table
    for x, deps in enumerate(tr.deps):
        for d in deps:
            assert t["dst"][d] == t["src"][x] and t["chunk"][d] == t["chunk"][x]
        if t["step"][x] == 1 and deps:
            assert all(t["step"][d] in (0, 1) for d in deps)
    # every rank's reduce sends to its parent only after all its children's reduces arrived
    for x in np.flatnonzero(t["step"] == 0):
        kids = {int(y) for y in np.flatnonzero((t["step"] == 0) & (t["dst"] == t["src"][x])
                                                & (t["chunk"] == t["chunk"][x]))}
        assert set(tr.deps[x]) == kids


def test_hierarchical_phase_change_waits_for_the_whole_previous_hop():
    lay = RankLayout(dp=4, tp=4, pp=2, gpus_per_node=8, nics_per_node=8)
    tr = transfers(Call("AllReduce", (0, 4, 8, 12), 40_000_000, 2), "hierarchical", lay, 2, 1 << 20)
    t = tr.table
    inter = np.flatnonzero(t["nic"])
    assert t["bytes"][inter].sum() == 2 * 40_000_000          # 2(M-1)S with M = 2 nodes
    first_inter = inter[t["step"][inter] == t["step"][inter].min()]
    for x in first_inter:
        deps = tr.deps[x]
        assert deps and not any(t["nic"][d] for d in deps)    # the intra-node ReduceScatter
        assert t["bytes"][list(deps)].sum() == 20_000_000     # all of its chunk, every slice


@settings(max_examples=60, deadline=None)
@given(coll=st.sampled_from(["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "Broadcast"]),
       alg=st.sampled_from(selectable_algorithms()),
       n=st.integers(2, 8), per_node=st.sampled_from([1, 2, 4]),
       s=st.integers(0, 4 << 20), e=st.sampled_from([1, 2, 4]),
       channels=st.integers(1, 4), slice_bytes=st.integers(1 << 16, 2 << 20))
def test_transfers_conserve_hop_bytes_and_form_a_dag(coll, alg, n, per_node, s, e, channels,
                                                     slice_bytes):
    world = ((n + per_node - 1) // per_node) * per_node
    lay = layout(per_node, world)
    call = Call(coll, tuple(range(n)), s, e)
    h = hops(call, alg, lay)
    tr = transfers(call, alg, lay, channels, slice_bytes)
    t = tr.table
    per_hop = np.bincount(t["hop"], weights=t["bytes"], minlength=len(h)).astype(np.int64)
    assert (per_hop == h["bytes"]).all()
    assert (t["bytes"] > 0).all()
    cap = slice_elements_bytes(slice_bytes, e)
    assert (t["bytes"] <= cap + e).all()          # + the bytes that do not fill an element
    assert (t["nic"] == (t["src"] // per_node != t["dst"] // per_node)).all()
    # dependencies point at transfers into the sender, and there is no cycle
    for x, deps in enumerate(tr.deps):
        for d in deps:
            assert t["dst"][d] == t["src"][x]
    indeg = [len(d) for d in tr.deps]
    ready = [x for x, k in enumerate(indeg) if k == 0]
    seen = 0
    while ready:
        x = ready.pop()
        seen += 1
        for y in tr.dependents[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    assert seen == len(t)


def test_scaled_bytes_keeps_whole_elements():
    assert scaled_bytes(40_000_000, 2, 1) == 40_000_000
    assert scaled_bytes(40_000_000, 2, 64) == 625_000
    assert scaled_bytes(40_000_002, 4, 64) == 625_000
    assert scaled_bytes(6, 4, 64) == 4                # at least one element
    assert scaled_bytes(0, 4, 64) == 0
    with pytest.raises(InputError):
        scaled_bytes(8, 2, 0)
    with pytest.raises(InputError):
        scaled_bytes(8, 2, 2, 0)


def test_scaled_bytes_stops_at_the_floor_and_never_grows_a_call():
    # 469,762,048 bf16 bytes (DeepSeek-V3's dispatch) / 10^8 = 4 bytes, but 64 peers x 16
    # channels need 1,024 elements: 2,048 bytes
    assert scaled_bytes(469_762_048, 2, 10 ** 8) == 4
    assert scaled_bytes(469_762_048, 2, 10 ** 8, 64 * 16) == 2048
    assert scaled_bytes(469_762_048, 2, 10 ** 4, 64 * 16) == 46_976     # above the floor
    # 128 int64 counts over 256 pieces: fewer than the floor already, kept as they are
    assert scaled_bytes(1024, 8, 10 ** 9, 256) == 1024


def _pieces_with_data(call, alg, lay, channels) -> set[tuple[int, int]]:
    """The (hop, channel) pairs of ``call`` that carry bytes."""
    t = transfers(call, alg, lay, channels, 1 << 20).table
    return set(zip(t["hop"].tolist(), t["channel"].tolist()))


@settings(max_examples=150, deadline=None)
@given(coll=st.sampled_from(["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "Broadcast",
                             "SendRecv"]),
       alg=st.sampled_from(selectable_algorithms()), group=st.permutations(range(12)),
       n=st.integers(1, 12), gpn=st.sampled_from([1, 2, 3, 4, 6]), e=st.sampled_from([1, 2, 4, 8]),
       channels=st.integers(1, 5), more=st.integers(0, 500))
def test_smallest_message_is_exactly_one_element_per_piece(coll, alg, group, n, gpn, e, channels,
                                                          more):
    """With smallest_message_elements elements every (hop, channel) of the call carries data,
    as with any more; with one element fewer some (hop, channel) is empty. Found from the
    transfers themselves, not from the algorithm's pieces."""
    lay = RankLayout(dp=12, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=gpn)
    g = tuple(group[:2 if coll == "SendRecv" else n])
    k = smallest_message_elements(coll, g, alg, lay, channels)
    every = {(i, c) for i in range(len(hops(Call(coll, g, k * e, e), alg, lay)))
             for c in range(channels)}
    assert _pieces_with_data(Call(coll, g, k * e, e), alg, lay, channels) == every
    assert _pieces_with_data(Call(coll, g, (k + more) * e, e), alg, lay, channels) == every
    if not every:
        assert k == 1                                  # nothing to keep: the old floor
    elif k > 1:
        assert _pieces_with_data(Call(coll, g, (k - 1) * e, e), alg, lay, channels) < every


@settings(max_examples=100, deadline=None)
@given(coll=st.sampled_from(["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "Broadcast",
                             "SendRecv"]),
       alg=st.sampled_from(selectable_algorithms()), n=st.integers(2, 12),
       gpn=st.sampled_from([1, 2, 4]), e=st.sampled_from([1, 2, 4, 8]), channels=st.integers(1, 16),
       elems=st.integers(1, 1 << 24), scale=st.integers(1, 10 ** 9))
def test_a_scaled_call_keeps_every_piece_of_the_unscaled_one(coll, alg, n, gpn, e, channels,
                                                             elems, scale):
    """At any scale 1 .. 10^9 the call sends on the same (hop, channel) pairs as unscaled (every
    peer, chunk and channel it had), each no larger."""
    lay = RankLayout(dp=12, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=gpn)
    g = tuple(range(2 if coll == "SendRecv" else n))
    floor = smallest_message_elements(coll, g, alg, lay, channels)
    s0 = elems * e
    s = scaled_bytes(s0, e, scale, floor)
    assert e <= s <= s0 and s % e == 0
    full, small = (transfers(Call(coll, g, b, e), alg, lay, channels, 1 << 20).table
                   for b in (s0, s))
    assert (set(zip(small["hop"].tolist(), small["channel"].tolist()))
            == set(zip(full["hop"].tolist(), full["channel"].tolist())))
    def per_piece(t: np.ndarray) -> np.ndarray:
        return np.bincount(t["hop"] * channels + t["channel"], weights=t["bytes"],
                           minlength=int(t["hop"].max(initial=-1) + 1) * channels)

    assert (per_piece(small) <= per_piece(full)).all()


def test_bad_channels_or_slice_raise():
    with pytest.raises(InputError):
        transfers(Call("AllReduce", (0, 1), 8, 2), "ring", layout(1, 2), 0, 1 << 20)
    with pytest.raises(InputError):
        transfers(Call("AllReduce", (0, 1), 8, 2), "ring", layout(1, 2), 1, 0)


def _row_by_row(collective, group, s, e, algorithm, layout, channels, slice_bytes):
    """The transfers built one row at a time, as the module docstring states the rules: hops in
    step order, each cut into channel parts and slices, a same-size predecessor's slice of the
    same channel, else all of the predecessor's rows; the test oracle of the vectorized build."""
    from tokenpcap.collectives.algorithms import ALGORITHMS
    from tokenpcap.collectives.rails import hop_channel_nics
    from tokenpcap.collectives.traffic import effective_algorithm, ring_chunk_bytes
    h = hops(Call(collective, group, s, e), algorithm, layout)
    alg = ALGORITHMS[effective_algorithm(collective, algorithm)]
    preds = alg.predecessors(h)
    offsets = alg.chunk_offsets(h, collective, group, s, e, layout)
    sl = slice_elements_bytes(slice_bytes, e)
    rows, index, per_hop = [], {}, {}
    for i in sorted(range(len(h)), key=lambda i: (int(h["step"][i]), i)):
        off = int(offsets[i])
        for ch, part in enumerate(ring_chunk_bytes(int(h["bytes"][i]), channels, e).tolist()):
            j = 0
            while part > 0:
                size = min(sl, part)
                index[(i, ch, j)] = len(rows)
                per_hop.setdefault(i, []).append(len(rows))
                src, dst = int(h["src"][i]), int(h["dst"][i])
                rows.append((i, int(h["step"][i]), src, dst, int(h["chunk"][i]), ch, j, size, off,
                             src // layout.gpus_per_node != dst // layout.gpus_per_node))
                off, part, j = off + size, part - size, j + 1
    nics = [hop_channel_nics(collective, algorithm, group, r[2], r[3], r[5], layout) if r[9]
            else (-1, -1) for r in rows]
    deps = []
    for i, _, _, _, _, ch, j, *_ in rows:
        d = []
        for g in preds[i]:
            d += [index[(g, ch, j)]] if h["bytes"][g] == h["bytes"][i] else per_hop.get(g, [])
        deps.append(tuple(d))
    return rows, nics, deps


@settings(max_examples=80, deadline=None)
@given(coll=st.sampled_from(["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "Broadcast",
                             "SendRecv"]),
       alg=st.sampled_from(selectable_algorithms()), group=st.permutations(range(12)),
       n=st.integers(2, 9), elems=st.integers(0, 300), e=st.sampled_from([1, 2, 4]),
       channels=st.integers(1, 4), slice_elems=st.integers(1, 40))
def test_vectorized_transfers_equal_the_row_by_row_rules(coll, alg, group, n, elems, e, channels,
                                                         slice_elems):
    lay = RankLayout(dp=12, tp=1, pp=1, gpus_per_node=4, nics_per_node=2)
    g = tuple(group[:2 if coll == "SendRecv" else n])
    s = elems * e
    tr = transfers(Call(coll, g, s, e), alg, lay, channels, slice_elems * e)
    rows, nics, deps = _row_by_row(coll, g, s, e, alg, lay, channels, slice_elems * e)
    assert tr.rows == tuple(rows) and tr.nics == tuple(nics) and tr.deps == tuple(deps)
    assert [tuple(r)[:12] for r in tr.table.tolist()] == [r + n for r, n in zip(rows, nics)]
    assert (tr.table["via"] == -1).all()          # no PXN without a p2p path
    rev = [[] for _ in rows]
    for t, d in enumerate(deps):
        for x in d:
            rev[x].append(t)
    assert tr.dependents == tuple(tuple(x) for x in rev)
    assert list(tr.by_src) == list(g) == list(tr.by_dst)
    assert all(tr.by_src[r] == tuple(t for t, row in enumerate(rows) if row[2] == r) for r in g)
    assert all(tr.by_dst[r] == tuple(t for t, row in enumerate(rows) if row[3] == r) for r in g)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5), st.integers(0, 5),
                          st.integers(-1, 3)), min_size=0, max_size=40))
def test_default_predecessors_are_the_last_earlier_carriers(rows):
    """The ring rule, hop by hop: a hop from x with chunk c waits for every hop into x with
    chunk c at the largest step below its own (ties in hop order)."""
    from tokenpcap.collectives.algorithms import ALGORITHMS
    from tokenpcap.collectives.hops import hop_table
    step, src, dst, chunk = (list(c) for c in zip(*rows)) if rows else ([], [], [], [])
    h = hop_table(step, src, dst, chunk, [8] * len(rows))
    want = []
    for i in range(len(rows)):
        earlier = [g for g in range(len(rows)) if dst[g] == src[i] and chunk[g] == chunk[i]
                   and step[g] < step[i]]
        best = max((step[g] for g in earlier), default=None)
        want.append([g for g in earlier if step[g] == best])
    assert ALGORITHMS["ring"].predecessors(h) == want
