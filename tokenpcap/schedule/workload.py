"""Stage 5 (part): the program each rank of a microbenchmark workload runs (a scenario's
``workload:``; its calls: :mod:`tokenpcap.plan.workload`). No compute: a rank's program is its
start offset (a timer, ``start_offsets_ns`` divided by the plan's scale as compute time is),
then its calls, repetition after repetition (the calls' ``microbatch``):

* a collective (AllReduce, AllGather, ReduceScatter, AllToAll) blocks the rank until its part
  is finished (nccl-tests runs its iterations back to back on one stream);
* a point-to-point transfer (SendRecv: incast, sendrecv): the receiver posts its receive and
  never waits for it (the target of an RDMA WRITE is passive; a transfer starts when both
  sides have started, :mod:`tokenpcap.schedule.runner`), the sender starts its sends of the
  repetition together (NCCL's grouped ``ncclSend``) and waits for the last one before its next
  repetition.

Every call is started by every rank of its group, so the engine's rendezvous rule is the only
synchronisation, as in a training iteration. A rank without a call (outside the workload's
ranks) runs one :class:`~tokenpcap.schedule.program.Wait` on its empty stream, a no-op: the
engines step from one iteration's program into the next's first instruction, so no program of
an iteration is empty (training programs never are).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.calltable import CallTable
from tokenpcap.schedule.flatbuild import encode_program
from tokenpcap.schedule.flows import flows_program_arrays
from tokenpcap.schedule.program import Call, CallMode, Compute, Instruction, Wait

__all__ = ["workload_programs", "workload_program_arrays"]


def workload_programs(calls: list[CollectiveCall], ranks, start_offsets_ns, scale: int = 1
                      ) -> dict[int, list[Instruction]]:
    """``{rank: [instruction, ...]}`` of the ``ranks`` for one pass of a workload's ``calls``
    (module docstring); ``start_offsets_ns``: one per rank of the world (ns), divided by
    ``scale`` (floor)."""
    per: dict[int, dict[int, list[CollectiveCall]]] = defaultdict(lambda: defaultdict(list))
    for c in calls:
        for r in c.group:
            per[r][c.microbatch].append(c)
    progs: dict[int, list[Instruction]] = {}
    for r in ranks:
        p: list[Instruction] = []
        ns = int(start_offsets_ns[r]) // scale if len(start_offsets_ns) else 0
        if ns > 0:
            p.append(Compute(ns))
        for k in sorted(per[r]):
            mine = per[r][k]
            recvs = [c for c in mine if c.collective == "SendRecv" and c.dst == r]
            sends = [c for c in mine if c.collective == "SendRecv" and c.src == r]
            p += [Call(c.call_id, CallMode.SEND) for c in recvs]
            p += [Call(c.call_id, CallMode.SEND) for c in sends[:-1]]
            p += [Call(c.call_id, CallMode.BLOCK) for c in sends[-1:]]
            p += [Call(c.call_id, CallMode.BLOCK) for c in mine if c.collective != "SendRecv"]
        progs[r] = p or [Wait()]       # a rank outside the workload: one no-op instruction

    return progs


def workload_program_arrays(table: CallTable, part_call: np.ndarray, part_rank: np.ndarray,
                            world: int, start_offsets_ns, scale: int = 1, workload=None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(prog_ptr (W + 1,), ins_kind int8, ins_a int32, ins_b int32)`` of every rank's
    program (:func:`workload_programs`, encoded as
    :func:`~tokenpcap.schedule.flatbuild.template_programs` encodes a training iteration's):
    ``table`` the iteration's calls (row = local call), ``part_call``/``part_rank`` int64
    ``(P,)`` the call and rank of each participation. ``workload``: the scenario's
    :class:`~tokenpcap.config.workload.Workload`; a ``flows`` one gets
    :func:`~tokenpcap.schedule.flows.flows_program_arrays`."""
    if workload is not None and workload.flows is not None:
        return flows_program_arrays(workload, part_call, part_rank, world)
    calls = list(table.objects())
    local = {c.call_id: i for i, c in enumerate(calls)}
    part_of = {(int(c), int(r)): p for p, (c, r) in enumerate(zip(part_call.tolist(),
                                                                   part_rank.tolist()))}
    progs = workload_programs(calls, range(world), start_offsets_ns, scale)
    kinds: list[int] = []
    a_col: list[int] = []
    b_col: list[int] = []
    prog_ptr = np.zeros(world + 1, np.int64)
    for r in range(world):
        k, a, b = encode_program(progs[r], lambda cid, r=r: part_of[(local[cid], r)])
        kinds += k
        a_col += a
        b_col += b
        prog_ptr[r + 1] = len(kinds)
    return (prog_ptr, np.asarray(kinds, np.int8), np.asarray(a_col, np.int32),
            np.asarray(b_col, np.int32))
