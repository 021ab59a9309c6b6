"""The compiled event loop: every rank's program, every call's transfers and every NIC's QPs, timed
per message (numba; no Python work per message or per packet).

Semantics are those of the schedule and NIC model documented in :mod:`tokenpcap.schedule.runner`
and :mod:`tokenpcap.schedule.engine.port` (1F1B programs, blocking TP, DP buckets on a stream,
NCCL rendezvous, ring/tree dependencies per slice, clear-to-send before data, ACKs with strict
priority, round-robin one packet per turn over a NIC's eligible QPs at link rate with layer-1
overhead), computed so that the cost of a message does not depend on its packet count:

* **Epochs in closed form.** Between two events the eligible QPs of a NIC are fixed, so slot ``j``
  of the rotation (``k`` QPs, the one after the last served first) is packet ``next + j // k`` of
  QP ``j % k``. Every slot before the first one with consequences elsewhere (the last packet of a
  message, a packet with AckReq: the *stop slot* ``s``) is a MIDDLE packet except each QP's first,
  so the start time of any slot follows from one round of durations: ``O(k)`` work per epoch
  instead of ``O(slots)``.
* **Events** are those of the discrete-event engine, in the same total order: a binary heap keyed
  by ``(time, type, key, insertion)`` with types READY < ACK < ARRIVE < TIMER < WAKE, READY keyed
  by message id, ACK by (message, packet), ARRIVE by message, WAKE by NIC, timers by insertion.
  A WAKE comes at the start of a NIC's predicted stop slot; arrivals and ACKs are pushed when
  their packet is committed. The same inputs therefore give the same message times, ids, QP
  rotation orders and packets as the Python engine.
* **Packets only where asked.** A NIC with ``p_sel`` set writes a row per frame it sends into the
  output buffer as its slots are committed (the slots of an epoch are walked one by one there);
  the others only advance their clocks. A selected NIC's wake is also capped at ``gap`` shortest
  frames after its clock, so its rows are committed (and handed out) in bounded batches.

The buffers that grow with what is in progress (event heap, ACK queues, output rows, the
transfers launched by one event) are plain arrays: :func:`run` returns to Python before an event
when one of them is near full (the caller grows it and calls again), when the output holds
``chunk`` rows (the caller commits the selected NICs up to the next event's time with
:func:`commit` and hands out every row before it: no later event can add an earlier frame), and
when the run is over.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = ["State", "run", "commit", "push", "NEVER"]

# event types (total order at equal times)
EV_READY, EV_ACK, EV_ARRIVE, EV_TIMER, EV_WAKE = 0, 1, 2, 3, 4
NEVER = 1 << 62
MASK24 = (1 << 24) - 1
# scalar slots of sc
HN, SEQ, NMSG, NOW, NOUT, NLAUNCH, ACKFREE, ACKTOP, NTL, NNV, ERR, FRONT = range(12)
# config slots of cf
(LAT, ACKDELAY, ACK_NS, ACK_FB, EVERY, CTS, CTS_BYTES, CTS_SHAPE, ITERS, WORLD, NVL_NUM, NVL_DEN,
 NVL_LAT, GAP, CHUNK, KEEP_HIST, KEEP_NV, NPORTS, HEAD) = range(19)
# instruction kinds and call modes (tokenpcap.schedule.program)
I_COMPUTE, I_CALL, I_WAIT, I_MARK = 0, 1, 2, 3
M_BLOCK, M_ASYNC, M_SEND, M_RECV = 0, 1, 2, 3
W_NONE, W_STEP, W_STREAM = -1, 1, 2
PKT_DATA, PKT_CTS, PKT_ACK = 0, 1, 2
# columns of the state tables
M_TR, M_KIND, M_SRC, M_DST, M_QPID, M_SHAPE, M_SIZE, M_START, M_READY, M_FIRST, M_LAST, M_ARR, M_PSN, M_QSEQ, M_BOFF, M_PEER, M_LINK = range(17)
T_WAIT, T_SRCP, T_DSTP, T_SRC, T_NIC, T_BYTES, T_QPID0, T_QPID1, T_SHAPE, T_SNIC, T_DNIC, T_MSG = range(12)
A_RANK, A_PENDING, A_STARTED, A_WAITER, A_SNEXT, A_CALL = range(6)
R_PC, R_END, R_IT, R_BLOCKED, R_SBUSY, R_SWAIT, R_SHEAD, R_STAIL = range(8)
Q_PORT, Q_ORDER, Q_HEAD, Q_NEXT, Q_FHEAD, Q_FTAIL, Q_PSN, Q_COUNT, Q_BYTES = range(9)
P_CLOCK, P_CREATED, P_ACT_LO, P_NACT, P_PTR, P_AHEAD, P_ATAIL, P_NACK, P_WAKE, P_SEL = range(10)
R_NVL, R_MARK = 8, 9   # rk columns after the stream state (R_MARK .. R_MARK + 3: mark starts)




class State(NamedTuple):
    """Arrays of the kernel (int64 unless said; built by :mod:`tokenpcap.schedule.engine.state`).

    ``ms (M, 17)`` messages (``M_*`` columns), ``trs (T, 12)`` transfers (``T_*``), ``dep_ptr``/
    ``dep_list`` a transfer's dependents (CSR), ``part (P, 5)`` participations of ranks in calls
    (``A_*``), ``send_*``/``recv_*`` their transfers (CSR), ``prog_ptr (iterations·W + 1,)`` and
    ``ins (I, 3)`` the programs (kind, a, b), ``rk (W, 13)`` ranks (``R_*``, NVLink free time,
    mark starts), ``qp (Q, 9)`` QPs (``Q_*``), ``pt (N, 10)`` NIC ports (``P_*``), ``act (Q,)``
    each port's eligible QPs sorted by creation (a region per port), ``sh_n (S,)``, ``sh_d (S, 3)``,
    ``sh_fb (S, 3)`` packets, layer-1 ns and frame bytes (FIRST, MIDDLE, LAST) per message shape,
    ``tl (L, 6)`` timeline rows out, ``nv (V, 3)`` NVLink copies out (transfer, start, arrival);
    per call ``call_ab`` (alpha-beta ns of an NVLink-only call timed as a whole, -1 otherwise),
    ``call_nst`` (ranks that started it) and ``call_pbase (C + 1,)`` (its participations).
    """

    ms: np.ndarray
    trs: np.ndarray
    dep_ptr: np.ndarray
    dep_list: np.ndarray
    part: np.ndarray
    send_ptr: np.ndarray
    send_list: np.ndarray
    recv_ptr: np.ndarray
    recv_list: np.ndarray
    prog_ptr: np.ndarray
    ins: np.ndarray
    rk: np.ndarray
    qp: np.ndarray
    pt: np.ndarray
    act: np.ndarray
    sh_n: np.ndarray
    sh_d: np.ndarray
    sh_fb: np.ndarray
    tl: np.ndarray
    nv: np.ndarray
    call_ab: np.ndarray
    call_nst: np.ndarray
    call_pbase: np.ndarray


# ---------------------------------------------------------------- heap

@njit(cache=True)
def _less(h, i, j):
    if h[i, 0] != h[j, 0]:
        return h[i, 0] < h[j, 0]
    if h[i, 1] != h[j, 1]:
        return h[i, 1] < h[j, 1]
    return h[i, 2] < h[j, 2]


@njit(cache=True)
def push(h, sc, t, typ, key2, a, b):
    n = sc[HN]
    if n == h.shape[0]:
        sc[ERR] = 3                     # the caller keeps headroom (run returns 3 to grow)
        return
    h[n, 0] = t * 8 + typ
    h[n, 1] = key2
    h[n, 2] = sc[SEQ]
    h[n, 3] = a
    h[n, 4] = b
    sc[SEQ] += 1
    i = n
    while i > 0:
        par = (i - 1) >> 1
        if _less(h, i, par):
            for c in range(5):
                tmp = h[i, c]
                h[i, c] = h[par, c]
                h[par, c] = tmp
            i = par
        else:
            break
    sc[HN] = n + 1


@njit(cache=True)
def pop(h, sc, row):
    n = sc[HN] - 1
    for c in range(5):
        row[c] = h[0, c]
        h[0, c] = h[n, c]
    sc[HN] = n
    i = 0
    while True:
        lft = 2 * i + 1
        if lft >= n:
            break
        m = lft
        if lft + 1 < n and _less(h, lft + 1, lft):
            m = lft + 1
        if _less(h, m, i):
            for c in range(5):
                tmp = h[i, c]
                h[i, c] = h[m, c]
                h[m, c] = tmp
            i = m
        else:
            break


# ---------------------------------------------------------------- output rows

@njit(cache=True)
def emit(o, sc, t, nic, peer, msg, idx, kind, fb):
    n = sc[NOUT]
    if n == o.shape[0]:
        sc[ERR] = 3
        return
    o[n, 0] = t
    o[n, 1] = nic
    o[n, 2] = peer
    o[n, 3] = msg
    o[n, 4] = idx
    o[n, 5] = kind
    o[n, 6] = fb
    sc[NOUT] = n + 1


# ---------------------------------------------------------------- one NIC

@njit(cache=True)
def _dur(S, q, idx, col_d):
    """Duration (col_d = S.sh_d) or frame bytes (S.sh_fb) of packet ``idx`` of QP q's head."""
    sh = S.ms[S.qp[q, Q_HEAD], M_SHAPE]
    n = S.sh_n[sh]
    if idx == n - 1:
        return col_d[sh, 2]
    if idx == 0:
        return col_d[sh, 0]
    return col_d[sh, 1]


