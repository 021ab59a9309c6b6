"""One NIC's transmit side in closed form (part of :mod:`tokenpcap.schedule.engine.kernel`):
posting a message on its QP, the ACK queue, committing the frames that start before a time
(the round-robin epochs) and predicting the next frame with consequences (the wake).

A port's QPs have the rows ``P_ACT_LO + order`` of ``S.ax`` (``order``: creation order on the
port), each carrying what the rotation reads (``X_*``: QP, head message, its packets, next packet,
FIRST/MIDDLE/LAST layer-1 ns), so an epoch never reads the message table. The eligible ones form
a circular list in creation order (``X_SUCC``/``X_PRED``), ``P_CUR`` is the row served next (the
first eligible QP created after the one served last, ``P_PTR``): joining and leaving the rotation
cost ``O(1)`` plus the walk to the next eligible row. Two per-port values are kept between events
instead of being recomputed:

* ``P_ROUND``: the sum of the MIDDLE durations of the eligible QPs (one round of the rotation),
  updated when a QP joins or leaves the rotation or its head message changes;
* ``P_STOP``: the stop slot counted from the port's next slot, or -1 when unknown. Committing
  ``c`` slots before it leaves the same QP's same packet as the stop, ``c`` slots nearer
  (``P_STOP - c``); it is recomputed (``O(k)`` for ``k`` eligible QPs) only after the stop slot
  itself was sent, or when a QP joined or left the rotation; the recomputation walks the rotation
  only while the slot index is below the best stop found.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import inline_part, part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import emit, push
from tokenpcap.schedule.engine.fabric import inject
from tokenpcap.schedule.engine.ring import arrival_words
from tokenpcap.schedule.engine.pace import pace_next

__all__ = ["advance", "rewake", "ready", "queue_ack", "touch", "act_link", "control_frame"]


@part
def _dur(ax, e, idx):
    """Layer-1 ns of packet ``idx`` of the head message of rotation row ``e``."""
    if idx == ax[e, X_N] - 1:
        return ax[e, X_D2]
    if idx == 0:
        return ax[e, X_D0]
    return ax[e, X_D1]


@part
def _stop(S, cf, port, k):
    """The stop slot (first slot whose packet is the last of its message or carries AckReq),
    counted from the port's next slot; cached in ``P_STOP``."""
    ax = S.ax
    pt = S.pt
    s = pt[port, P_STOP]
    if s >= 0:
        return s
    every = cf[EVERY]
    s = NEVER
    e = pt[port, P_CUR]
    for i in range(k):
        if i >= s:
            break                       # slot i·k + i' >= i for every later QP
        last = ax[e, X_N] - ax[e, X_NEXT] - 1
        if every > 0:
            j = (every - (ax[e, X_NEXT] + 1) % every) % every
            if j < last:
                last = j
        if ax[e, X_RATE] > 0:
            last = 0                    # paced (module rpoint): it leaves after each packet
        v = last * k + i
        if v < s:
            s = v
        e = ax[e, X_SUCC]
    pt[port, P_STOP] = s
    return s


@part
def _load(S, sc, e, mid):
    """Rotation row ``e`` takes message ``mid`` as its head (next packet 0), with what its stop
    slots need from its row (``X_DST``, ``X_ARRA``, ``X_ARRB``: module ring)."""
    ax = S.ax
    ms = S.ms
    sh_d = S.sh_d
    sh_n = S.sh_n
    r = mid & sc[MMASK]
    sh = ms[r, M_SHAPE]
    ax[e, X_DST] = ms[r, M_DST]
    ax[e, X_ARRA], ax[e, X_ARRB] = arrival_words(ms, sc, mid)
    ax[e, X_HEAD] = mid
    ax[e, X_N] = sh_n[sh]
    ax[e, X_NEXT] = 0
    ax[e, X_D0] = sh_d[sh, 0]
    ax[e, X_D1] = sh_d[sh, 1]
    ax[e, X_D2] = sh_d[sh, 2]


@part
def _act_insert(S, sc, port, q, mid):
    """QP ``q`` joins its port's rotation with head ``mid``: linked in creation order, and the
    port's next QP when it comes before the current one after the last served."""
    r = S.pt[port, P_ACT_LO] + S.qp[q, Q_ORDER]
    S.ax[r, X_Q] = q
    _load(S, sc, r, mid)
    act_link(S, port, r)


