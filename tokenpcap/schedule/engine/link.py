"""One NIC's transmit side in closed form (part of :mod:`tokenpcap.schedule.engine.kernel`):
posting a message on its QP, the ACK queue, committing the frames that start before a time
(the round-robin epochs) and predicting the next frame with consequences (the wake).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import emit, push

__all__ = ["advance", "rewake", "ready", "queue_ack"]


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