@njit(cache=True)
def _rotation(S, port, qs):
    """Fill qs[:k] with the eligible QPs in service order; returns k."""
    k = S.pt[port, P_NACT]
    lo = S.pt[port, P_ACT_LO]
    ptr = S.pt[port, P_PTR]
    # first active QP whose creation order is after the pointer (binary search: act is sorted)
    a, b = 0, k
    while a < b:
        mid = (a + b) >> 1
        if S.qp[S.act[lo + mid], Q_ORDER] <= ptr:
            a = mid + 1
        else:
            b = mid
    for i in range(k):
        j = a + i
        if j >= k:
            j -= k
        qs[i] = S.act[lo + j]
    return k


@njit(cache=True)
def _stop_slot(S, cf, qs, k):
    every = cf[EVERY]
    s = NEVER
    for i in range(k):
        q = qs[i]
        n = S.sh_n[S.ms[S.qp[q, Q_HEAD], M_SHAPE]]
        nx = S.qp[q, Q_NEXT]
        last = n - nx - 1
        if every > 0:
            j = (every - (nx + 1) % every) % every
            if j < last:
                last = j
        v = last * k + i
        if v < s:
            s = v
    return s


@njit(cache=True)
def _act_insert(S, port, q):
    lo = S.pt[port, P_ACT_LO]
    k = S.pt[port, P_NACT]
    o = S.qp[q, Q_ORDER]
    i = k
    while i > 0 and S.qp[S.act[lo + i - 1], Q_ORDER] > o:
        S.act[lo + i] = S.act[lo + i - 1]
        i -= 1
    S.act[lo + i] = q
    S.pt[port, P_NACT] = k + 1


