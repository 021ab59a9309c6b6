"""Building blocks of :func:`tokenpcap.schedule.flat.flatten`: the instruction encoding, the numpy
view of a call shape's transfers, and the two things that make the build cost grow with the
number of distinct shapes and program templates instead of calls × ranks.

* **Call shapes up to a shift of ranks.** A group's transfers are its canonical group's moved
  by a shift of ranks (whole nodes, and a local index every rank of the group shares where the
  NICs translate with it: :mod:`tokenpcap.collectives.canonical`), so the transfers are computed
  once per canonical group (:func:`canonical_shape`) and kept once (:class:`ShapeTable`); a call
  is its shape and its shift (ranks; its NICs move by :func:`nic_shift` of it), and a
  transfer's columns are read from its shape's row when needed (:func:`expand_transfers`; the
  engine likewise).
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
from dataclasses import dataclass

import numpy as np

from tokenpcap.collectives.canonical import canonical_shape, nic_shift
from tokenpcap.collectives.traffic import CallShape
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.calltable import CallTable
from tokenpcap.schedule.engine.events import NS_HIGH
from tokenpcap.schedule.program import Call, Compute, Mark, Overlap, build_programs

__all__ = ["COMPUTE", "CALL", "WAIT", "MARK", "MARK_CODES", "GROUP_FIELDS", "CallShapeArrays",
           "encode_program", "canonical_shape", "nic_shift", "ShapeTable", "ROW_FIELDS",
           "expand_transfers", "template_programs"]

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


def shape_transfers(key: tuple, plan):
    """The cached transfers of a canonical shape ``key`` (:func:`canonical_shape`) of ``plan``
    (:meth:`tokenpcap.plan.build.Plan.call_transfers`); a key with a fifth entry ``lane`` (a
    family with a fixed ``channel``, :class:`tokenpcap.plan.family.Family`): the call's transfers
    on one channel, moved to channel ``lane``."""
    if len(key) == 4:
        return plan.call_transfers(CallShape(*key))
    shape = CallShape(*key[:4])
    tr = plan.call_transfers(shape, channels=1)
    table = tr.table.copy()
    table["channel"] = key[4]
    table.setflags(write=False)
    return dataclasses.replace(tr, table=table)


#: Per-row columns of a :class:`ShapeTable` (int64; ``nic`` bool).
ROW_FIELDS = ("src", "dst", "spos", "dpos", "nic", "snic", "dnic", "bytes", "step", "channel",
              "offset", "wait")


@dataclass
class ShapeTable:
    """The canonical call shapes' transfers, one table for all (concatenated shape after shape).

    Shape ``s`` has the rows ``tr_ptr[s] .. tr_ptr[s + 1] - 1`` (its transfers in table order)
    and the positions ``pos_ptr[s] .. pos_ptr[s + 1] - 1`` (its group's ranks in group order).
    Rows (int64 ``(R,)``, ``nic`` bool): the :class:`CallShapeArrays` columns ``src``, ``dst``
    (canonical ranks), ``spos``, ``dpos`` (positions in the group, local to the shape), ``nic``,
    ``snic``, ``dnic`` (canonical NICs, -1 on NVLink), ``bytes``, ``step``, ``channel``,
    ``offset``, ``wait``; ``dep_ptr (R + 1,)``/``dep_list``: a row's dependents as rows of the
    table. Positions: ``rank (G,)`` canonical ranks, ``send_ptr (G + 1,)``/``send_list`` and
    ``recv_ptr``/``recv_list`` the rows a position sends and receives. Per shape: ``ab (S,)``
    (:attr:`CallShapeArrays.ab`).

    A call of shape ``s`` whose group lies ``shift`` ranks above the canonical one has for its
    transfer ``j`` the row ``tr_ptr[s] + j`` with ranks ``+ shift`` and NICs ``+ nic_shift(shift,
    gpus_per_node, nics_per_node)`` (:func:`nic_shift`, module docstring), and for its rank ``i``
    the position ``pos_ptr[s] + i``.
    """

    tr_ptr: np.ndarray
    pos_ptr: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    spos: np.ndarray
    dpos: np.ndarray
    nic: np.ndarray
    snic: np.ndarray
    dnic: np.ndarray
    bytes: np.ndarray
    step: np.ndarray
    channel: np.ndarray
    offset: np.ndarray
    wait: np.ndarray
    dep_ptr: np.ndarray
    dep_list: np.ndarray
    rank: np.ndarray
    send_ptr: np.ndarray
    send_list: np.ndarray
    recv_ptr: np.ndarray
    recv_list: np.ndarray
    ab: np.ndarray

    @classmethod
    def of(cls, shapes: list[CallShapeArrays]) -> "ShapeTable":
        """The table of ``shapes`` (shape ``s`` is ``shapes[s]``)."""
        tr_ptr = _ptr([sh.n for sh in shapes])
        pos_ptr = _ptr([len(sh.group) for sh in shapes])
        rows = {k: _cat([getattr(sh, k) for sh in shapes], np.bool_ if k == "nic" else np.int64)
                for k in ROW_FIELDS}
        csr = {}
        for k, first in (("dep", tr_ptr), ("send", pos_ptr), ("recv", pos_ptr)):
            ptrs = [getattr(sh, f"{k}_ptr") for sh in shapes]
            csr[f"{k}_ptr"] = _ptr(np.concatenate([np.diff(q) for q in ptrs]) if ptrs else [])
            csr[f"{k}_list"] = _cat([getattr(sh, f"{k}_list") + tr_ptr[s]
                                     for s, sh in enumerate(shapes)], np.int64)
        rank = _cat([np.asarray(sh.group, np.int64) for sh in shapes], np.int64)
        return cls(tr_ptr, pos_ptr, **rows, **csr, rank=rank,
                   ab=np.array([sh.ab for sh in shapes], np.int64))

    @classmethod
    def join(cls, tables: list["ShapeTable"]) -> tuple["ShapeTable", np.ndarray]:
        """``(table, first)``: the tables one after another, shape ``s`` of ``tables[i]`` being
        shape ``first[i] + s`` of the result; a table given several times (the same object) is
        in the result once, and one distinct table is returned as it is."""
        distinct: list[ShapeTable] = []
        at: dict[int, int] = {}
        for t in tables:
            if id(t) not in at:
                at[id(t)] = len(distinct)
                distinct.append(t)
        own = np.cumsum([0] + [t.ab.size for t in distinct])[:-1].astype(np.int64)
        first = own[[at[id(t)] for t in tables]]
        if len(distinct) == 1:
            return distinct[0], first
        tables = distinct
        rows = np.cumsum([0] + [int(t.tr_ptr[-1]) for t in tables])
        pos = np.cumsum([0] + [int(t.pos_ptr[-1]) for t in tables])

        def ptr(name, base):
            return np.concatenate([getattr(t, name)[:-1] + base[i] for i, t in enumerate(tables)]
                                  + [[base[-1]]]).astype(np.int64)

        kw = {k: np.concatenate([getattr(t, k) for t in tables]) for k in ROW_FIELDS + ("rank", "ab")}
        kw["tr_ptr"], kw["pos_ptr"] = ptr("tr_ptr", rows), ptr("pos_ptr", pos)
        for k in ("dep", "send", "recv"):
            lens = np.concatenate([np.diff(getattr(t, f"{k}_ptr")) for t in tables])
            kw[f"{k}_ptr"] = _ptr(lens)
            kw[f"{k}_list"] = np.concatenate([getattr(t, f"{k}_list") + rows[i]
                                              for i, t in enumerate(tables)])
        return cls(**kw), first


def _ptr(lengths) -> np.ndarray:
    lens = np.asarray(lengths, np.int64)
    out = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def _cat(arrays: list[np.ndarray], dtype) -> np.ndarray:
    return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)


def expand_transfers(table: ShapeTable, call_shape: np.ndarray, call_shift: np.ndarray,
                     tr_base: np.ndarray, part_base: np.ndarray, x: np.ndarray,
                     gpus_per_node: int, nics_per_node: int, names=None) -> dict[str, np.ndarray]:
    """Columns of the transfers ``x`` (int64 array, indices below ``tr_base[-1]``) of calls laid
    out as :class:`ShapeTable` says: ``call`` and the :data:`ROW_FIELDS` moved to each call
    (``src``/``dst`` global ranks, ``snic``/``dnic`` global NICs or -1, ``spos``/``dpos`` become
    ``srcp``/``dstp``: global participations), each of the shape of ``x``; ``names``: the
    columns wanted (default all).

    Args:
        call_shape, call_shift: int64 ``(C,)`` each call's shape and shift (ranks,
            :func:`canonical_shape`); tr_base, part_base: int64 ``(C + 1,)`` first transfer and
            participation of each call.
    """
    want = ("call",) + tuple(n for n in ROW_FIELDS if n not in ("spos", "dpos")) + ("srcp", "dstp")
    want = want if names is None else tuple(names)
    x = np.asarray(x, np.int64)
    c = np.searchsorted(tr_base, x, side="right") - 1
    row = table.tr_ptr[call_shape[c]] + x - tr_base[c]
    out = {}
    for n in want:
        if n == "call":
            out[n] = c
        elif n in ("src", "dst"):
            out[n] = getattr(table, n)[row] + call_shift[c]
        elif n in ("snic", "dnic"):
            v = getattr(table, n)[row]
            up = nic_shift(call_shift[c], gpus_per_node, nics_per_node)
            out[n] = np.where(v >= 0, v + up, -1)
        elif n in ("srcp", "dstp"):
            out[n] = getattr(table, "spos" if n == "srcp" else "dpos")[row] + part_base[c]
        else:
            out[n] = getattr(table, n)[row]
    return out


def template_programs(calls: CallTable, part_call: np.ndarray, part_rank: np.ndarray, world: int,
                      coords, shards, times, microbatches: int, iteration: int, recompute: str,
                      *, chunks: list[list[range]] | None = None, overlap: Overlap = Overlap()
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(prog_ptr (W + 1,), ins_kind int8, ins_a int32, ins_b int32)`` of every rank's program
    (:func:`encode_program`), one
    :func:`~tokenpcap.schedule.program.build_programs` per class of ranks (module docstring).

    Args:
        calls: the iteration's calls (rows in call order); ``part_call``/``part_rank``: int64
            ``(P,)`` call and rank of each participation (participations in call order).
        world: ranks; ``coords``: ``rank -> RankCoords``; the rest (``chunks``: the layers of
            each stage's model chunks, ``overlap``) as ``build_programs``.

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
                              overlap=overlap)[r0]
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
