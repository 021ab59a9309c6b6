"""The building blocks of the fast flat build: the shift properties its transfer cache rests on
(by whole nodes; by a local index shared by the group, only where a rank's NIC is a translation
of it), checked against :func:`tokenpcap.collectives.transfers.transfers` itself for every
algorithm and collective, and the instruction encoding."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.p2p_chunks import P2pNet
from tokenpcap.collectives.traffic import CallShape
from tokenpcap.collectives.transfers import transfers
from tokenpcap.schedule.flatbuild import (
    CALL,
    COMPUTE,
    MARK,
    MARK_CODES,
    WAIT,
    canonical_shape,
    encode_program,
    nic_shift,
)
from tokenpcap.schedule.program import Call, CallMode, Compute, Mark, Wait

GPN, NPN, NODES = 4, 2, 6
LAYOUT = RankLayout(dp=GPN * NODES, tp=1, pp=1, gpus_per_node=GPN, nics_per_node=NPN)


@st.composite
def shapes(draw):
    coll = draw(st.sampled_from(["AllReduce", "AllGather", "ReduceScatter", "AllToAll",
                                 "Broadcast", "SendRecv"]))
    n = 2 if coll == "SendRecv" else draw(st.integers(2, 8))
    # a group inside the first NODES - 2 nodes, then moved up by 1 or 2 whole nodes
    group = tuple(draw(st.permutations(range(GPN * (NODES - 2))))[:n])
    return coll, group, draw(st.integers(1, 3)), draw(st.sampled_from(selectable_algorithms()))


@settings(max_examples=60, deadline=None)
@given(shapes(), st.integers(1, 4), st.integers(1, 2))
def test_a_group_moved_by_whole_nodes_has_the_moved_transfers(shape, chunks, nodes_up):
    coll, group, elems, alg = shape
    e = 2
    size = chunks * 3 * len(group) * elems * e + e * (chunks % 2)
    moved = tuple(r + nodes_up * GPN for r in group)
    key, shift = canonical_shape(coll, moved, size, e, GPN, NPN)
    assert shift % GPN == 0 and min(key[1]) < GPN and key[1] == tuple(r - shift for r in moved)
    a = transfers(CallShape(*key), alg, LAYOUT, 3, 5 * e)
    b = transfers(CallShape(coll, moved, size, e), alg, LAYOUT, 3, 5 * e)
    ta, tb = a.table, b.table
    up = shift // GPN * NPN
    for f in ta.dtype.names:
        want = ta[f]
        if f in ("src", "dst"):
            want = want + shift
        elif f in ("src_nic", "dst_nic"):
            want = np.where(want >= 0, want + up, -1)
        assert np.array_equal(want, tb[f]), f
    assert a.deps == b.deps and a.dependents == b.dependents
    assert {r + shift: v for r, v in a.by_src.items()} == b.by_src
    assert {r + shift: v for r, v in a.by_dst.items()} == b.by_dst


def test_a_group_already_on_node_0_is_its_own_canonical_shape():
    key, shift = canonical_shape("AllReduce", (3, 1, 6), 64, 2, GPN, NPN)
    assert shift == 0 and key == ("AllReduce", (3, 1, 6), 64, 2)


@st.composite
def layouts_and_groups(draw):
    """A node size, NICs per node (equal to it, half, or twice), and a group either of one
    local index on distinct nodes (the data-parallel groups of one TP rank) or of any ranks
    (local indices mixed, several on a node), on 6 nodes."""
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    npn = draw(st.sampled_from(sorted({gpn, max(1, gpn // 2), 2 * gpn})))
    nodes = 6
    coll = draw(st.sampled_from(["AllReduce", "AllGather", "ReduceScatter", "AllToAll",
                                 "Broadcast", "SendRecv"]))
    n = 2 if coll == "SendRecv" else draw(st.integers(2, 6))
    if draw(st.booleans()):
        local = draw(st.integers(0, gpn - 1))
        group = tuple(nd * gpn + local for nd in draw(st.permutations(range(nodes)))[:n])
    else:
        group = tuple(draw(st.permutations(range(gpn * nodes)))[:n])
    return gpn, npn, nodes, coll, group


@settings(max_examples=120, deadline=None)
@given(layouts_and_groups(), st.sampled_from(selectable_algorithms()), st.integers(1, 4),
       st.booleans())
def test_the_canonical_shape_moved_by_its_shift_is_the_groups_own_transfers(lg, alg, chunks, p2p):
    """Every column of every transfer of a group equals its canonical shape's moved by the shift
    (ranks and PXN proxies by ``shift``, NICs by ``nic_shift``), the dependencies and the send
    and receive lists equal; and the local part of the shift is taken exactly when every rank
    has one local index and ``nics_per_node == gpus_per_node``."""
    gpn, npn, nodes, coll, group = lg
    lay = RankLayout(dp=gpn * nodes, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=npn)
    e = 2
    size = chunks * 3 * len(group) * e + e * (chunks % 2)
    key, shift = canonical_shape(coll, group, size, e, gpn, npn)
    locals_ = {r % gpn for r in group}
    local_rule = npn == gpn and len(locals_) == 1
    assert shift % gpn == (group[0] % gpn if local_rule else 0)
    assert key[1] == tuple(r - shift for r in group) and min(key[1]) < gpn
    if local_rule:
        assert {r % gpn for r in key[1]} == {0}
    net = P2pNet() if p2p else None
    window = 8 if p2p else 0
    a = transfers(CallShape(*key), alg, lay, 3, 5 * e, p2p=net, window=window)
    b = transfers(CallShape(coll, group, size, e), alg, lay, 3, 5 * e, p2p=net, window=window)
    ta, tb = a.table, b.table
    up = nic_shift(shift, gpn, npn)
    for f in ta.dtype.names:
        want = ta[f]
        if f in ("src", "dst"):
            want = want + shift
        elif f == "via":
            want = np.where(want >= 0, want + shift, -1)
        elif f in ("src_nic", "dst_nic"):
            want = np.where(want >= 0, want + up, -1)
        assert np.array_equal(want, tb[f]), f
    # the NICs are the layout's own: a rank's NIC moved by the shift is the moved rank's NIC
    assert np.array_equal(lay.nic_array(np.asarray(key[1])) + up, lay.nic_array(np.asarray(group)))
    assert a.deps == b.deps and a.dependents == b.dependents
    assert {r + shift: v for r, v in a.by_src.items()} == b.by_src
    assert {r + shift: v for r, v in a.by_dst.items()} == b.by_dst


def test_a_group_of_one_local_index_moves_to_local_0_only_where_nics_translate():
    """Ranks 5, 13, 21 (local index 5 of nodes 0-2 of 8 GPUs): with 8 NICs per node one shape
    with ranks 0, 8, 16 and shift 5; with 4 NICs per node (two GPUs a NIC) the group is its own
    shape; a group mixing local indices 5 and 6 too."""
    assert canonical_shape("AllReduce", (13, 5, 21), 64, 2, 8, 8) == \
        (("AllReduce", (8, 0, 16), 64, 2), 5)
    assert canonical_shape("AllReduce", (13, 5, 21), 64, 2, 8, 4) == \
        (("AllReduce", (13, 5, 21), 64, 2), 0)
    assert canonical_shape("AllReduce", (13, 6, 21), 64, 2, 8, 8) == \
        (("AllReduce", (13, 6, 21), 64, 2), 0)
    assert canonical_shape("AllReduce", (37, 29), 64, 2, 8, 8) == (("AllReduce", (8, 0), 64, 2), 29)
    assert nic_shift(29, 8, 8) == 29 and nic_shift(24, 8, 4) == 12


def test_encoding_of_each_instruction():
    prog = [Mark(True, "B", 3, 0), Compute(17), Call(42, CallMode.RECV), Wait(), Mark(False, "O", -1, 0),
            Compute(5 * 2**31 + 3)]
    kind, a, b = encode_program(prog, {42: 9}.__getitem__)
    assert kind == [MARK, COMPUTE, CALL, WAIT, MARK, COMPUTE]
    assert a == [3, 17, 9, 0, -1, 3]             # a COMPUTE's ns: a + b * 2**31 (int32 halves)
    assert b == [MARK_CODES.index(b"B") * 2 + 1, 0, int(CallMode.RECV), 0, MARK_CODES.index(b"O") * 2,
                 5]


def test_joined_shape_tables_hold_each_table_moved():
    """The engine joins the iterations' shape tables: shape ``s`` of table ``i`` is shape
    ``first[i] + s`` of the join, with the same rows, positions and lists (lists moved by the
    rows before it)."""
    from tests.schedule.test_flat import _inputs
    from tokenpcap.schedule.flat import flatten
    from tokenpcap.schedule.flatbuild import ROW_FIELDS, ShapeTable

    plan, shards, times, nvl = _inputs("dante", 1)
    tables = [flatten(plan, it, shards, times, nvl, above).shapes for it, above in ((0, 2_000_000), (1, 0))]
    joined, first = ShapeTable.join(tables)
    assert joined.ab.size == sum(t.ab.size for t in tables)
    for i, t in enumerate(tables):
        for s in range(t.ab.size):
            j = int(first[i]) + s
            a, b = slice(t.tr_ptr[s], t.tr_ptr[s + 1]), slice(joined.tr_ptr[j], joined.tr_ptr[j + 1])
            for f in ROW_FIELDS:
                assert np.array_equal(getattr(t, f)[a], getattr(joined, f)[b]), f
            moved = joined.tr_ptr[j] - t.tr_ptr[s]
            for r0, r1 in zip(range(a.start, a.stop), range(b.start, b.stop)):
                assert np.array_equal(t.dep_list[t.dep_ptr[r0]:t.dep_ptr[r0 + 1]] + moved,
                                      joined.dep_list[joined.dep_ptr[r1]:joined.dep_ptr[r1 + 1]])
            pa, pb = range(t.pos_ptr[s], t.pos_ptr[s + 1]), range(joined.pos_ptr[j], joined.pos_ptr[j + 1])
            assert np.array_equal(t.rank[pa.start:pa.stop], joined.rank[pb.start:pb.stop])
            for k in ("send", "recv"):
                ptr, lst = getattr(t, f"{k}_ptr"), getattr(t, f"{k}_list")
                jptr, jlst = getattr(joined, f"{k}_ptr"), getattr(joined, f"{k}_list")
                for q0, q1 in zip(pa, pb):
                    assert np.array_equal(lst[ptr[q0]:ptr[q0 + 1]] + moved, jlst[jptr[q1]:jptr[q1 + 1]])
    assert ShapeTable.join(tables[:1])[0] is tables[0]


def test_iterations_of_one_run_share_their_shape_table_and_the_join_holds_it_once():
    """The iterations of a run have the same canonical shapes: flatten with a shared ``tables``
    dict gives every iteration the first one's table object (and still the arrays of the
    straightforward build), and the join keeps one copy of it (every iteration's calls point into it), while a table
    of another NVLink timing is joined after it."""
    from tests.schedule.test_flat import _assert_same, _inputs
    from tokenpcap.schedule.flat import flatten
    from tokenpcap.schedule.flatbuild import ShapeTable

    plan, shards, times, nvl = _inputs("dante", 1)
    shared: dict = {}
    flats = [flatten(plan, it, shards, times, nvl, 2_000_000, tables=shared) for it in range(3)]
    assert flats[1].shapes is flats[0].shapes and flats[2].shapes is flats[0].shapes
    for it in (1, 2):
        _assert_same(flats[it], flatten(plan, it, shards, times, nvl, 2_000_000, direct=True))
    joined, first = ShapeTable.join([f.shapes for f in flats])
    assert joined is flats[0].shapes and first.tolist() == [0, 0, 0]
    other = flatten(plan, 0, shards, times, nvl, 0, tables=shared).shapes    # NVLink as a whole
    assert other is not flats[0].shapes
    joined, first = ShapeTable.join([flats[0].shapes, other, flats[1].shapes])
    n = flats[0].shapes.ab.size
    assert first.tolist() == [0, n, 0] and joined.ab.size == n + other.ab.size