@part
def act_link(S, port, r):
    """Rotation row ``r`` (its head loaded) joins its port's rotation (:func:`_act_insert`; a
    paced QP's rejoin, module rpoint)."""
    ax = S.ax
    pt = S.pt
    lo = pt[port, P_ACT_LO]
    k = pt[port, P_NACT]
    o = r - lo
    ax[r, X_ON] = 1
    if k == 0:
        ax[r, X_SUCC] = r
        ax[r, X_PRED] = r
        pt[port, P_CUR] = r
    else:
        n = pt[port, P_CREATED]
        j = r + 1
        while True:
            if j == lo + n:
                j = lo
            if ax[j, X_ON] and j != r:
                break
            j += 1
        p = ax[j, X_PRED]
        ax[r, X_SUCC] = j
        ax[r, X_PRED] = p
        ax[p, X_SUCC] = r
        ax[j, X_PRED] = r
        ptr = pt[port, P_PTR]
        co = pt[port, P_CUR] - lo
        rank_new = o - ptr - 1 if o > ptr else o - ptr - 1 + n
        rank_cur = co - ptr - 1 if co > ptr else co - ptr - 1 + n
        if rank_new < rank_cur:
            pt[port, P_CUR] = r
    pt[port, P_NACT] = k + 1
    pt[port, P_ROUND] += ax[r, X_D1]
    pt[port, P_STOP] = -1


@part
def _act_remove(S, port, e):
    ax = S.ax
    pt = S.pt
    k = pt[port, P_NACT]
    pt[port, P_ROUND] -= ax[e, X_D1]
    ax[e, X_ON] = 0
    if k == 1:
        pt[port, P_CUR] = -1
    else:
        sn = ax[e, X_SUCC]
        p = ax[e, X_PRED]
        ax[p, X_SUCC] = sn
        ax[sn, X_PRED] = p
        if pt[port, P_CUR] == e:
            pt[port, P_CUR] = sn
    pt[port, P_NACT] = k - 1
    pt[port, P_STOP] = -1