@njit(cache=True)
def _act_remove(S, port, q):
    lo = S.pt[port, P_ACT_LO]
    k = S.pt[port, P_NACT]
    i = 0
    while S.act[lo + i] != q:
        i += 1
    for j in range(i, k - 1):
        S.act[lo + j] = S.act[lo + j + 1]
    S.pt[port, P_NACT] = k - 1


@njit(cache=True)
def _epoch(S, cf, sc, h, o, port, limit, qs, st):
    """Commit the slots of the rotation that start before ``limit``, up to the stop slot."""
    k = _rotation(S, port, qs)
    s = _stop_slot(S, cf, qs, k)
    clock = S.pt[port, P_CLOCK]
    t = clock
    j = 0
    while j <= s and t < limit:
        if j == k:
            # every slot from here to s - 1 is a MIDDLE packet: skip whole rounds at once
            R = 0
            for i in range(k):
                R += S.sh_d[S.ms[S.qp[qs[i], Q_HEAD], M_SHAPE], 1]
            r = (s - k) // k
            lim = (limit - t) // R
            if lim < r:
                r = lim
            if r > 0:
                t += r * R
                j += r * k
                continue
        q = qs[j % k]
        if j < k:
            st[j] = t
        t += _dur(S, q, S.qp[q, Q_NEXT] + j // k, S.sh_d)
        j += 1
    c = j
    if S.pt[port, P_SEL]:
        tt = clock
        for jj in range(c):
            q = qs[jj % k]
            idx = S.qp[q, Q_NEXT] + jj // k
            hm = S.qp[q, Q_HEAD]
            emit(o, sc, tt, port, S.ms[hm, M_DST], hm, idx, S.ms[hm, M_KIND], _dur(S, q, idx, S.sh_fb))
            tt += _dur(S, q, idx, S.sh_d)
    for i in range(min(k, c)):
        q = qs[i]
        if S.qp[q, Q_NEXT] == 0:
            S.ms[S.qp[q, Q_HEAD], M_FIRST] = st[i]
    for i in range(k):
        if c > i:
            S.qp[qs[i], Q_NEXT] += (c - i + k - 1) // k
    S.pt[port, P_CLOCK] = t
    S.pt[port, P_PTR] = S.qp[qs[(c - 1) % k], Q_ORDER]
    if c == s + 1:
        q = qs[s % k]
        hm = S.qp[q, Q_HEAD]
        push(h, sc, t + cf[LAT] + cf[ACKDELAY], EV_ACK, hm * (MASK24 + 1) + S.qp[q, Q_NEXT] - 1,
             S.ms[hm, M_DST], 0)
        if S.qp[q, Q_NEXT] == S.sh_n[S.ms[hm, M_SHAPE]]:
            S.ms[hm, M_LAST] = t
            push(h, sc, t + cf[LAT], EV_ARRIVE, hm * (MASK24 + 1), 0, 0)
            nxt = S.qp[q, Q_FHEAD]
            if nxt >= 0:
                S.qp[q, Q_FHEAD] = S.ms[nxt, M_LINK]
                if S.qp[q, Q_FHEAD] < 0:
                    S.qp[q, Q_FTAIL] = -1
                S.qp[q, Q_HEAD] = nxt
                S.qp[q, Q_NEXT] = 0
            else:
                S.qp[q, Q_HEAD] = -1
                _act_remove(S, port, q)


@njit(cache=True)
def advance(S, cf, sc, h, a, o, port, limit, qs, st):
    """Commit every frame of ``port`` that starts before ``limit`` (ns)."""
    if S.pt[port, P_CLOCK] < 0 or S.pt[port, P_CLOCK] >= limit:
        return
    while S.pt[port, P_CLOCK] < limit:
        if S.pt[port, P_NACK] > 0:
            d = cf[ACK_NS]
            t = S.pt[port, P_CLOCK]
            fit = (limit - 1 - t) // d + 1
            if fit > S.pt[port, P_NACK]:
                fit = S.pt[port, P_NACK]
            for j in range(fit):
                e = S.pt[port, P_AHEAD]
                if S.pt[port, P_SEL]:
                    msg = a[e, 0]
                    emit(o, sc, t + j * d, port, S.ms[msg, M_SRC], msg, a[e, 1], PKT_ACK, cf[ACK_FB])
                S.pt[port, P_AHEAD] = a[e, 2]
                a[e, 2] = sc[ACKFREE]
                sc[ACKFREE] = e
            if S.pt[port, P_AHEAD] < 0:
                S.pt[port, P_ATAIL] = -1
            S.pt[port, P_NACK] -= fit
            S.pt[port, P_CLOCK] = t + fit * d
        elif S.pt[port, P_NACT] > 0:
            _epoch(S, cf, sc, h, o, port, limit, qs, st)
        else:
            break


@njit(cache=True)
def _touch(S, port, t):
    if S.pt[port, P_CLOCK] < t:
        S.pt[port, P_CLOCK] = t


@njit(cache=True)
def rewake(S, cf, sc, h, port, qs):
    """Queue a wake at the predicted start of ``port``'s stop slot unless one is queued earlier."""
    if S.pt[port, P_NACT] == 0:
        return
    k = _rotation(S, port, qs)
    s = _stop_slot(S, cf, qs, k)
    base = S.pt[port, P_CLOCK] + S.pt[port, P_NACK] * cf[ACK_NS]
    t = base
    dmin = NEVER
    m = k if k < s else s
    for i in range(k):
        q = qs[i]
        sh = S.ms[S.qp[q, Q_HEAD], M_SHAPE]
        if i < m:
            t += (s - i + k - 1) // k * S.sh_d[sh, 1]
            if S.qp[q, Q_NEXT] == 0:
                t += S.sh_d[sh, 0] - S.sh_d[sh, 1]
        for c in range(3):
            if S.sh_d[sh, c] < dmin:
                dmin = S.sh_d[sh, c]
    if S.pt[port, P_SEL]:
        cap = base + cf[GAP] * dmin
        if cap < t:
            t = cap
    if t < S.pt[port, P_WAKE]:
        S.pt[port, P_WAKE] = t
        push(h, sc, t, EV_WAKE, port * (MASK24 + 1), port, 0)


@njit(cache=True)
def ready(S, cf, sc, h, a, o, mid, t, qs, st):
    """Message ``mid`` is posted on its QP at ``t`` (FIFO behind the QP's earlier messages)."""
    port = S.ms[mid, M_SRC]
    advance(S, cf, sc, h, a, o, port, t, qs, st)
    q = S.ms[mid, M_QPID]
    sh = S.ms[mid, M_SHAPE]
    S.ms[mid, M_PSN] = S.qp[q, Q_PSN]
    S.ms[mid, M_QSEQ] = S.qp[q, Q_COUNT]
    S.ms[mid, M_BOFF] = S.qp[q, Q_BYTES]
    S.ms[mid, M_READY] = t
    S.qp[q, Q_PSN] += S.sh_n[sh]
    S.qp[q, Q_COUNT] += 1
    S.qp[q, Q_BYTES] += S.ms[mid, M_SIZE]
    if S.qp[q, Q_HEAD] < 0:
        S.qp[q, Q_HEAD] = mid
        S.qp[q, Q_NEXT] = 0
        _act_insert(S, port, q)
        _touch(S, port, t)
        rewake(S, cf, sc, h, port, qs)
    else:
        S.ms[mid, M_LINK] = -1
        if S.qp[q, Q_FTAIL] >= 0:
            S.ms[S.qp[q, Q_FTAIL], M_LINK] = mid
        else:
            S.qp[q, Q_FHEAD] = mid
        S.qp[q, Q_FTAIL] = mid


@njit(cache=True)
def queue_ack(S, sc, a, port, msg, idx, t):
    e = sc[ACKFREE]
    if e < 0:
        e = sc[ACKTOP]
        if e == a.shape[0]:
            sc[ERR] = 3
            return
        sc[ACKTOP] = e + 1
    else:
        sc[ACKFREE] = a[e, 2]
    a[e, 0] = msg
    a[e, 1] = idx
    a[e, 2] = -1
    if S.pt[port, P_ATAIL] >= 0:
        a[S.pt[port, P_ATAIL], 2] = e
    else:
        S.pt[port, P_AHEAD] = e
    S.pt[port, P_ATAIL] = e
    S.pt[port, P_NACK] += 1
    _touch(S, port, t)


# ---------------------------------------------------------------- the schedule

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
def _ab_done(S, cf, sc, h, lst, c, t):
    """An NVLink-only call timed as a whole is over: every rank's part of it is finished."""
    for p in range(S.call_pbase[c], S.call_pbase[c + 1]):
        S.part[p, A_PENDING] -= 1
        if S.part[p, A_PENDING] == 0 and S.part[p, A_STARTED]:
            _finish(S, cf, sc, h, lst, p, t)


# ---------------------------------------------------------------- the loop

@njit(cache=True)
def commit(S, cf, sc, h, a, o, port, limit, qs, st):
    """Commit ``port``'s frames that start before ``limit`` (and queue its next wake)."""
    advance(S, cf, sc, h, a, o, port, limit, qs, st)
    if limit < NEVER:
        rewake(S, cf, sc, h, port, qs)


@njit(cache=True)
def run(S, cf, sc, h, a, o, lst, qs, st):
    """Process events in order. Returns 1 when the output holds ``cf[CHUNK]`` rows (``sc[FRONT]``
    is then the time of the next event: the caller commits the selected NICs up to it with
    :func:`commit` and hands out the rows before it), 3 when a buffer needs to grow before the
    next event (heap or launch list within ``cf[HEAD]`` of full, ACK pool, output rows within
    ``cf[GAP]`` + 64 of full), 2 on an internal error (``sc[ERR]``), 0 when every event is done."""
    row = np.empty(5, np.int64)
    while sc[HN] > 0:
        if sc[NOUT] >= cf[CHUNK]:
            sc[FRONT] = h[0, 0] >> 3
            return 1
        if (sc[HN] + cf[HEAD] > h.shape[0] or cf[HEAD] > lst.shape[0]
                or (sc[ACKFREE] < 0 and sc[ACKTOP] + 64 > a.shape[0])
                or sc[NOUT] + cf[GAP] + 64 > o.shape[0]):
            return 3
        pop(h, sc, row)
        t = row[0] >> 3
        typ = row[0] & 7
        sc[NOW] = t
        if typ == EV_WAKE:
            port = row[3]
            if t == S.pt[port, P_WAKE]:
                S.pt[port, P_WAKE] = NEVER
                advance(S, cf, sc, h, a, o, port, t + 1, qs, st)
                rewake(S, cf, sc, h, port, qs)
        elif typ == EV_READY:
            ready(S, cf, sc, h, a, o, row[1] >> 24, t, qs, st)
        elif typ == EV_ACK:
            port = row[3]
            advance(S, cf, sc, h, a, o, port, t, qs, st)
            queue_ack(S, sc, a, port, row[1] >> 24, row[1] & MASK24, t)
        elif typ == EV_ARRIVE:
            mid = row[1] >> 24
            S.ms[mid, M_ARR] = t
            if S.ms[mid, M_KIND] == 1:
                ready(S, cf, sc, h, a, o, S.ms[mid, M_PEER], t, qs, st)
            else:
                arrived(S, cf, sc, h, lst, S.ms[mid, M_TR], t)
                flush_out(S, cf, sc, h, lst, t)
        else:
            if row[3] == 0:
                step(S, cf, sc, h, lst, row[4], t)
            elif row[3] == 1:
                arrived(S, cf, sc, h, lst, row[4], t)
            else:
                _ab_done(S, cf, sc, h, lst, row[4], t)
            flush_out(S, cf, sc, h, lst, t)
        if sc[ERR]:
            return 2
    sc[FRONT] = NEVER
    return 0
