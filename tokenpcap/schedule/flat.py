"""The work of a run as flat integer arrays: programs, calls' participations, transfers and their
dependencies, QPs (what the compiled event loop of :mod:`tokenpcap.schedule.engine.kernel` reads).

Built once per iteration from the same sources the schedule has always used: the plan's calls
(:meth:`tokenpcap.plan.build.Plan.call_table`: columns, no call objects), every rank's program
(:func:`tokenpcap.schedule.program.build_programs`) and every call's transfers
(:func:`tokenpcap.collectives.transfers.transfers`). The Python work is per group of each call
family (a dictionary look-up of its shape), per distinct call shape up to a shift of its ranks
(by whole nodes, and by a local index shared by the group's ranks) and per program template (a
class of ranks whose programs differ only in the calls they name), not per call and rank
(:mod:`tokenpcap.schedule.flatbuild`); ``flatten(..., direct=True)`` builds the same arrays
from the call objects, call by call and rank by rank, which the tests compare.

Index spaces (all int64 unless said; a call index is < 2**31: the call table of the iteration,
12 B a call, would not fit in memory otherwise):

* transfer ``x``: the transfers of call ``c`` are ``tr_base[c] + j`` for ``j`` in its table order;
  they are not stored one by one: call ``c`` is its canonical shape ``call_shape[c]`` (a
  :class:`~tokenpcap.schedule.flatbuild.ShapeTable` row range) moved up by ``call_shift[c]``
  ranks (its NICs by :func:`~tokenpcap.schedule.flatbuild.nic_shift` of it), and
  :meth:`Flat.expand` / :meth:`Flat.transfers` give the per-transfer columns;
* participation ``p``: rank ``group[i]`` of call ``c`` is ``part_base[c] + i``; its sends and
  receives are CSR lists (``send_ptr``/``send_list``, ``recv_ptr``/``recv_list`` of
  :class:`FlatTransfers`) in the order of ``Transfers.by_src`` / ``by_dst``; a transfer's
  dependents likewise (``dep_ptr``/``dep_list``);
* instruction: the program of rank ``r`` in iteration ``i`` is ``prog_ptr[i·W + r] ..
  prog_ptr[i·W + r + 1] - 1`` with ``ins_kind`` (int8: COMPUTE, CALL, WAIT, MARK of
  :mod:`tokenpcap.schedule.program`), ``ins_a`` (int32: participation, the MARK's microbatch, or
  a COMPUTE's ns modulo ``NS_HIGH = 2**31``) and ``ins_b`` (int32: call mode, MARK ``what·2 +
  begin``, or a COMPUTE's ns divided by ``NS_HIGH``);
* QP: one id per (sending NIC, peer NIC, connection index, role), role 0 carrying data and 1 the
  clear-to-send writes of the same connection (the pair of :mod:`tokenpcap.lower`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.plan.calltable import CallTable
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.records import COLLECTIVES, DIMS, PHASES
from tokenpcap.schedule.flatbuild import (
    CALL,
    COMPUTE,
    MARK,
    MARK_CODES,
    WAIT,
    CallShapeArrays,
    ShapeTable,
    canonical_shape,
    encode_program,
    expand_transfers,
    shape_transfers,
    template_programs,
)
from tokenpcap.schedule.program import Overlap, build_programs
from tokenpcap.schedule.workload import workload_program_arrays, workload_programs

__all__ = ["Flat", "FlatTransfers", "flatten", "MARK_CODES", "COMPUTE", "CALL", "WAIT", "MARK"]


@dataclass
class FlatTransfers:
    """The transfers of a :class:`Flat` one by one (int64 ``(T,)`` unless said), in transfer
    order: ``tr_call``, ``tr_src``/``tr_dst`` (global ranks), ``tr_srcp``/``tr_dstp``
    (participations), ``tr_nic`` (bool), ``tr_bytes``, ``tr_step``, ``tr_channel``,
    ``tr_offset``, ``tr_wait`` (dependencies + 2), ``tr_snic``/``tr_dnic`` (NICs of a transfer
    between nodes, else -1); CSR lists of global transfer indices: ``dep_ptr (T + 1,)``/
    ``dep_list`` (dependents), ``send_ptr``/``send_list`` and ``recv_ptr``/``recv_list``
    ``(P + 1,)``/... (each participation's sends and receives)."""

    tr_call: np.ndarray
    tr_src: np.ndarray
    tr_dst: np.ndarray
    tr_srcp: np.ndarray
    tr_dstp: np.ndarray
    tr_nic: np.ndarray
    tr_bytes: np.ndarray
    tr_step: np.ndarray
    tr_channel: np.ndarray
    tr_offset: np.ndarray
    tr_wait: np.ndarray
    tr_snic: np.ndarray
    tr_dnic: np.ndarray
    dep_ptr: np.ndarray
    dep_list: np.ndarray
    send_ptr: np.ndarray
    send_list: np.ndarray
    recv_ptr: np.ndarray
    recv_list: np.ndarray


@dataclass
class Flat:
    """One iteration's arrays (module docstring); indices are local to the iteration.

    ``direct``: the straightforward build's own per-transfer columns (``flatten(...,
    direct=True)``), which :meth:`expand` returns as they are; None for the fast build.
    """

    n_calls: int
    calls: CallTable                 # the iteration's calls (local call index = row)
    call_ab: np.ndarray              # (C,) alpha-beta ns of an NVLink-only call, -1 otherwise
    part_call: np.ndarray            # (P,) int32 local call of each participation
    call_codes: np.ndarray           # (C, 3) uint8 phase, dim, collective codes
    tr_base: np.ndarray              # (C + 1,)
    part_base: np.ndarray            # (C + 1,)
    call_shape: np.ndarray           # (C,) canonical shape (row range of `shapes`)
    call_shift: np.ndarray           # (C,) ranks the call's group lies above its shape's
    shapes: ShapeTable
    gpus_per_node: int
    nics_per_node: int
    # participations
    part_rank: np.ndarray
    # programs
    prog_ptr: np.ndarray             # (W + 1,)
    ins_kind: np.ndarray             # int8
    ins_a: np.ndarray                # int32
    ins_b: np.ndarray                # int32
    direct: FlatTransfers | None = None

    @property
    def n_transfers(self) -> int:
        return int(self.tr_base[-1])

    def transfers(self, x, names=None) -> dict[str, np.ndarray]:
        """Columns of the transfers ``x`` (:func:`~tokenpcap.schedule.flatbuild.expand_transfers`:
        ``call src dst srcp dstp nic snic dnic bytes step channel offset wait``)."""
        return expand_transfers(self.shapes, self.call_shape, self.call_shift, self.tr_base,
                                self.part_base, x, self.gpus_per_node, self.nics_per_node, names)

    def expand(self) -> FlatTransfers:
        """Every transfer one by one (memory per transfer: for tests and small runs)."""
        if self.direct is not None:
            return self.direct
        t = self.transfers(np.arange(self.n_transfers, dtype=np.int64))
        sh = self.shapes
        first = sh.tr_ptr[self.call_shape] - self.tr_base[:-1]   # row of transfer x: x + first[c]
        prow = (np.arange(self.part_call.size, dtype=np.int64)
                + (sh.pos_ptr[self.call_shape] - self.part_base[:-1])[self.part_call])
        trow = np.arange(self.n_transfers, dtype=np.int64) + first[t["call"]]
        csr = {}
        for k, rows, call in (("dep", trow, t["call"]), ("send", prow, self.part_call),
                              ("recv", prow, self.part_call)):
            ptr, lst = getattr(sh, f"{k}_ptr"), getattr(sh, f"{k}_list")
            n = ptr[rows + 1] - ptr[rows]
            out = np.zeros(n.size + 1, np.int64)
            np.cumsum(n, out=out[1:])
            owner = np.repeat(np.arange(n.size), n)
            at = ptr[rows][owner] + np.arange(int(out[-1])) - out[:-1][owner]
            csr[f"{k}_ptr"], csr[f"{k}_list"] = out, lst[at] - first[call[owner]]
        return FlatTransfers(t["call"], t["src"], t["dst"], t["srcp"], t["dstp"], t["nic"],
                             t["bytes"], t["step"], t["channel"], t["offset"], t["wait"],
                             t["snic"], t["dnic"], **csr)


def flatten(plan, iteration: int, shards, times, nvlink=None, above: int = 0, *,
            direct: bool = False, tables: dict | None = None) -> Flat:
    """Arrays of ``iteration`` of ``plan`` (:class:`tokenpcap.plan.build.Plan`, sizes at its
    scale), indices local to the iteration; ``shards`` and ``times`` per pipeline stage as
    :func:`tokenpcap.schedule.program.build_programs` takes them.

    ``nvlink``: None, or ``((num, den), latency_ns)`` to time every call whose hops are all on
    NVLink as one alpha-beta term (Thakur, Rabenseifner & Gropp 2005) instead of copy by copy:
    ``ceil(B·8·den/num) + steps·latency_ns`` with ``B`` the most bytes one rank of the group
    sends and ``num/den`` the NVLink rate in bits per ns (``call_ab``; such calls have no
    transfers), when the iteration has more than ``above`` NVLink copies.

    The build works per canonical call shape and per program template
    (:mod:`tokenpcap.schedule.flatbuild`); ``direct=True`` builds the same arrays the
    straightforward way instead (transfers per call, one program per rank), at a cost per call
    and per rank: the check of the fast build.

    ``tables``: a dict shared by the iterations of one run; an iteration whose canonical shapes
    (in order) and NVLink timing are those of an earlier one takes that iteration's
    :class:`~tokenpcap.schedule.flatbuild.ShapeTable` object instead of building its own, so the
    templates are held once for the run (:meth:`ShapeTable.join` keeps one copy of a table
    given several times).

    Raises:
        RuntimeError: a call the programs do not place (as :func:`build_programs`).
    """
    if direct:
        return _flatten_direct(plan, iteration, shards, times, nvlink, above)
    lay = plan.layout
    gpn, npn = lay.gpus_per_node, lay.nics_per_node
    table = plan.call_table(iteration)
    C = len(table)
    keys: dict[tuple, int] = {}           # exact shape -> index into `exact`
    exact: list[tuple[int, int]] = []     # (canonical index, shift)
    canon: dict[tuple, int] = {}
    canon_tr: list = []
    codes_of: dict[tuple, int] = {}
    group_shape: list[int] = []           # exact shape of each family's each group
    family_code: list[int] = []
    for f in table.families:              # a call's shape and codes are its family's and group's
        family_code.append(codes_of.setdefault((f.phase, f.dim, f.collective), len(codes_of)))
        for g in f.groups:
            k = (f.collective, g, f.message_bytes, f.elem_bytes, f.channel)
            e = keys.get(k)
            if e is None:
                ck, sh = canonical_shape(*k[:4], gpn, npn)
                ck += (f.channel,) if f.channel >= 0 else ()
                j = canon.get(ck)
                if j is None:
                    j = canon[ck] = len(canon_tr)
                    canon_tr.append(shape_transfers(ck, plan))
                e = keys[k] = len(exact)
                exact.append((j, sh))
            group_shape.append(e)
    shape_ids = np.asarray(group_shape, np.int64)[table.family_group()]
    code_ids = np.asarray(family_code, np.int64)[table.family]
    ex = np.asarray(exact, np.int64).reshape(-1, 2)
    shape_of, shift = ex[shape_ids, 0], ex[shape_ids, 1]
    if nvlink is not None:
        copies = np.array([int((~tr.table["nic"]).sum()) for tr in canon_tr], np.int64)
        if int(np.bincount(shape_of, minlength=len(canon_tr)) @ copies) <= above:
            nvlink = None
    key = (tuple(canon), nvlink)
    tab = None if tables is None else tables.get(key)
    if tab is None:
        tab = ShapeTable.of([CallShapeArrays(tr, ck[1], nvlink) for tr, ck in zip(canon_tr, canon)])
        if tables is not None:
            tables[key] = tab
    tr_base = _ptr(np.diff(tab.tr_ptr)[shape_of])
    npart = np.diff(tab.pos_ptr)[shape_of]
    part_base = _ptr(npart)
    part_call = np.repeat(np.arange(C, dtype=np.int32), npart)
    prow = np.arange(part_call.size, dtype=np.int64) + (tab.pos_ptr[shape_of] - part_base[:-1])[part_call]
    part_rank = tab.rank[prow] + shift[part_call]
    codes = np.array([(PHASES.index(p), DIMS.index(d), COLLECTIVES.index(k)) for p, d, k in codes_of],
                     np.uint8).reshape(-1, 3)
    wl = plan.scenario.workload
    if wl is not None:                    # a microbenchmark: its calls, no compute
        prog_ptr, ins_kind, ins_a, ins_b = workload_program_arrays(
            table, part_call, part_rank, lay.world_size, wl.start_offsets_ns, plan.scale,
            workload=wl)
    else:
        prog_ptr, ins_kind, ins_a, ins_b = template_programs(
            table, part_call, part_rank, lay.world_size, lay.coords, shards, times,
            plan.microbatches, iteration, plan.scenario.training.recompute,
            chunks=[chunk_layers(plan.scenario, st) for st in range(lay.pp)],
            overlap=Overlap.of(plan.scenario.training))
    return Flat(C, table, tab.ab[shape_of], part_call, codes[code_ids], tr_base, part_base,
                shape_of, shift, tab, gpn, npn, part_rank, prog_ptr, ins_kind, ins_a, ins_b)


def _ptr(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _concat_csr(ptrs: list[np.ndarray], lists: list[np.ndarray], shift: list[int]):
    lens = [p[1:] - p[:-1] for p in ptrs]
    allen = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    ptr = np.zeros(allen.size + 1, np.int64)
    np.cumsum(allen, out=ptr[1:])
    flat = np.concatenate([lst + s for lst, s in zip(lists, shift)]) if lists else np.zeros(0, np.int64)
    return ptr, flat


def _flatten_direct(plan, iteration: int, shards, times, nvlink=None, above: int = 0) -> Flat:
    """:func:`flatten` the straightforward way: transfers per call, one program per rank.

    Raises:
        InputError: a ``flows`` workload (its calls' fixed lanes and start times are built by
            the fast build only, :mod:`tokenpcap.schedule.flows`).
    """
    if plan.scenario.workload is not None and plan.scenario.workload.flows is not None:
        raise InputError("flatten(direct=True): got a flows workload, expected another kind "
                         "(the fast build alone builds a flows workload)")
    lay = plan.layout
    calls = list(plan.calls(iteration))
    trs = [plan.call_transfers(c) for c in calls]
    if nvlink is not None:
        copies: dict[int, int] = {}
        for tr in trs:
            if id(tr) not in copies:
                copies[id(tr)] = int((~tr.table["nic"]).sum())
        if sum(copies[id(tr)] for tr in trs) <= above:
            nvlink = None
    shapes: dict[tuple, int] = {}
    per_call: list[CallShapeArrays] = []
    uniq: list[CallShapeArrays] = []
    call_shape = np.zeros(len(calls), np.int64)
    for i, (c, tr) in enumerate(zip(calls, trs)):
        s = shapes.get((id(tr), tuple(c.group)))
        if s is None:
            s = shapes[(id(tr), tuple(c.group))] = len(uniq)
            uniq.append(CallShapeArrays(tr, tuple(c.group), nvlink))
        call_shape[i] = s
        per_call.append(uniq[s])
    C = len(calls)
    ntr = np.array([sh.n for sh in per_call], np.int64)
    npart = np.array([len(sh.group) for sh in per_call], np.int64)
    tr_base = np.zeros(C + 1, np.int64)
    np.cumsum(ntr, out=tr_base[1:])
    part_base = np.zeros(C + 1, np.int64)
    np.cumsum(npart, out=part_base[1:])
    T, P = int(tr_base[-1]), int(part_base[-1])
    cols = {k: np.zeros(T, np.int64) for k in ("call", "src", "dst", "srcp", "dstp", "bytes", "step",
                                                "channel", "offset", "wait", "snic", "dnic")}
    tr_nic = np.zeros(T, np.bool_)
    part_rank = np.zeros(P, np.int64)
    groups: dict[int, list[int]] = {}
    for ci, sh in enumerate(per_call):
        groups.setdefault(id(sh), []).append(ci)
    for cis in groups.values():
        sh = per_call[cis[0]]
        ca = np.asarray(cis, np.int64)
        if sh.n:
            idx = (tr_base[ca][:, None] + np.arange(sh.n)[None, :]).ravel()
            pb = np.repeat(part_base[ca], sh.n)
            cols["call"][idx] = np.repeat(ca, sh.n)
            cols["srcp"][idx] = pb + np.tile([sh.pos[int(r)] for r in sh.src], ca.size)
            cols["dstp"][idx] = pb + np.tile([sh.pos[int(r)] for r in sh.dst], ca.size)
            for name, arr in (("src", sh.src), ("dst", sh.dst), ("bytes", sh.bytes),
                              ("step", sh.step), ("channel", sh.channel), ("offset", sh.offset),
                              ("wait", sh.wait), ("snic", sh.snic), ("dnic", sh.dnic)):
                cols[name][idx] = np.tile(arr, ca.size)
            tr_nic[idx] = np.tile(sh.nic, ca.size)
        pidx = (part_base[ca][:, None] + np.arange(len(sh.group))[None, :]).ravel()
        part_rank[pidx] = np.tile(np.asarray(sh.group, np.int64), ca.size)
    base = tr_base[:-1].tolist()
    dep_ptr, dep_list = _concat_csr([sh.dep_ptr for sh in per_call], [sh.dep_list for sh in per_call],
                                    base)
    send_ptr, send_list = _concat_csr([sh.send_ptr for sh in per_call],
                                      [sh.send_list for sh in per_call], base)
    recv_ptr, recv_list = _concat_csr([sh.recv_ptr for sh in per_call],
                                      [sh.recv_list for sh in per_call], base)
    codes = np.array([(PHASES.index(c.phase), DIMS.index(c.dim), COLLECTIVES.index(c.collective))
                      for c in calls], np.uint8).reshape(-1, 3)
    W = lay.world_size
    wl = plan.scenario.workload
    progs = workload_programs(calls, range(W), wl.start_offsets_ns, plan.scale) \
        if wl is not None else \
        build_programs(calls, range(W), lay.coords, shards, times, plan.microbatches, iteration,
                       plan.scenario.training.recompute,
                       chunks=[chunk_layers(plan.scenario, st) for st in range(lay.pp)],
                       overlap=Overlap.of(plan.scenario.training))
    local = {c.call_id: i for i, c in enumerate(calls)}
    kinds: list[int] = []
    a_col: list[int] = []
    b_col: list[int] = []
    prog_ptr = np.zeros(W + 1, np.int64)
    for r in range(W):
        k, a, b = encode_program(progs[r], lambda cid, r=r: int(part_base[local[cid]])
                                 + per_call[local[cid]].pos[r])
        kinds += k
        a_col += a
        b_col += b
        prog_ptr[r + 1] = len(kinds)
    call_ab = np.array([sh.ab for sh in per_call], np.int64)
    part_call = np.repeat(np.arange(C, dtype=np.int32), npart)
    direct = FlatTransfers(cols["call"], cols["src"], cols["dst"], cols["srcp"], cols["dstp"],
                           tr_nic, cols["bytes"], cols["step"], cols["channel"], cols["offset"],
                           cols["wait"], cols["snic"], cols["dnic"], dep_ptr, dep_list, send_ptr,
                           send_list, recv_ptr, recv_list)
    # the templates of this build: one shape per distinct group and transfers, not moved
    return Flat(C, plan.call_table(iteration), call_ab, part_call, codes, tr_base, part_base, call_shape,
                np.zeros(C, np.int64), ShapeTable.of(uniq), lay.gpus_per_node, lay.nics_per_node,
                part_rank, prog_ptr, np.asarray(kinds, np.int8), np.asarray(a_col, np.int32),
                np.asarray(b_col, np.int32), direct)