@inline_part
def _epoch(S, cf, sc, h, o, port, limit, fabric):
    """Commit the slots of the rotation that start before ``limit``, up to the stop slot
    (``fabric``: as :func:`advance`)."""
    ax = S.ax
    ms = S.ms
    mk = sc[MMASK]
    pt = S.pt
    qp = S.qp
    sh_fb = S.sh_fb
    k = pt[port, P_NACT]
    start = pt[port, P_CUR]
    s = _stop(S, cf, port, k)
    R = pt[port, P_ROUND]
    clock = pt[port, P_CLOCK]
    t = clock
    j = 0
    rnd = 0                             # j // k
    e = start                           # rotation row of slot j
    el = start                          # rotation row of slot j - 1
    while j <= s and t < limit:
        if j == k:
            # every slot from here to s - 1 is a MIDDLE packet: skip whole rounds at once
            r = (s - k) // k
            lim = (limit - t) // R
            if lim < r:
                r = lim
            if r > 0:
                t += r * R
                j += r * k
                rnd += r
                continue
        idx = ax[e, X_NEXT] + rnd
        if idx == 0:
            ms[ax[e, X_HEAD] & mk, M_FIRST] = t
        t += _dur(ax, e, idx)
        j += 1
        el = e
        e = ax[e, X_SUCC]
        if e == start:
            rnd += 1
    c = j
    fab = cf[FAB]
    sel = pt[port, P_SEL]
    if sel or fab:
        every = cf[EVERY]
        tt = clock
        e2 = start
        rnd = 0
        for jj in range(c):
            idx = ax[e2, X_NEXT] + rnd
            hm = ax[e2, X_HEAD]
            r = hm & mk
            sh = ms[r, M_SHAPE]
            n = ax[e2, X_N]
            col = 2 if idx == n - 1 else (0 if idx == 0 else 1)
            fb = sh_fb[sh, col]
            d = _dur(ax, e2, idx)
            if sel:
                emit(o, sc, tt, port, ms[r, M_DST], hm, idx, ms[r, M_KIND], fb)
                if mk >= 0 and ms[r, M_TLAST] < tt:
                    ms[r, M_TLAST] = tt
            if fabric is not None and fab:
                fl = PK_LAST | PK_ACKREQ if idx == n - 1 else (
                    PK_ACKREQ if every > 0 and (idx + 1) % every == 0 else 0)
                inject(S, cf, sc, h, port, tt, d, hm, idx, ms[r, M_KIND], fb, S.sh_tb[sh, col], fl,
                       ax[e2, X_Q])
            tt += d
            e2 = ax[e2, X_SUCC]
            if e2 == start:
                rnd += 1
    full = c // k
    rem = c - full * k
    e2 = start
    for i in range(k if full > 0 else rem):
        ax[e2, X_NEXT] += full + (1 if i < rem else 0)
        e2 = ax[e2, X_SUCC]
    pt[port, P_CLOCK] = t
    pt[port, P_PTR] = el - pt[port, P_ACT_LO]
    pt[port, P_CUR] = e
    if c <= s:
        pt[port, P_STOP] = s - c
        return
    # the stop slot was sent (it is the last committed slot, row el)
    pt[port, P_STOP] = -1
    sc[NSTOP] += 1
    hm = ax[el, X_HEAD]
    r = hm & mk
    nxt_pkt = ax[el, X_NEXT]
    q = ax[el, X_Q]
    if fabric is not None and ax[el, X_RATE] > 0:
        # a paced QP's packet (module rpoint): its next start at its rate, counted from this one
        col = 2 if nxt_pkt == ax[el, X_N] else (0 if nxt_pkt == 1 else 1)
        d = _dur(ax, el, nxt_pkt - 1)
        ax[el, X_NA] = pace_next(S, sc, h, q, t - d, S.sh_tb[ms[r, M_SHAPE], col])
    every = cf[EVERY]
    if nxt_pkt < ax[el, X_N] and (every == 0 or nxt_pkt % every):
        pace_leave(S, sc, h, port, el, t)           # a stop only for its pacing
        return
    dst = ax[el, X_DST]
    if not fab:
        push(h, sc, t + cf[LAT] + cf[ACKDELAY], EV_ACK, hm * (MASK24 + 1) + nxt_pkt - 1, dst, 0)
    if mk >= 0 and (fab or pt[dst, P_SEL]):
        ms[r, M_NACK] += 1              # its ACK's frame will name it (module ring)
    if nxt_pkt == ax[el, X_N]:
        ms[r, M_LAST] = t
        if not fab:
            push(h, sc, t + cf[LAT], EV_ARRIVE, hm * (MASK24 + 1), ax[el, X_ARRA], ax[el, X_ARRB])
        q = ax[el, X_Q]
        nxt = qp[q, Q_FHEAD]
        if nxt >= 0:
            qp[q, Q_FHEAD] = ms[nxt & mk, M_LINK]
            if qp[q, Q_FHEAD] < 0:
                qp[q, Q_FTAIL] = -1
            qp[q, Q_HEAD] = nxt
            pt[port, P_ROUND] -= ax[el, X_D1]
            _load(S, sc, el, nxt)
            pt[port, P_ROUND] += ax[el, X_D1]
        else:
            qp[q, Q_HEAD] = -1
            _act_remove(S, port, el)
    pace_leave(S, sc, h, port, el, t)


@part
def pace_leave(S, sc, h, port, e, t):
    """A paced rotation row ``e`` that just sent (the port's clock at ``t``) leaves the
    rotation until its next allowed start ``X_NA`` when that is later, on a timer keyed by its
    QP (module rpoint)."""
    ax = S.ax
    if ax[e, X_ON] and ax[e, X_RATE] > 0 and ax[e, X_NA] > t:
        _act_remove(S, port, e)
        q = ax[e, X_Q]
        push(h, sc, ax[e, X_NA], EV_PFC, (EV_CC_PACE << 40) + q, EV_CC_PACE, q)


