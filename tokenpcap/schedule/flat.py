"""The work of a run as flat integer arrays: programs, calls' participations, transfers and their
dependencies, QPs (what the compiled event loop of :mod:`tokenpcap.schedule.engine.kernel` reads).

Built once per iteration from the same sources the schedule has always used: the plan's calls
(:meth:`tokenpcap.plan.build.Plan.calls`), every rank's program
(:func:`tokenpcap.schedule.program.build_programs`) and every call's transfers
(:func:`tokenpcap.collectives.transfers.transfers`, cached per call shape). Per call shape the
transfer tables become numpy arrays once; the calls of that shape are then laid out together with
``arange`` arithmetic, so the work per transfer is vectorized.

Index spaces (all int64 unless said):

* transfer ``x``: the transfers of call ``c`` are ``tr_base[c] + j`` for ``j`` in its table order;
* participation ``p``: rank ``group[i]`` of call ``c`` is ``part_base[c] + i``; its sends and
  receives are CSR lists (``send_ptr``/``send_list``, ``recv_ptr``/``recv_list``) in the order of
  ``Transfers.by_src`` / ``by_dst``; a transfer's dependents likewise (``dep_ptr``/``dep_list``);
* instruction: the program of rank ``r`` in iteration ``i`` is ``prog_ptr[i·W + r] ..
  prog_ptr[i·W + r + 1] - 1`` with ``ins_kind`` (COMPUTE, CALL, WAIT, MARK of
  :mod:`tokenpcap.schedule.program`), ``ins_a`` (ns, participation, or the MARK's microbatch) and
  ``ins_b`` (call mode, or MARK ``what·2 + begin``);
* QP: one id per (sending NIC, peer NIC, connection index, role), role 0 carrying data and 1 the
  clear-to-send writes of the same connection (the pair of :mod:`tokenpcap.lower`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.collectives.transfers import transfers
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.records import COLLECTIVES, DIMS, PHASES
from tokenpcap.schedule.program import Call, Compute, Mark, build_programs

__all__ = ["Flat", "flatten", "MARK_CODES", "COMPUTE", "CALL", "WAIT", "MARK"]

#: Instruction kinds of ``ins_kind`` (the kernel's ``I_*``).
COMPUTE, CALL, WAIT, MARK = range(4)

#: MARK ``what`` letters in code order (``ins_b // 2``).
MARK_CODES = (b"F", b"B", b"R", b"O")
_MARK = {c.decode(): i for i, c in enumerate(MARK_CODES)}


class _Shape:
    """numpy view of one cached :class:`~tokenpcap.collectives.transfers.Transfers`."""

    __slots__ = ("n", "src", "dst", "nic", "snic", "dnic", "bytes", "step", "channel", "offset",
                 "wait",
                 "dep_ptr", "dep_list", "pos", "send_ptr", "send_list", "recv_ptr", "recv_list",
                 "group", "ab")

    def __init__(self, tr, group: tuple[int, ...], nvlink=None):
        t = tr.table
        self.ab = -1
        if nvlink is not None and len(t) and not t["nic"].any():
            # every hop on NVLink: one alpha-beta time for the call, no transfers
            (num, den), latency = nvlink
            sent = np.bincount(t["src"] - min(group), weights=t["bytes"]).max()
            self.ab = -(-int(sent) * 8 * den // num) + latency * len(np.unique(t["step"]))
            t = t[:0]
            tr = type(tr)(t, (), (), {r: () for r in group}, {r: () for r in group})
        self.n = len(t)
        self.group = group
        self.src, self.dst = t["src"].astype(np.int64), t["dst"].astype(np.int64)
        self.nic = t["nic"].astype(np.bool_)
        # the NICs each transfer between nodes leaves and enters on (collectives.rails)
        self.snic, self.dnic = t["src_nic"].astype(np.int64), t["dst_nic"].astype(np.int64)
        self.bytes = t["bytes"].astype(np.int64)
        self.step = t["step"].astype(np.int64)
        self.channel = t["channel"].astype(np.int64)
        self.offset = t["byte_offset"].astype(np.int64)
        self.wait = np.array([len(d) + 2 for d in tr.deps], np.int64)
        self.dep_ptr, self.dep_list = _csr(tr.dependents)
        self.pos = {r: i for i, r in enumerate(group)}
        self.send_ptr, self.send_list = _csr([tr.by_src[r] for r in group])
        self.recv_ptr, self.recv_list = _csr([tr.by_dst[r] for r in group])


def _csr(lists) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([len(x) for x in lists], np.int64)
    ptr = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    flat = np.fromiter((v for x in lists for v in x), np.int64, count=int(ptr[-1]))
    return ptr, flat


@dataclass
class Flat:
    """One iteration's arrays (module docstring); indices are local to the iteration."""

    n_calls: int
    calls: list                      # CollectiveCall per local call index
    call_ab: np.ndarray              # (C,) alpha-beta ns of an NVLink-only call, -1 otherwise
    part_call: np.ndarray            # (P,) local call of each participation
    call_codes: np.ndarray           # (C, 3) phase, dim, collective codes
    tr_base: np.ndarray              # (C + 1,)
    part_base: np.ndarray            # (C + 1,)
    # transfers
    tr_call: np.ndarray
    tr_src: np.ndarray               # global ranks
    tr_dst: np.ndarray
    tr_srcp: np.ndarray              # participations
    tr_dstp: np.ndarray
    tr_nic: np.ndarray               # bool
    tr_bytes: np.ndarray
    tr_step: np.ndarray
    tr_channel: np.ndarray
    tr_offset: np.ndarray
    tr_wait: np.ndarray
    dep_ptr: np.ndarray
    dep_list: np.ndarray
    # participations
    part_rank: np.ndarray
    send_ptr: np.ndarray
    send_list: np.ndarray
    recv_ptr: np.ndarray
    recv_list: np.ndarray
    # programs
    prog_ptr: np.ndarray             # (W + 1,)
    ins_kind: np.ndarray             # int8
    ins_a: np.ndarray
    ins_b: np.ndarray
    tr_snic: np.ndarray | None = None   # (T,) sending NIC of a transfer between nodes, else -1
    tr_dnic: np.ndarray | None = None   # (T,) receiving NIC, else -1


