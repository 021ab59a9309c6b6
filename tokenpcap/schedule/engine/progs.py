"""The ranks' programs and the calls' transfers (part of :mod:`tokenpcap.schedule.engine.kernel`):
stepping a program, starting a call (rendezvous), launching a transfer when its dependencies
have arrived (an RDMA message, or an NVLink copy timed here), an arrival finishing ranks'
parts, and an NVLink-only call timed as a whole.
"""
from __future__ import annotations

from tokenpcap.schedule.engine.compiled import inline_part, part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push
from tokenpcap.schedule.engine import access as A
from tokenpcap.schedule.engine.canon import canon_sort

__all__ = ["flush_out", "instant_copies", "step", "arrived", "ab_done"]


@part
def _create_qp(S, q):
    pt = S.pt
    qp = S.qp
    if qp[q, Q_ORDER] < 0:
        port = qp[q, Q_PORT]
        qp[q, Q_ORDER] = pt[port, P_CREATED]
        pt[port, P_CREATED] += 1


@part
def instant_copies(S, cf, sc, h, lst, t):
    """(``cf[CANON]``) Sort the transfers launched at this instant
    (:func:`~tokenpcap.schedule.engine.canon.canon_sort`), time its NVLink copies in that order
    and leave only its RDMA transfers in the launch list, for :func:`flush_out` (which the
    message ring may delay: a second call finds them sorted and no copy left)."""
    m = sc[NLAUNCH]
    if not cf[CANON] or m == 0:
        return
    canon_sort(S, cf, lst, m)
    k = 0
    for i in range(m):
        x = lst[i]
        if A.is_nic(S, x):
            lst[k] = x
            k += 1
        else:
            _nvlink(S, cf, sc, h, x, t)
    sc[NLAUNCH] = k


@part
def flush_out(S, cf, sc, h, lst, t):
    """Turn the transfers launched during this event (with ``cf[CANON]``: this instant, sorted
    and without its NVLink copies, :func:`instant_copies`) into messages (data ids, then their
    CTS); the ids to post at ``t`` are left in ``sc[RDY_NEXT] .. sc[RDY_END] - 1``."""
    ms = S.ms
    mk = sc[MMASK]                      # message id -> row (module ring)
    m = sc[NLAUNCH]
    if m == 0:
        return
    n0 = sc[NMSG]
    cts = cf[CTS]
    for i in range(m):
        x = lst[i]
        mid = n0 + i
        ms[mid & mk, M_TR] = x
        ms[mid & mk, M_KIND] = 0
        ms[mid & mk, M_SRC] = A.src_nic(S, x)
        ms[mid & mk, M_DST] = A.dst_nic(S, x)
        ms[mid & mk, M_QPID] = A.qp_data(S, x)
        ms[mid & mk, M_SHAPE] = A.msg_shape(S, x)
        ms[mid & mk, M_SIZE] = A.size_bytes(S, x)
        ms[mid & mk, M_START] = t
        ms[mid & mk, M_PEER] = -1
        if cts:
            cid = n0 + m + i
            ms[mid & mk, M_PEER] = cid
            ms[cid & mk, M_TR] = x
            ms[cid & mk, M_KIND] = 1
            ms[cid & mk, M_SRC] = A.dst_nic(S, x)
            ms[cid & mk, M_DST] = A.src_nic(S, x)
            ms[cid & mk, M_QPID] = A.qp_cts(S, x)
            ms[cid & mk, M_SHAPE] = cf[CTS_SHAPE]
            ms[cid & mk, M_SIZE] = cf[CTS_BYTES]
            ms[cid & mk, M_START] = t
            ms[cid & mk, M_PEER] = mid
    if cf[CANON]:
        # the data QPs in the instant's order, then the clear-to-send QPs: a transfer and its
        # image can share a NIC only as one's data and the other's clear-to-send write (the
        # image's receiver is the sender), so each NIC creates its QPs as its image does
        for i in range(m):
            _create_qp(S, A.qp_data(S, lst[i]))
        if cts:
            for i in range(m):
                _create_qp(S, A.qp_cts(S, lst[i]))
    else:
        for i in range(m):
            x = lst[i]
            _create_qp(S, A.qp_data(S, x))
            if cts:
                _create_qp(S, A.qp_cts(S, x))
    # the messages posted now (the clear-to-send writes, or the data without them) are the next
    # events: READY sorts first at an instant, keyed by message id, and no READY at t is queued
    sc[RDY_NEXT] = n0 + m if cts else n0
    sc[RDY_END] = sc[RDY_NEXT] + m
    sc[NMSG] = n0 + (2 * m if cts else m)
    sc[NLAUNCH] = 0


@part
def _launch(S, cf, sc, h, lst, x, t):
    """Transfer ``x`` is launched at ``t``: kept for :func:`flush_out` (an RDMA message; with
    ``cf[CANON]`` an NVLink copy too), or an NVLink copy timed now."""
    if cf[CANON] or A.is_nic(S, x):
        n = sc[NLAUNCH]
        if n == lst.shape[0]:
            sc[ERR] = 3
            return
        lst[n] = x
        sc[NLAUNCH] = n + 1
        return
    _nvlink(S, cf, sc, h, x, t)


