"""Stage 5 (part): the programs of a ``flows`` workload (open loop; the flows:
:mod:`tokenpcap.config.flowfile`, their calls: :mod:`tokenpcap.plan.flows`).

Rank ``r``'s program first posts every receive of its flows (calls where it is ``dst``, in
call order, each started and never waited for: the target of an RDMA WRITE is passive), then
starts its own sends in order of their start times (ties in call order), each preceded by a
timer of the gap since the previous start (the first: its start). A send is started and never
waited for, so a flow is launched exactly at its start time, whatever the fabric did to the
flows before it (the engine's rendezvous rule is met: its receiver posted at time 0), and
nothing depends on its arrival. A rank with no flow runs one WAIT, a no-op (as
:mod:`tokenpcap.schedule.workload`).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.plan.flows import call_flows
from tokenpcap.schedule.engine.events import NS_HIGH
from tokenpcap.schedule.flatbuild import CALL, COMPUTE, WAIT
from tokenpcap.schedule.program import CallMode

__all__ = ["flows_program_arrays"]


def flows_program_arrays(workload, part_call: np.ndarray, part_rank: np.ndarray, world: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(prog_ptr (W + 1,), ins_kind int8, ins_a int32, ins_b int32)`` of every rank (module
    docstring), encoded as :func:`tokenpcap.schedule.workload.workload_program_arrays` encodes
    them; ``part_call``/``part_rank`` the call and rank of each participation (two per call:
    the sender's, then the receiver's)."""
    flows = workload.flows
    C = flows.size
    f = flows[call_flows(workload)]                       # row c: the flow of call c
    calls = np.arange(C, dtype=np.int64)
    part_base = np.searchsorted(part_call, calls)
    send_part = part_base + (part_rank[part_base] != f["src"])
    recv_part = part_base + (part_rank[part_base] != f["dst"])
    # receives first (call order), then the sends by start time
    so = np.lexsort((calls, f["start_ns"], f["src"]))
    ro = np.lexsort((calls, f["dst"]))
    gap = np.diff(np.concatenate([[0], f["start_ns"][so]]))
    new_rank = np.ones(C, bool)
    new_rank[1:] = f["src"][so][1:] != f["src"][so][:-1]
    gap[new_rank] = f["start_ns"][so][new_rank]
    kinds: list[np.ndarray] = []
    a_col: list[np.ndarray] = []
    b_col: list[np.ndarray] = []
    prog_ptr = np.zeros(world + 1, np.int64)
    r_lo = np.searchsorted(f["dst"][ro], np.arange(world + 1))
    s_lo = np.searchsorted(f["src"][so], np.arange(world + 1))
    for r in range(world):
        rx = recv_part[ro[r_lo[r]:r_lo[r + 1]]]
        sx = so[s_lo[r]:s_lo[r + 1]]
        g = gap[s_lo[r]:s_lo[r + 1]]
        timed = g > 0
        # per send: a COMPUTE of its gap (when > 0), then its CALL
        k = np.empty(rx.size + sx.size + int(timed.sum()), np.int8)
        a = np.empty(k.size, np.int64)
        b = np.empty(k.size, np.int64)
        k[:rx.size], a[:rx.size], b[:rx.size] = CALL, rx, int(CallMode.SEND)
        at = rx.size + np.arange(sx.size) + np.cumsum(timed)    # index of each send's CALL
        k[at], a[at], b[at] = CALL, send_part[sx], int(CallMode.SEND)
        t_at = at[timed] - 1
        k[t_at], a[t_at], b[t_at] = COMPUTE, g[timed] % NS_HIGH, g[timed] // NS_HIGH
        if not k.size:
            k, a, b = np.array([WAIT], np.int8), np.zeros(1, np.int64), np.zeros(1, np.int64)
        kinds.append(k)
        a_col.append(a)
        b_col.append(b)
        prog_ptr[r + 1] = prog_ptr[r] + k.size
    return (prog_ptr, np.concatenate(kinds), np.concatenate(a_col).astype(np.int32),
            np.concatenate(b_col).astype(np.int32))
