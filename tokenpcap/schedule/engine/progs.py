"""The ranks' programs and the calls' transfers (part of :mod:`tokenpcap.schedule.engine.kernel`):
stepping a program, starting a call (rendezvous), launching a transfer when its dependencies
have arrived (an RDMA message, or an NVLink copy timed here), an arrival finishing ranks'
parts, and an NVLink-only call timed as a whole.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push

__all__ = ["flush_out", "step", "arrived", "ab_done"]


@njit(cache=True)
def _create_qp(S, q):
    if S.qp[q, Q_ORDER] < 0:
        port = S.qp[q, Q_PORT]
        S.qp[q, Q_ORDER] = S.pt[port, P_CREATED]
        S.pt[port, P_CREATED] += 1


@njit(cache=True)
def flush_out(S, cf, sc, h, lst, t):
    """Turn the transfers launched during this event into messages (data ids, then their CTS)."""
    m = sc[NLAUNCH]
    if m == 0:
        return
    n0 = sc[NMSG]
    cts = cf[CTS]
    for i in range(m):
        x = lst[i]
        mid = n0 + i
        S.trs[x, T_MSG] = mid
        S.ms[mid, M_TR] = x
        S.ms[mid, M_KIND] = 0
        S.ms[mid, M_SRC] = S.trs[x, T_SNIC]
        S.ms[mid, M_DST] = S.trs[x, T_DNIC]
        S.ms[mid, M_QPID] = S.trs[x, T_QPID0]
        S.ms[mid, M_SHAPE] = S.trs[x, T_SHAPE]
        S.ms[mid, M_SIZE] = S.trs[x, T_BYTES]
        S.ms[mid, M_START] = t
        S.ms[mid, M_PEER] = -1
        if cts:
            cid = n0 + m + i
            S.ms[mid, M_PEER] = cid
            S.ms[cid, M_TR] = x
            S.ms[cid, M_KIND] = 1
            S.ms[cid, M_SRC] = S.trs[x, T_DNIC]
            S.ms[cid, M_DST] = S.trs[x, T_SNIC]
            S.ms[cid, M_QPID] = S.trs[x, T_QPID1]
            S.ms[cid, M_SHAPE] = cf[CTS_SHAPE]
            S.ms[cid, M_SIZE] = cf[CTS_BYTES]
            S.ms[cid, M_START] = t
            S.ms[cid, M_PEER] = mid
    for i in range(m):
        x = lst[i]
        mid = n0 + i
        _create_qp(S, S.trs[x, T_QPID0])
        if cts:
            _create_qp(S, S.trs[x, T_QPID1])
            push(h, sc, t, EV_READY, (n0 + m + i) * (MASK24 + 1), 0, 0)
        else:
            push(h, sc, t, EV_READY, mid * (MASK24 + 1), 0, 0)
    sc[NMSG] = n0 + (2 * m if cts else m)
    sc[NLAUNCH] = 0


@njit(cache=True)
def _launch(S, cf, sc, h, lst, x, t):
    if S.trs[x, T_NIC]:
        n = sc[NLAUNCH]
        if n == lst.shape[0]:
            sc[ERR] = 3
            return
        lst[n] = x
        sc[NLAUNCH] = n + 1
        return
    src = S.trs[x, T_SRC]
    start = t if t > S.rk[src, R_NVL] else S.rk[src, R_NVL]
    num = cf[NVL_NUM]
    end = start + (S.trs[x, T_BYTES] * 8 * cf[NVL_DEN] + num - 1) // num
    S.rk[src, R_NVL] = end
    arrive = end + cf[NVL_LAT]
    if cf[KEEP_NV]:
        k = sc[NNV]
        S.nv[k, 0] = x
        S.nv[k, 1] = start
        S.nv[k, 2] = arrive
        sc[NNV] = k + 1
    push(h, sc, arrive, EV_TIMER, 0, 1, x)


@njit(cache=True)
def _release(S, cf, sc, h, lst, x, t):
    S.trs[x, T_WAIT] -= 1
    if S.trs[x, T_WAIT] == 0:
        _launch(S, cf, sc, h, lst, x, t)


@njit(cache=True)
def _start(S, cf, sc, h, lst, p, t, waiter):
    """Rank of participation p starts its call at t; True when its part is already finished."""
    S.part[p, A_STARTED] = 1
    c = S.part[p, A_CALL]
    if S.call_ab[c] >= 0:
        # an NVLink-only call timed as a whole: it runs once every rank of it has started, on
        # the NVLink of all of them, and every rank's part ends with it
        S.call_nst[c] += 1
        if S.call_nst[c] == S.call_pbase[c + 1] - S.call_pbase[c]:
            start = t
            for q in range(S.call_pbase[c], S.call_pbase[c + 1]):
                if S.rk[S.part[q, A_RANK], R_NVL] > start:
                    start = S.rk[S.part[q, A_RANK], R_NVL]
            end = start + S.call_ab[c]
            for q in range(S.call_pbase[c], S.call_pbase[c + 1]):
                S.rk[S.part[q, A_RANK], R_NVL] = end
            push(h, sc, end, EV_TIMER, 0, 2, c)
        if waiter >= 0:
            S.part[p, A_WAITER] = waiter
        return False
    for i in range(S.send_ptr[p], S.send_ptr[p + 1]):
        _release(S, cf, sc, h, lst, S.send_list[i], t)
    for i in range(S.recv_ptr[p], S.recv_ptr[p + 1]):
        _release(S, cf, sc, h, lst, S.recv_list[i], t)
    if S.part[p, A_PENDING] == 0:
        return True
    if waiter >= 0:
        S.part[p, A_WAITER] = waiter
    return False


@njit(cache=True)
def _stream_pop(S, r):
    p = S.rk[r, R_SHEAD]
    S.rk[r, R_SHEAD] = S.part[p, A_SNEXT]
    if S.rk[r, R_SHEAD] < 0:
        S.rk[r, R_STAIL] = -1
    return p


@njit(cache=True)
def _stream_inner(S, cf, sc, h, lst, r, t):
    """The rank's stream starts its queued calls until one has to wait (the rank runs meanwhile)."""
    while S.rk[r, R_SHEAD] >= 0:
        p = _stream_pop(S, r)
        S.rk[r, R_SBUSY] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STREAM):
            return
    S.rk[r, R_SBUSY] = 0
    if S.rk[r, R_SWAIT]:
        sc[ERR] = 1                      # a waiting rank cannot be running: internal error