@part
def _nvlink(S, cf, sc, h, x, t):
    """NVLink copy ``x`` starts at ``t`` or when its GPU's NVLink is free; its arrival is a
    timer."""
    nv = S.nv
    rk = S.rk
    src = A.src_rank(S, x)
    start = t if t > rk[src, R_NVL] else rk[src, R_NVL]
    num = cf[NVL_NUM]
    end = start + (A.size_bytes(S, x) * 8 * cf[NVL_DEN] + num - 1) // num
    rk[src, R_NVL] = end
    arrive = end + cf[NVL_LAT]
    if cf[KEEP_NV]:
        k = sc[NNV]
        nv[k, 0] = x
        nv[k, 1] = start
        nv[k, 2] = arrive
        sc[NNV] = k + 1
    push(h, sc, arrive, EV_TIMER, 0, 1, x)


@part
def _release(S, cf, sc, h, lst, x, t):
    if A.release_one(S, sc, x):
        _launch(S, cf, sc, h, lst, x, t)


@part
def _start(S, cf, sc, h, lst, p, t, waiter):
    """Rank of participation p starts its call at t; True when its part is already finished."""
    call_ab = S.call_ab
    call_nst = S.call_nst
    call_pbase = S.call_pbase
    part = S.part
    rk = S.rk
    part[p, A_STARTED] = 1
    c = part[p, A_CALL]
    if call_ab[c] >= 0:
        # an NVLink-only call timed as a whole: it runs once every rank of it has started, on
        # the NVLink of all of them, and every rank's part ends with it
        call_nst[c] += 1
        if call_nst[c] == call_pbase[c + 1] - call_pbase[c]:
            start = t
            for q in range(call_pbase[c], call_pbase[c + 1]):
                if rk[part[q, A_RANK], R_NVL] > start:
                    start = rk[part[q, A_RANK], R_NVL]
            end = start + call_ab[c]
            for q in range(call_pbase[c], call_pbase[c + 1]):
                rk[part[q, A_RANK], R_NVL] = end
            push(h, sc, end, EV_TIMER, 0, 2, c)
        if waiter >= 0:
            part[p, A_WAITER] = waiter
        return False
    lo, hi = A.sends(S, p)
    rlo, rhi = A.recvs(S, p)
    if lo < hi or rlo < rhi:
        # none of these transfers is launched yet (each waits for this start): the call is in
        # flight, its countdowns held from its first such start on (module slabs)
        A.hold(S, sc, c)
    for i in range(lo, hi):
        _release(S, cf, sc, h, lst, A.send_at(S, p, i), t)
    for i in range(rlo, rhi):
        _release(S, cf, sc, h, lst, A.recv_at(S, p, i), t)
    if part[p, A_PENDING] == 0:
        return True
    if waiter >= 0:
        part[p, A_WAITER] = waiter
    return False


@part
def _stream_pop(S, r):
    part = S.part
    rk = S.rk
    p = rk[r, R_SHEAD]
    rk[r, R_SHEAD] = part[p, A_SNEXT]
    if rk[r, R_SHEAD] < 0:
        rk[r, R_STAIL] = -1
    return p


@part
def _stream_inner(S, cf, sc, h, lst, r, t):
    """The rank's stream starts its queued calls until one has to wait (the rank runs meanwhile)."""
    rk = S.rk
    while rk[r, R_SHEAD] >= 0:
        p = _stream_pop(S, r)
        rk[r, R_SBUSY] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STREAM):
            return
    rk[r, R_SBUSY] = 0
    if rk[r, R_SWAIT]:
        sc[ERR] = 1                      # a waiting rank cannot be running: internal error


@part
def _next_iteration(S, cf, r):
    """Rank ``r`` takes its next iteration's program; False after the last. An empty program
    (a rank the quotient of :mod:`tokenpcap.schedule.replicas` does not run) is passed over."""
    prog_ptr = S.prog_ptr
    rk = S.rk
    while True:
        if rk[r, R_IT] >= cf[ITERS]:
            return False
        rk[r, R_IT] += 1
        if rk[r, R_IT] >= cf[ITERS]:
            rk[r, R_PC] = 0
            rk[r, R_END] = 0
            return False
        j = rk[r, R_IT] * cf[WORLD] + r
        rk[r, R_PC] = prog_ptr[j]
        rk[r, R_END] = prog_ptr[j + 1]
        if rk[r, R_PC] < rk[r, R_END]:
            return True