@part
def control_frame(cf, flags):
    """``(kind, ns, frame bytes, timing bytes, descriptor flags)`` of an ACK-queue entry with
    flags ``flags`` (``a[e, 1] >> 24``: 0 an ACK, ``AQ_CNPACK`` an ACK with the CNP flag,
    ``AQ_CNP`` a CNP frame; module npoint)."""
    if flags == AQ_CNP:
        return PKT_CNP, cf[F_CNP_NS], cf[F_CNP_FB], cf[F_CNP_TB], 0
    return PKT_ACK, cf[ACK_NS], cf[ACK_FB], cf[F_ACK_TB], PK_CNP if flags == AQ_CNPACK else 0


@inline_part
def advance(S, cf, sc, h, a, o, port, limit, fabric):
    """Commit every frame of ``port`` that starts before ``limit`` (ns). ``fabric``: ``QUEUED``
    with a queued fabric, ``None`` with an ideal one (its code is then left out:
    :data:`~tokenpcap.schedule.engine.events.QUEUED`)."""
    ms = S.ms
    mk = sc[MMASK]
    pt = S.pt
    if pt[port, P_CLOCK] < 0 or pt[port, P_CLOCK] >= limit:
        return
    while pt[port, P_CLOCK] < limit:
        if pt[port, P_NACK] > 0:
            t = pt[port, P_CLOCK]
            while pt[port, P_NACK] > 0 and t < limit:
                e = pt[port, P_AHEAD]
                msg = a[e, 0]
                idx = a[e, 1] & MASK24
                kind, d, fb, tb, fl = control_frame(cf, a[e, 1] >> 24)
                if pt[port, P_SEL]:
                    # the ACK's frame names its message: settled here (module ring)
                    r = msg & mk
                    emit(o, sc, t, port, ms[r, M_SRC], msg, idx, kind, fb)
                    if mk >= 0:
                        if ms[r, M_TLAST] < t:
                            ms[r, M_TLAST] = t
                        ms[r, M_NACK] -= 1
                elif cf[FAB] and mk >= 0:
                    ms[msg & mk, M_NACK] -= 1
                if fabric is not None and cf[FAB]:
                    # the ACK enters the fabric (it holds its message's row while in flight)
                    inject(S, cf, sc, h, port, t, d, msg, idx, kind, fb, tb, fl, ms[msg & mk, M_QPID])
                pt[port, P_AHEAD] = a[e, 2]
                a[e, 2] = sc[ACKFREE]
                sc[ACKFREE] = e
                pt[port, P_NACK] -= 1
                t += d
            if pt[port, P_AHEAD] < 0:
                pt[port, P_ATAIL] = -1
            pt[port, P_CLOCK] = t
        elif pt[port, P_NACT] > 0:
            u = pt[port, P_PUNTIL]
            if fabric is not None and cf[FAB] and u > pt[port, P_CLOCK]:
                # the data priority is paused by PFC from the ToR (module fabric)
                if u >= limit:
                    break
                pt[port, P_CLOCK] = u
                continue
            _epoch(S, cf, sc, h, o, port, limit, fabric)
        else:
            break


@part
def touch(S, port, t):
    pt = S.pt
    if pt[port, P_CLOCK] < t:
        pt[port, P_CLOCK] = t


@part
def rewake(S, cf, sc, h, port, fabric):
    """Queue a wake at the predicted start of ``port``'s stop slot unless one is queued earlier
    (``fabric``: as :func:`advance`)."""
    pt = S.pt
    k = pt[port, P_NACT]
    if fabric is not None and cf[FAB]:
        _rewake_fab(S, cf, sc, h, port, k)
        return
    if k == 0:
        return
    base = pt[port, P_CLOCK] + pt[port, P_NACK] * cf[ACK_NS]
    t = _stop_start(S, cf, port, k, base)
    if pt[port, P_SEL]:
        t = _gap_cap(S, cf, port, k, base, t)
    if t < pt[port, P_WAKE]:
        pt[port, P_WAKE] = t
        push(h, sc, t, EV_WAKE, port * (MASK24 + 1), port, 0)


@part
def _gap_cap(S, cf, port, k, base, t):
    """``t``, or earlier: the start of the ``cf[GAP]``-th shortest frame of the rotation after
    ``base`` (a selected NIC's rows are committed in bounded batches)."""
    ax = S.ax
    dmin = NEVER
    e = S.pt[port, P_CUR]
    for i in range(k):
        for c in range(X_D0, X_D2 + 1):
            if ax[e, c] < dmin:
                dmin = ax[e, c]
        e = ax[e, X_SUCC]
    cap = base + cf[GAP] * dmin
    return cap if cap < t else t