@njit(cache=True)
def _next_iteration(S, cf, r):
    if S.rk[r, R_IT] >= cf[ITERS]:
        return False
    S.rk[r, R_IT] += 1
    if S.rk[r, R_IT] >= cf[ITERS]:
        S.rk[r, R_PC] = 0
        S.rk[r, R_END] = 0
        return False
    j = S.rk[r, R_IT] * cf[WORLD] + r
    S.rk[r, R_PC] = S.prog_ptr[j]
    S.rk[r, R_END] = S.prog_ptr[j + 1]
    return True


@njit(cache=True)
def step(S, cf, sc, h, lst, r, t):
    """Run rank r's program from its pc at t until it blocks or ends."""
    S.rk[r, R_BLOCKED] = 0
    while S.rk[r, R_PC] < S.rk[r, R_END] or _next_iteration(S, cf, r):
        pc = S.rk[r, R_PC]
        S.rk[r, R_PC] = pc + 1
        kind = S.ins[pc, 0]
        if kind == I_COMPUTE:
            S.rk[r, R_BLOCKED] = 1
            push(h, sc, t + S.ins[pc, 1], EV_TIMER, 0, 0, r)
            return
        if kind == I_MARK:
            what = S.ins[pc, 2] >> 1
            if S.ins[pc, 2] & 1:
                S.rk[r, R_MARK + what] = t
            elif cf[KEEP_HIST]:
                k = sc[NTL]
                S.tl[k, 0] = r
                S.tl[k, 1] = S.rk[r, R_IT]
                S.tl[k, 2] = what
                S.tl[k, 3] = S.ins[pc, 1]
                S.tl[k, 4] = S.rk[r, R_MARK + what]
                S.tl[k, 5] = t
                sc[NTL] = k + 1
            continue
        if kind == I_WAIT:
            if S.rk[r, R_SHEAD] >= 0 or S.rk[r, R_SBUSY]:
                S.rk[r, R_SWAIT] = 1
                S.rk[r, R_BLOCKED] = 1
                return
            continue
        p = S.ins[pc, 1]
        mode = S.ins[pc, 2]
        if mode == M_ASYNC:
            S.part[p, A_SNEXT] = -1
            if S.rk[r, R_STAIL] >= 0:
                S.part[S.rk[r, R_STAIL], A_SNEXT] = p
            else:
                S.rk[r, R_SHEAD] = p
            S.rk[r, R_STAIL] = p
            if not S.rk[r, R_SBUSY]:
                _stream_inner(S, cf, sc, h, lst, r, t)
            continue
        if mode == M_SEND:
            _start(S, cf, sc, h, lst, p, t, W_NONE)
            continue
        S.rk[r, R_BLOCKED] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STEP):
            return
        S.rk[r, R_BLOCKED] = 0


@njit(cache=True)
def _stream_outer(S, cf, sc, h, lst, r, t):
    while S.rk[r, R_SHEAD] >= 0:
        p = _stream_pop(S, r)
        S.rk[r, R_SBUSY] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STREAM):
            return
    S.rk[r, R_SBUSY] = 0
    if S.rk[r, R_SWAIT]:
        S.rk[r, R_SWAIT] = 0
        step(S, cf, sc, h, lst, r, t)


@njit(cache=True)
def _finish(S, cf, sc, h, lst, p, t):
    w = S.part[p, A_WAITER]
    S.part[p, A_WAITER] = W_NONE
    if w == W_STREAM:
        _stream_outer(S, cf, sc, h, lst, S.part[p, A_RANK], t)
    elif w == W_STEP:
        step(S, cf, sc, h, lst, S.part[p, A_RANK], t)


@njit(cache=True)
def arrived(S, cf, sc, h, lst, x, t):
    """Transfer x has arrived: release its dependents, finish its ranks' parts of the call."""
    for i in range(S.dep_ptr[x], S.dep_ptr[x + 1]):
        _release(S, cf, sc, h, lst, S.dep_list[i], t)
    for p in (S.trs[x, T_SRCP], S.trs[x, T_DSTP]):
        S.part[p, A_PENDING] -= 1
        if S.part[p, A_PENDING] == 0 and S.part[p, A_STARTED]:
            _finish(S, cf, sc, h, lst, p, t)


@njit(cache=True)
def ab_done(S, cf, sc, h, lst, c, t):
    """An NVLink-only call timed as a whole is over: every rank's part of it is finished."""
    for p in range(S.call_pbase[c], S.call_pbase[c + 1]):
        S.part[p, A_PENDING] -= 1
        if S.part[p, A_PENDING] == 0 and S.part[p, A_STARTED]:
            _finish(S, cf, sc, h, lst, p, t)


# ---------------------------------------------------------------- the loop
