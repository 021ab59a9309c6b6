"""Building blocks of :func:`tokenpcap.schedule.flat.flatten`: the instruction encoding, the numpy
view of a call shape's transfers, and the two things that make the build cost grow with the
number of distinct shapes and program templates instead of calls × ranks.

* **Call shapes up to a shift by whole nodes.** The transfers of a call depend on its
  collective, its group (ring order), ``message_bytes`` and ``elem_bytes``
  (:func:`tokenpcap.collectives.transfers.transfers`). The algorithms see the ranks only through
  their positions in the group and their nodes (``rank // gpus_per_node``, compared and kept in
  order of appearance: :func:`tokenpcap.collectives.hops.nodes_in_order`), and a rank's NIC is
  ``node · nics_per_node + f(local GPU)`` (:meth:`tokenpcap.collectives.layout.RankLayout.nic_array`).
  Moving every rank of the group by ``k · gpus_per_node`` therefore moves every transfer's ranks
  by the same amount and its NICs by ``k · nics_per_node``, and changes nothing else. So the
  transfers are computed once per *canonical* group (the group moved down so that its lowest
  rank is on node 0, :func:`canonical_shape`) and laid out for every call of that shape with
  numpy arithmetic (:func:`place_transfers`).
* **Program templates.** :func:`tokenpcap.schedule.program.build_programs` reads a rank's calls
  only through their slot keys (phase, microbatch, layer, op, bucket, ...; whether the rank is a
  pipeline send's source) and the rank's coordinates; it never looks at call ids. Two ranks with
  the same coordinates apart from ``dp`` and ``tp`` whose calls, taken in call order, have the
  same attributes apart from the group-specific ones (:data:`GROUP_FIELDS`) therefore get the
  same program up to which call each CALL names: the ``n``-th call of one rank stands where the
  ``n``-th call of the other does. :func:`template_programs` builds one program per such class
  of ranks and fills in every rank's participation ids with one gather.

Both rest on properties of other modules stated above; the tests compare the result with the
straightforward build (:func:`tokenpcap.schedule.flat.flatten` with ``direct=True``) field by field.
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable

import numpy as np

from tokenpcap.collectives.traffic import CallShape
from tokenpcap.collectives.transfers import transfers
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.calltable import CallTable
from tokenpcap.schedule.engine.events import NS_HIGH
from tokenpcap.schedule.program import Call, Compute, Mark, build_programs

__all__ = ["COMPUTE", "CALL", "WAIT", "MARK", "MARK_CODES", "GROUP_FIELDS", "CallShapeArrays",
           "encode_program", "canonical_shape", "place_transfers", "template_programs"]

#: Instruction kinds of ``ins_kind`` (the kernel's ``I_*``).
COMPUTE, CALL, WAIT, MARK = range(4)

#: MARK ``what`` letters in code order (``ins_b // 2``).
MARK_CODES = (b"F", b"B", b"R", b"O")
_MARK = {c.decode(): i for i, c in enumerate(MARK_CODES)}

#: Fields of a :class:`~tokenpcap.plan.calls.CollectiveCall` that differ between the group
#: instances of one call family; every other field may decide where a call stands in a program.
GROUP_FIELDS = ("call_id", "group", "src", "dst", "token_start", "token_end", "seq_start",
                "seq_end")
_PROGRAM_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(CollectiveCall)
                                        if f.name not in GROUP_FIELDS))


def encode_program(prog, part_of: Callable[[int], int]) -> tuple[list[int], list[int], list[int]]:
    """``(kind, a, b)`` lists of one rank's program (``ins_kind``/``ins_a``/``ins_b`` of
    :class:`tokenpcap.schedule.flat.Flat`: a COMPUTE's ns is ``a + b·NS_HIGH``, both in
    ``[0, 2**31)``); ``part_of(call_id)`` gives the participation id a CALL names."""
    kinds: list[int] = []
    a_col: list[int] = []
    b_col: list[int] = []
    for ins in prog:
        if isinstance(ins, Compute):
            kinds.append(COMPUTE)
            b_, a_ = divmod(ins.ns, NS_HIGH)
            a_col.append(a_)
            b_col.append(b_)
        elif isinstance(ins, Call):
            kinds.append(CALL)
            a_col.append(part_of(ins.call_id))
            b_col.append(int(ins.mode))
        elif isinstance(ins, Mark):
            kinds.append(MARK)
            a_col.append(ins.microbatch)
            b_col.append(_MARK[ins.what] * 2 + int(bool(ins.begin)))
        else:
            kinds.append(WAIT)
            a_col.append(0)
            b_col.append(0)
    return kinds, a_col, b_col


class CallShapeArrays:
    """numpy view of one cached :class:`~tokenpcap.collectives.transfers.Transfers` of ``group``.

    Per transfer (int64 ``(n,)`` unless said): ``src``, ``dst`` (global ranks), ``spos``,
    ``dpos`` (their positions in ``group``), ``nic`` (bool), ``snic``, ``dnic`` (NICs, -1 on
    NVLink), ``bytes``, ``step``, ``channel``, ``offset``, ``wait`` (dependencies + 2);
    ``dep_ptr``/``dep_list`` (dependents, CSR over transfers), ``send_ptr``/``send_list`` and
    ``recv_ptr``/``recv_list`` (CSR over the group's positions). ``ab``: the alpha-beta ns of a
    call whose every hop is on NVLink when ``nvlink`` is given (then ``n == 0``), else -1
    (:func:`tokenpcap.schedule.flat.flatten` documents the formula).
    """

    __slots__ = ("n", "src", "dst", "spos", "dpos", "nic", "snic", "dnic", "bytes", "step",
                 "channel", "offset", "wait", "dep_ptr", "dep_list", "pos", "send_ptr",
                 "send_list", "recv_ptr", "recv_list", "group", "ab", "copies")

    def __init__(self, tr, group: tuple[int, ...], nvlink=None):
        t = tr.table
        self.ab = -1
        self.copies = int((~t["nic"]).sum())
        self.group = group
        self.n = len(t)
        g = len(group)
        self.wait = np.diff(tr.dep_ptr) + 2
        self.dep_ptr, self.dep_list = tr.rev_ptr, tr.rev_list
        self.send_ptr, self.send_list = tr.src_ptr, tr.src_list
        self.recv_ptr, self.recv_list = tr.dst_ptr, tr.dst_list
        if nvlink is not None and len(t) and not t["nic"].any():
            # every hop on NVLink: one alpha-beta time for the call, no transfers
            (num, den), latency = nvlink
            sent = np.bincount(t["src"] - min(group), weights=t["bytes"]).max()
            self.ab = -(-int(sent) * 8 * den // num) + latency * len(np.unique(t["step"]))
            t = t[:0]
            self.n = 0
            self.wait = self.dep_list = self.send_list = self.recv_list = np.zeros(0, np.int64)
            self.dep_ptr = np.zeros(1, np.int64)
            self.send_ptr = self.recv_ptr = np.zeros(g + 1, np.int64)
        self.src, self.dst = t["src"].astype(np.int64), t["dst"].astype(np.int64)
        self.nic = t["nic"].astype(np.bool_)
        # the NICs each transfer between nodes leaves and enters on (collectives.rails)
        self.snic, self.dnic = t["src_nic"].astype(np.int64), t["dst_nic"].astype(np.int64)
        self.bytes = t["bytes"].astype(np.int64)
        self.step = t["step"].astype(np.int64)
        self.channel = t["channel"].astype(np.int64)
        self.offset = t["byte_offset"].astype(np.int64)
        self.pos = {r: i for i, r in enumerate(group)}
        sort = np.argsort(np.asarray(group, np.int64), kind="stable")
        at = np.asarray(group, np.int64)[sort]
        self.spos = sort[np.searchsorted(at, self.src)] if self.n else np.zeros(0, np.int64)
        self.dpos = sort[np.searchsorted(at, self.dst)] if self.n else np.zeros(0, np.int64)


def canonical_shape(collective: str, group: tuple[int, ...], message_bytes: int, elem_bytes: int,
                    gpus_per_node: int) -> tuple[tuple, int]:
    """``((collective, canonical group, message_bytes, elem_bytes), shift)``: the group moved
    down by ``shift`` ranks, a multiple of ``gpus_per_node`` that puts its lowest rank on node 0
    (module docstring)."""
    shift = min(group) // gpus_per_node * gpus_per_node
    canon = tuple(r - shift for r in group) if shift else group
    return (collective, canon, message_bytes, elem_bytes), shift


def shape_transfers(key: tuple, plan):
    """The cached transfers of a canonical shape ``key`` (:func:`canonical_shape`) of ``plan``."""
    coll = plan.scenario.collectives
    return transfers(CallShape(*key), plan.algorithm, plan.layout, coll.channels, coll.slice_bytes)


def place_transfers(shapes: list[CallShapeArrays], shape_of: np.ndarray, shift: np.ndarray,
                    tr_base: np.ndarray, part_base: np.ndarray, nics_per_node: int,
                    gpus_per_node: int) -> dict[str, np.ndarray]:
    """Every call's transfers, participations and CSR lists laid out in call order, shape by
    shape.

    Args:
        shapes: the canonical shapes.
        shape_of: int64 ``(C,)`` shape index of each call; ``shift``: int64 ``(C,)`` ranks its
            group lies above its canonical group (a multiple of ``gpus_per_node``).
        tr_base, part_base: int64 ``(C + 1,)`` first transfer / participation of each call.

    Returns the int64 columns ``call src dst srcp dstp bytes step channel offset wait snic dnic``
    ``(T,)``, ``nic`` (bool ``(T,)``), ``part_rank`` ``(P,)``, and the CSR pairs ``dep_ptr``
    ``(T + 1,)``/``dep_list``, ``send_ptr``/``send_list`` and ``recv_ptr``/``recv_list``
    ``(P + 1,)``/..., whose lists hold call-global transfer indices.
    """
    T, P = int(tr_base[-1]), int(part_base[-1])
    names = ("call", "src", "dst", "srcp", "dstp", "bytes", "step", "channel", "offset", "wait",
             "snic", "dnic")
    out = {k: np.zeros(T, np.int64) for k in names}
    out["nic"] = np.zeros(T, np.bool_)
    out["part_rank"] = np.zeros(P, np.int64)
    lens = {k: np.zeros(n, np.int64) for k, n in (("dep", T), ("send", P), ("recv", P))}
    order = np.argsort(shape_of, kind="stable")
    cuts = np.flatnonzero(np.diff(shape_of[order])) + 1
    members = np.split(order, cuts) if order.size else []
    for ca in members:
        sh = shapes[int(shape_of[ca[0]])]
        d = shift[ca][:, None]
        pb = part_base[ca][:, None]
        g = len(sh.group)
        pidx = (pb + np.arange(g)).ravel()
        out["part_rank"][pidx] = (np.asarray(sh.group, np.int64) + d).ravel()
        lens["send"][pidx] = np.tile(np.diff(sh.send_ptr), ca.size)
        lens["recv"][pidx] = np.tile(np.diff(sh.recv_ptr), ca.size)
        if not sh.n:
            continue
        idx = (tr_base[ca][:, None] + np.arange(sh.n)).ravel()
        out["call"][idx] = np.repeat(ca, sh.n)
        out["src"][idx] = (sh.src + d).ravel()
        out["dst"][idx] = (sh.dst + d).ravel()
        out["srcp"][idx] = (sh.spos + pb).ravel()
        out["dstp"][idx] = (sh.dpos + pb).ravel()
        dn = d // gpus_per_node * nics_per_node
        out["snic"][idx] = np.where(sh.snic >= 0, sh.snic + dn, -1).ravel()
        out["dnic"][idx] = np.where(sh.dnic >= 0, sh.dnic + dn, -1).ravel()
        for name, arr in (("bytes", sh.bytes), ("step", sh.step), ("channel", sh.channel),
                          ("offset", sh.offset), ("wait", sh.wait), ("nic", sh.nic)):
            out[name][idx] = np.tile(arr, ca.size)
        lens["dep"][idx] = np.tile(np.diff(sh.dep_ptr), ca.size)
    for k, n in lens.items():
        ptr = np.zeros(n.size + 1, np.int64)
        np.cumsum(n, out=ptr[1:])
        out[f"{k}_ptr"], out[f"{k}_list"] = ptr, np.zeros(int(ptr[-1]), np.int64)
    # a call's list segments are contiguous: the shape's list moved to the call's transfers
    for ca in members:
        sh = shapes[int(shape_of[ca[0]])]
        tb = tr_base[ca][:, None]
        for k, first, lst in (("dep", tr_base, sh.dep_list), ("send", part_base, sh.send_list),
                              ("recv", part_base, sh.recv_list)):
            if lst.size:
                at = out[f"{k}_ptr"][first[ca]][:, None] + np.arange(lst.size)
                out[f"{k}_list"][at.ravel()] = (lst + tb).ravel()
    return out


def template_programs(calls: CallTable, part_call: np.ndarray, part_rank: np.ndarray, world: int,
                      coords, shards, times, microbatches: int, iteration: int, recompute: str,
                      *, chunks: list[list[range]] | None = None, overlap_grad_reduce: bool = True
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(prog_ptr (W + 1,), ins_kind int8, ins_a int32, ins_b int32)`` of every rank's program
    (:func:`encode_program`), one
    :func:`~tokenpcap.schedule.program.build_programs` per class of ranks (module docstring).

    Args:
        calls: the iteration's calls (rows in call order); ``part_call``/``part_rank``: int64
            ``(P,)`` call and rank of each participation (participations in call order).
        world: ranks; ``coords``: ``rank -> RankCoords``; the rest (``chunks``: the layers of
            each stage's model chunks, ``overlap_grad_reduce``) as ``build_programs``.

    Call objects are made only for the calls of one rank of each class.

    Raises:
        RuntimeError: a call the programs do not place (as :func:`build_programs`).
    """
    # the fields outside GROUP_FIELDS are a family's and an instance's: one object per pair
    pairs = calls.first_groups()
    attr_ids: dict[tuple, int] = {}
    pair_attr = np.fromiter((attr_ids.setdefault(_PROGRAM_FIELDS(c), len(attr_ids))
                             for c in pairs.objects()), np.int64, count=len(pairs))
    call_attr = pair_attr[calls.family_inst()]
    src, dst = calls.src_dst()
    role = (part_rank == src[part_call]) * 1 + (part_rank == dst[part_call]) * 2
    key = call_attr[part_call] * 4 + role
    by_rank = np.argsort(part_rank, kind="stable")            # each rank's participations in call order
    start = np.zeros(world + 1, np.int64)
    np.cumsum(np.bincount(part_rank, minlength=world), out=start[1:])
    classes: dict[tuple, list[int]] = {}
    for r in range(world):
        c = coords(r)
        place = tuple(v for f, v in zip(c._fields, c) if f not in ("dp", "tp"))
        classes.setdefault((place, key[by_rank[start[r]:start[r + 1]]].tobytes()), []).append(r)
    templates = []
    lengths = np.zeros(world, np.int64)
    for members in classes.values():
        r0 = members[0]
        mine = by_rank[start[r0]:start[r0 + 1]]
        objs = list(calls.objects(part_call[mine]))
        nth = {c.call_id: n for n, c in enumerate(objs)}
        prog = build_programs(objs, range(r0, r0 + 1), coords,
                              shards, times, microbatches, iteration, recompute, chunks=chunks,
                              overlap_grad_reduce=overlap_grad_reduce)[r0]
        kind, a, b = (np.asarray(x, np.int64) for x in encode_program(prog, nth.__getitem__))
        templates.append((np.asarray(members, np.int64), kind, a, b))
        lengths[members] = kind.size
    prog_ptr = np.zeros(world + 1, np.int64)
    np.cumsum(lengths, out=prog_ptr[1:])
    n = int(prog_ptr[-1])
    ins_kind, ins_a, ins_b = np.zeros(n, np.int8), np.zeros(n, np.int32), np.zeros(n, np.int32)
    for members, kind, a, b in templates:
        at = prog_ptr[members][:, None] + np.arange(kind.size)
        ins_kind[at] = kind
        ins_b[at] = b
        calls_at = kind == CALL
        vals = np.broadcast_to(a, at.shape).copy()
        vals[:, calls_at] = by_rank[start[members][:, None] + a[calls_at]]
        ins_a[at] = vals
    return prog_ptr, ins_kind, ins_a, ins_b