@part
def _stop_start(S, cf, port, k, base):
    """Start (ns) of ``port``'s stop slot when its next slot starts at ``base``: whole rounds of
    the rotation, the remaining slots' MIDDLE durations, and each QP's FIRST in place of a
    MIDDLE where its next packet is its message's first."""
    ax = S.ax
    pt = S.pt
    s = _stop(S, cf, port, k)
    full = s // k
    rem = s - full * k
    t = base + full * pt[port, P_ROUND]
    m = k if k < s else s
    e = pt[port, P_CUR]
    for i in range(m):
        if i < rem:
            t += ax[e, X_D1]
        if ax[e, X_NEXT] == 0:
            t += ax[e, X_D0] - ax[e, X_D1]
        e = ax[e, X_SUCC]
    return t


@part
def _wake_at(S, sc, h, port, t):
    pt = S.pt
    if t < pt[port, P_WAKE]:
        pt[port, P_WAKE] = t
        push(h, sc, t, EV_WAKE, port * (MASK24 + 1), port, 0)


@part
def _rewake_fab(S, cf, sc, h, port, k):
    """:func:`rewake` with a queued fabric: the predicted stop slot (for a selected NIC at most
    ``cf[GAP]`` shortest frames away), a pause, and the cap that commits every frame before it
    reaches the ToR (``cf[F_CAP]``: :func:`tokenpcap.schedule.engine.fabstate.wake_cap_ns`)."""
    pt = S.pt
    clock = pt[port, P_CLOCK]
    t = NEVER
    first = NEVER
    if pt[port, P_NACK] > 0:
        first = clock
    if k > 0:
        base = clock + pt[port, P_NACK] * cf[ACK_NS]
        u = pt[port, P_PUNTIL]
        if u > base:
            base = u                    # NEVER: paused until an XON
        if base < NEVER:
            if base < first:
                first = base
            t = _stop_start(S, cf, port, k, base)
            if pt[port, P_SEL]:
                t = _gap_cap(S, cf, port, k, base, t)
    if first < NEVER and first + cf[F_CAP] < t:
        t = first + cf[F_CAP]
    if t < NEVER:
        _wake_at(S, sc, h, port, t)


@inline_part
def ready(S, cf, sc, h, a, o, mid, t, fabric):
    """Message ``mid`` is posted on its QP at ``t`` (FIFO behind the QP's earlier messages;
    ``fabric``: as :func:`advance`)."""
    ms = S.ms
    mk = sc[MMASK]
    qp = S.qp
    sh_n = S.sh_n
    r = mid & mk
    port = ms[r, M_SRC]
    advance(S, cf, sc, h, a, o, port, t, fabric)
    q = ms[r, M_QPID]
    sh = ms[r, M_SHAPE]
    ms[r, M_PSN] = qp[q, Q_PSN]
    ms[r, M_QSEQ] = qp[q, Q_COUNT]
    ms[r, M_BOFF] = qp[q, Q_BYTES]
    ms[r, M_READY] = t
    qp[q, Q_PSN] += sh_n[sh]
    qp[q, Q_COUNT] += 1
    qp[q, Q_BYTES] += ms[r, M_SIZE]
    if qp[q, Q_HEAD] < 0:
        qp[q, Q_HEAD] = mid
        _act_insert(S, sc, port, q, mid)
        touch(S, port, t)
        rewake(S, cf, sc, h, port, fabric)
    else:
        ms[r, M_LINK] = -1
        if qp[q, Q_FTAIL] >= 0:
            ms[qp[q, Q_FTAIL] & mk, M_LINK] = mid
        else:
            qp[q, Q_FHEAD] = mid
        qp[q, Q_FTAIL] = mid


@part
def queue_ack(S, cf, sc, a, port, msg, idx, t):
    pt = S.pt
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
    if pt[port, P_ATAIL] >= 0:
        a[pt[port, P_ATAIL], 2] = e
    else:
        pt[port, P_AHEAD] = e
    pt[port, P_ATAIL] = e
    pt[port, P_NACK] += 1
    touch(S, port, t)