@inline_part
def step(S, cf, sc, h, lst, r, t):
    """Run rank r's program from its pc at t until it blocks or ends."""
    ins = S.ins
    part = S.part
    rk = S.rk
    tl = S.tl
    rk[r, R_BLOCKED] = 0
    while rk[r, R_PC] < rk[r, R_END] or _next_iteration(S, cf, r):
        pc = rk[r, R_PC]
        rk[r, R_PC] = pc + 1
        kind = ins[pc, 0]
        if kind == I_COMPUTE:
            rk[r, R_BLOCKED] = 1
            push(h, sc, t + ins[pc, 1] + ins[pc, 2] * NS_HIGH, EV_TIMER, 0, 0, r)
            return
        if kind == I_MARK:
            what = ins[pc, 2] >> 1
            if ins[pc, 2] & 1:
                rk[r, R_MARK + what] = t
            elif cf[KEEP_HIST]:
                k = sc[NTL]
                tl[k, 0] = r
                tl[k, 1] = rk[r, R_IT]
                tl[k, 2] = what
                tl[k, 3] = ins[pc, 1]
                tl[k, 4] = rk[r, R_MARK + what]
                tl[k, 5] = t
                sc[NTL] = k + 1
            continue
        if kind == I_WAIT:
            if rk[r, R_SHEAD] >= 0 or rk[r, R_SBUSY]:
                rk[r, R_SWAIT] = 1
                rk[r, R_BLOCKED] = 1
                return
            continue
        p = ins[pc, 1]
        mode = ins[pc, 2]
        if mode == M_ASYNC:
            part[p, A_SNEXT] = -1
            if rk[r, R_STAIL] >= 0:
                part[rk[r, R_STAIL], A_SNEXT] = p
            else:
                rk[r, R_SHEAD] = p
            rk[r, R_STAIL] = p
            if not rk[r, R_SBUSY]:
                _stream_inner(S, cf, sc, h, lst, r, t)
            continue
        if mode == M_SEND:
            _start(S, cf, sc, h, lst, p, t, W_NONE)
            continue
        if mode == M_WAIT:                  # a part started earlier (SEND): wait for its end
            if part[p, A_PENDING] > 0:
                part[p, A_WAITER] = W_STEP
                rk[r, R_BLOCKED] = 1
                return
            continue
        rk[r, R_BLOCKED] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STEP):
            return
        rk[r, R_BLOCKED] = 0


@inline_part
def _stream_outer(S, cf, sc, h, lst, r, t):
    rk = S.rk
    while rk[r, R_SHEAD] >= 0:
        p = _stream_pop(S, r)
        rk[r, R_SBUSY] = 1
        if not _start(S, cf, sc, h, lst, p, t, W_STREAM):
            return
    rk[r, R_SBUSY] = 0
    if rk[r, R_SWAIT]:
        rk[r, R_SWAIT] = 0
        step(S, cf, sc, h, lst, r, t)


@inline_part
def _finish(S, cf, sc, h, lst, p, t):
    part = S.part
    w = part[p, A_WAITER]
    part[p, A_WAITER] = W_NONE
    if w == W_STREAM:
        _stream_outer(S, cf, sc, h, lst, part[p, A_RANK], t)
    elif w == W_STEP:
        step(S, cf, sc, h, lst, part[p, A_RANK], t)


@inline_part
def arrived(S, cf, sc, h, lst, x, t):
    """Transfer x has arrived: release its dependents, finish its ranks' parts of the call."""
    part = S.part
    lo, hi = A.deps(S, x)
    for i in range(lo, hi):
        _release(S, cf, sc, h, lst, A.dep_at(S, x, i), t)
    for p in (A.src_part(S, x), A.dst_part(S, x)):
        part[p, A_PENDING] -= 1
        if part[p, A_PENDING] == 0 and part[p, A_STARTED]:
            _finish(S, cf, sc, h, lst, p, t)


@inline_part
def ab_done(S, cf, sc, h, lst, c, t, first):
    """An NVLink-only call timed as a whole is over: every rank's part of it is finished, from
    participation ``first`` on. Each finished part lets its rank run on and launch up to
    ``cf[HEAD]`` transfers, and a call has up to a node's ranks: before each part the launch
    list and the heap must have ``cf[HEAD]`` rows free and the countdown pool ``cf[SLAB_HEAD]``
    words (module slabs), else the call and the part are left in
    ``sc[AB_CALL]``, ``sc[AB_POS]`` and the run returns 3 to grow them, then resumes here
    (:func:`tokenpcap.schedule.engine.kernel.run`), so the launches keep their order."""
    call_pbase = S.call_pbase
    part = S.part
    for p in range(first, call_pbase[c + 1]):
        if (sc[NLAUNCH] + cf[HEAD] > lst.shape[0] or sc[HN] + cf[HEAD] > h.shape[0]
                or sc[SLAB_TOP] + cf[SLAB_HEAD] > S.tw.shape[0]):
            sc[AB_CALL] = c
            sc[AB_POS] = p
            return
        part[p, A_PENDING] -= 1
        if part[p, A_PENDING] == 0 and part[p, A_STARTED]:
            _finish(S, cf, sc, h, lst, p, t)


# ---------------------------------------------------------------- the loop
