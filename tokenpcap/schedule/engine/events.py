"""The compiled engine's vocabulary: event types, the columns of its state tables, the
:class:`State` they make up, the event heap and the output rows (used by
:mod:`tokenpcap.schedule.engine.kernel` and its parts).

The heap is ordered by ``(time·8 + type, key, insertion)``: types READY < ACK < ARRIVE < TIMER <
WAKE at equal times, READY and ARRIVE keyed by message id, ACK by (message, packet), WAKE by NIC,
timers by insertion. A full heap or output buffer sets ``sc[ERR] = 3``: the caller keeps
headroom (``kernel.run`` returns before an event when a buffer is near full).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

__all__ = [
    "EV_READY", "EV_ACK", "EV_ARRIVE", "EV_TIMER", "EV_WAKE", "NEVER", "MASK24", "HN", "SEQ",
    "NMSG", "NOW", "NOUT", "NLAUNCH", "ACKFREE", "ACKTOP", "NTL", "NNV", "ERR", "FRONT", "RDY_NEXT",
    "RDY_END", "MMASK", "HANDED", "HAND_ID", "MNEED", "NSC", "LAT",
    "ACKDELAY", "ACK_NS", "ACK_FB", "EVERY", "CTS", "CTS_BYTES", "CTS_SHAPE", "ITERS", "WORLD",
    "NVL_NUM", "NVL_DEN", "NVL_LAT", "GAP", "CHUNK", "KEEP_HIST", "KEEP_NV", "NPORTS", "HEAD",
    "I_COMPUTE", "I_CALL", "I_WAIT", "I_MARK", "NS_HIGH", "M_BLOCK", "M_ASYNC", "M_SEND", "M_RECV", "W_NONE",
    "W_STEP", "W_STREAM", "PKT_DATA", "PKT_CTS", "PKT_ACK", "M_TR", "M_KIND", "M_SRC", "M_DST",
    "M_QPID", "M_SHAPE", "M_SIZE", "M_START", "M_READY", "M_FIRST", "M_LAST", "M_ARR", "M_PSN",
    "M_QSEQ", "M_BOFF", "M_PEER", "M_LINK", "M_ID", "M_NACK", "M_TLAST", "M_COLS", "A_RANK",
    "A_PENDING",
    "A_STARTED", "A_WAITER", "A_SNEXT", "A_CALL", "R_PC", "R_END", "R_IT", "R_BLOCKED", "R_SBUSY",
    "R_SWAIT", "R_SHEAD", "R_STAIL", "Q_PORT", "Q_ORDER", "Q_HEAD", "Q_FHEAD", "Q_FTAIL",
    "Q_PSN", "Q_COUNT", "Q_BYTES", "P_CLOCK", "P_CREATED", "P_ACT_LO", "P_NACT", "P_PTR", "P_AHEAD",
    "P_ATAIL", "P_NACK", "P_WAKE", "P_SEL", "P_STOP", "P_ROUND", "P_CUR", "X_Q", "X_HEAD",
    "X_N", "X_NEXT", "X_D0", "X_D1", "X_D2", "X_SUCC", "X_PRED", "X_ON", "R_NVL", "R_MARK", "State", "push", "pop", "emit"
]


# event types (total order at equal times)
EV_READY, EV_ACK, EV_ARRIVE, EV_TIMER, EV_WAKE = 0, 1, 2, 3, 4
NEVER = 1 << 62
MASK24 = (1 << 24) - 1
# scalar slots of sc
HN, SEQ, NMSG, NOW, NOUT, NLAUNCH, ACKFREE, ACKTOP, NTL, NNV, ERR, FRONT, RDY_NEXT, RDY_END = range(14)
# the message ring (tokenpcap.schedule.engine.ring): row mask (-1: one row per message, no ring),
# the front and the message count of the last hand-out, rows wanted when the ring was full
MMASK, HANDED, HAND_ID, MNEED = range(14, 18)
NSC = 18
# config slots of cf
(LAT, ACKDELAY, ACK_NS, ACK_FB, EVERY, CTS, CTS_BYTES, CTS_SHAPE, ITERS, WORLD, NVL_NUM, NVL_DEN,
 NVL_LAT, GAP, CHUNK, KEEP_HIST, KEEP_NV, NPORTS, HEAD) = range(19)
# instruction kinds and call modes (tokenpcap.schedule.program)
I_COMPUTE, I_CALL, I_WAIT, I_MARK = 0, 1, 2, 3
#: A COMPUTE instruction's ns is ``a + b * NS_HIGH`` (``ins`` is int32: ``a, b`` in [0, 2**31)).
NS_HIGH = 1 << 31
M_BLOCK, M_ASYNC, M_SEND, M_RECV = 0, 1, 2, 3
W_NONE, W_STEP, W_STREAM = -1, 1, 2
PKT_DATA, PKT_CTS, PKT_ACK = 0, 1, 2
# columns of the state tables
M_TR, M_KIND, M_SRC, M_DST, M_QPID, M_SHAPE, M_SIZE, M_START, M_READY, M_FIRST, M_LAST, M_ARR, M_PSN, M_QSEQ, M_BOFF, M_PEER, M_LINK = range(17)
# a ring's rows only (tokenpcap.schedule.engine.ring): the row's message id, its ACKs not
# settled, the start of its last frame made (ns); a table of one row per message has 17 columns
M_ID, M_NACK, M_TLAST = 17, 18, 19
M_COLS = 20
A_RANK, A_PENDING, A_STARTED, A_WAITER, A_SNEXT, A_CALL = range(6)
R_PC, R_END, R_IT, R_BLOCKED, R_SBUSY, R_SWAIT, R_SHEAD, R_STAIL = range(8)
Q_PORT, Q_ORDER, Q_HEAD, Q_FHEAD, Q_FTAIL, Q_PSN, Q_COUNT, Q_BYTES = range(8)
P_CLOCK, P_CREATED, P_ACT_LO, P_NACT, P_PTR, P_AHEAD, P_ATAIL, P_NACK, P_WAKE, P_SEL, P_STOP, P_ROUND, P_CUR = range(13)
X_Q, X_HEAD, X_N, X_NEXT, X_D0, X_D1, X_D2, X_SUCC, X_PRED, X_ON = range(10)
R_NVL, R_MARK = 8, 9   # rk columns after the stream state (R_MARK .. R_MARK + 3: mark starts)




class State(NamedTuple):
    """Arrays of the kernel (int64 unless said; built by :mod:`tokenpcap.schedule.engine.state`).

    ``ms (R, 20)`` messages (``M_*`` columns), message ``id`` at row ``id & sc[MMASK]`` (a ring
    of rows, :mod:`tokenpcap.schedule.engine.ring`; with ``sc[MMASK] == -1`` ``(M, 17)``, row
    ``id``, the ring's columns ``M_ID``, ``M_NACK``, ``M_TLAST`` absent); the transfers as
    templates (:mod:`tokenpcap.schedule.engine.access` reads them): per transfer only
    ``tw (T,)`` int32 (dependencies not yet arrived) and ``tcall (T,)`` int32 (its call), per
    call ``c_row``, ``c_pos``, ``c_shift``, ``c_nshift``, ``c_qbase (C,)``, per canonical
    transfer row ``ct (R, 10)`` int32 or int64 (``CT_*``) and ``dep_ptr``/``dep_list`` (its
    dependents, rows), per canonical position ``send_*``/``recv_*`` (CSR of rows), ``qglob`` the
    global QP ids of the local QPs; ``part (P, 6)`` int32 participations of ranks in calls
    (``A_*``), ``prog_ptr (iterations·W + 1,)`` and ``ins (I, 3)`` int32 the programs (kind, a,
    b; a COMPUTE's ns is ``a + b·NS_HIGH``), ``rk (W, 13)`` ranks (``R_*``, NVLink free time,
    mark starts), ``qp (Q, 8)`` QPs (``Q_*``), ``pt (N, 13)`` NIC ports (``P_*``), ``ax (Q, 10)``
    the QPs of each port in creation order (a region of rows per port, row ``P_ACT_LO + order``;
    ``X_*``: the QP, its head message, that message's packets, its next packet, its FIRST, MIDDLE
    and LAST layer-1 ns, and while it is eligible its successor and predecessor in the rotation,
    a circular list), ``sh_n (S,)``, ``sh_d (S, 3)``,
    ``sh_fb (S, 3)`` packets, layer-1 ns and frame bytes (FIRST, MIDDLE, LAST) per message shape,
    ``tl (L, 6)`` timeline rows out, ``nv (V, 3)`` NVLink copies out (transfer, start, arrival);
    per call ``call_ab`` (alpha-beta ns of an NVLink-only call timed as a whole, -1 otherwise),
    ``call_nst`` int32 (ranks that started it) and ``call_pbase (C + 1,)`` int32 (its
    participations).
    """

    ms: np.ndarray
    tw: np.ndarray
    tcall: np.ndarray
    ct: np.ndarray
    c_row: np.ndarray
    c_pos: np.ndarray
    c_shift: np.ndarray
    c_nshift: np.ndarray
    c_qbase: np.ndarray
    qglob: np.ndarray
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
    ax: np.ndarray
    sh_n: np.ndarray
    sh_d: np.ndarray
    sh_fb: np.ndarray
    tl: np.ndarray
    nv: np.ndarray
    call_ab: np.ndarray
    call_nst: np.ndarray
    call_pbase: np.ndarray


# ---------------------------------------------------------------- heap

@njit(cache=True, _nrt=False)
def _less(h, i, j):
    if h[i, 0] != h[j, 0]:
        return h[i, 0] < h[j, 0]
    if h[i, 1] != h[j, 1]:
        return h[i, 1] < h[j, 1]
    return h[i, 2] < h[j, 2]


@njit(cache=True, _nrt=False)
def push(h, sc, t, typ, key2, a, b):
    n = sc[HN]
    if n == h.shape[0]:
        sc[ERR] = 3                     # the caller keeps headroom (run returns 3 to grow)
        return
    k0 = t * 8 + typ
    k2 = sc[SEQ]
    sc[SEQ] = k2 + 1
    # sift the hole up from the end, then write the new row once
    i = n
    while i > 0:
        par = (i - 1) >> 1
        p0 = h[par, 0]
        if p0 < k0 or (p0 == k0 and (h[par, 1] < key2 or (h[par, 1] == key2 and h[par, 2] < k2))):
            break
        for c in range(5):
            h[i, c] = h[par, c]
        i = par
    h[i, 0] = k0
    h[i, 1] = key2
    h[i, 2] = k2
    h[i, 3] = a
    h[i, 4] = b
    sc[HN] = n + 1


@njit(cache=True, _nrt=False)
def pop(h, sc, row):
    n = sc[HN] - 1
    for c in range(5):
        row[c] = h[0, c]
    sc[HN] = n
    if n == 0:
        return
    # the last row fills the hole at the root, sifted down without swapping
    x0 = h[n, 0]
    x1 = h[n, 1]
    x2 = h[n, 2]
    x3 = h[n, 3]
    x4 = h[n, 4]
    i = 0
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        if m + 1 < n and _less(h, m + 1, m):
            m += 1
        m0 = h[m, 0]
        if m0 > x0 or (m0 == x0 and (h[m, 1] > x1 or (h[m, 1] == x1 and h[m, 2] > x2))):
            break
        for c in range(5):
            h[i, c] = h[m, c]
        i = m
    h[i, 0] = x0
    h[i, 1] = x1
    h[i, 2] = x2
    h[i, 3] = x3
    h[i, 4] = x4


# ---------------------------------------------------------------- output rows

@njit(cache=True, _nrt=False)
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