def _concat_csr(ptrs: list[np.ndarray], lists: list[np.ndarray], shift: list[int]):
    lens = [p[1:] - p[:-1] for p in ptrs]
    allen = np.concatenate(lens) if lens else np.zeros(0, np.int64)
    ptr = np.zeros(allen.size + 1, np.int64)
    np.cumsum(allen, out=ptr[1:])
    flat = np.concatenate([lst + s for lst, s in zip(lists, shift)]) if lists else np.zeros(0, np.int64)
    return ptr, flat


def flatten(plan, iteration: int, shards, times, nvlink=None, above: int = 0) -> Flat:
    """Arrays of ``iteration`` of ``plan`` (:class:`tokenpcap.plan.build.Plan`, sizes at its
    scale), indices local to the iteration; ``shards`` and ``times`` per pipeline stage as
    :func:`tokenpcap.schedule.program.build_programs` takes them.

    ``nvlink``: None, or ``((num, den), latency_ns)`` to time every call whose hops are all on
    NVLink as one alpha-beta term (Thakur, Rabenseifner & Gropp 2005) instead of copy by copy:
    ``ceil(B·8·den/num) + steps·latency_ns`` with ``B`` the most bytes one rank of the group
    sends and ``num/den`` the NVLink rate in bits per ns (``call_ab``; such calls have no
    transfers), when the iteration has more than ``above`` NVLink copies.

    Raises:
        RuntimeError: a call the programs do not place (as :func:`build_programs`).
    """
    lay = plan.layout
    coll = plan.scenario.collectives
    calls = list(plan.calls(iteration))
    trs = [transfers(c, plan.algorithm, lay, coll.channels, coll.slice_bytes) for c in calls]
    if nvlink is not None:
        copies: dict[int, int] = {}
        for tr in trs:
            if id(tr) not in copies:
                copies[id(tr)] = int((~tr.table["nic"]).sum())
        if sum(copies[id(tr)] for tr in trs) <= above:
            nvlink = None
    shapes: dict[int, _Shape] = {}
    per_call: list[_Shape] = []
    for c, tr in zip(calls, trs):
        sh = shapes.get(id(tr))
        if sh is None:
            sh = shapes[id(tr)] = _Shape(tr, tuple(c.group), nvlink)
        per_call.append(sh)
    C = len(calls)
    ntr = np.array([sh.n for sh in per_call], np.int64)
    npart = np.array([len(sh.group) for sh in per_call], np.int64)
    tr_base = np.zeros(C + 1, np.int64)
    np.cumsum(ntr, out=tr_base[1:])
    part_base = np.zeros(C + 1, np.int64)
    np.cumsum(npart, out=part_base[1:])
    # per transfer / participation columns, shape by shape (vectorized over its calls)
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
            cols["src"][idx] = np.tile(sh.src, ca.size)
            cols["dst"][idx] = np.tile(sh.dst, ca.size)
            spos = np.array([sh.pos[int(r)] for r in sh.src], np.int64)
            dpos = np.array([sh.pos[int(r)] for r in sh.dst], np.int64)
            cols["srcp"][idx] = pb + np.tile(spos, ca.size)
            cols["dstp"][idx] = pb + np.tile(dpos, ca.size)
            for name, arr in (("bytes", sh.bytes), ("step", sh.step), ("channel", sh.channel),
                              ("offset", sh.offset), ("wait", sh.wait), ("snic", sh.snic),
                              ("dnic", sh.dnic)):
                cols[name][idx] = np.tile(arr, ca.size)
            tr_nic[idx] = np.tile(sh.nic, ca.size)
        g = len(sh.group)
        pidx = (part_base[ca][:, None] + np.arange(g)[None, :]).ravel()
        part_rank[pidx] = np.tile(np.asarray(sh.group, np.int64), ca.size)
    # CSR lists in call order (dependents and send/recv lists hold transfer indices of the call)
    dep_ptr, dep_list = _concat_csr([sh.dep_ptr for sh in per_call], [sh.dep_list for sh in per_call],
                                    tr_base[:-1].tolist())
    send_ptr, send_list = _concat_csr([sh.send_ptr for sh in per_call], [sh.send_list for sh in per_call],
                                      tr_base[:-1].tolist())
    recv_ptr, recv_list = _concat_csr([sh.recv_ptr for sh in per_call], [sh.recv_list for sh in per_call],
                                      tr_base[:-1].tolist())
    codes = np.array([(PHASES.index(c.phase), DIMS.index(c.dim), COLLECTIVES.index(c.collective))
                      for c in calls], np.int64).reshape(-1, 3)
    # programs
    W = lay.world_size
    progs = build_programs(calls, range(W), lay.coords, shards, times, plan.microbatches, iteration,
                           plan.scenario.training.recompute,
                           chunks=[chunk_layers(plan.scenario, st) for st in range(lay.pp)],
                           overlap_grad_reduce=plan.scenario.training.overlap_grad_reduce)
    local = {c.call_id: i for i, c in enumerate(calls)}
    kinds: list[int] = []
    a_col: list[int] = []
    b_col: list[int] = []
    prog_ptr = np.zeros(W + 1, np.int64)
    for r in range(W):
        for ins in progs[r]:
            if isinstance(ins, Compute):
                kinds.append(COMPUTE)
                a_col.append(ins.ns)
                b_col.append(0)
            elif isinstance(ins, Call):
                ci = local[ins.call_id]
                kinds.append(CALL)
                a_col.append(int(part_base[ci]) + per_call[ci].pos[r])
                b_col.append(int(ins.mode))
            elif isinstance(ins, Mark):
                kinds.append(MARK)
                a_col.append(ins.microbatch)
                b_col.append(_MARK[ins.what] * 2 + int(bool(ins.begin)))
            else:
                kinds.append(WAIT)
                a_col.append(0)
                b_col.append(0)
        prog_ptr[r + 1] = len(kinds)
    call_ab = np.array([sh.ab for sh in per_call], np.int64)
    part_call = np.repeat(np.arange(C, dtype=np.int64), npart)
    return Flat(C, calls, call_ab, part_call, codes, tr_base, part_base,
                cols["call"], cols["src"], cols["dst"], cols["srcp"], cols["dstp"], tr_nic,
                cols["bytes"], cols["step"], cols["channel"], cols["offset"], cols["wait"],
                dep_ptr, dep_list, part_rank, send_ptr, send_list, recv_ptr, recv_list,
                prog_ptr, np.asarray(kinds, np.int8), np.asarray(a_col, np.int64),
                np.asarray(b_col, np.int64), tr_snic=cols["snic"], tr_dnic=cols["dnic"])
