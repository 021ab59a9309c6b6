"""The compiled engine's vocabulary: event types, the columns of its state tables, the
:class:`State` they make up, the event heap and the output rows (used by
:mod:`tokenpcap.schedule.engine.kernel` and its parts).

The heap is ordered by ``(time·8 + type, key, insertion)``: types READY < ACK < ARRIVE < TIMER <
WAKE at equal times, READY and ARRIVE keyed by message id, ACK by (message, packet), WAKE by NIC,
timers by insertion; with a queued fabric (:mod:`tokenpcap.schedule.engine.fabric`) then HOP (a
packet's last bit reaches the far end of a link, keyed by the link; on a link to a NIC with the
fast path, module fabric_fast, the silent packets before it arrive with it), FREE (a switch
port's transmitter is free, keyed by the port) and PFC (a pause ends or an XOFF is refreshed,
keyed by (port, priority)). A full heap or output buffer sets ``sc[ERR] = 3``: the caller keeps
headroom (``kernel.run`` returns before an event when a buffer is near full).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tokenpcap.records import PKT_CNP
from tokenpcap.schedule.engine.compiled import inline_shared, part, shared

__all__ = [
    "EV_READY", "EV_ACK", "EV_ARRIVE", "EV_TIMER", "EV_WAKE", "NEVER", "MASK24", "HN", "SEQ",
    "NMSG", "NOW", "NOUT", "NLAUNCH", "ACKFREE", "ACKTOP", "NTL", "NNV", "ERR", "FRONT", "RDY_NEXT",
    "RDY_END", "MMASK", "HANDED", "HAND_ID", "MNEED", "AB_CALL", "AB_POS", "NSC", "NPOP",
    "NINLINE", "NSTALE", "NEMPTY", "NSTOP", "LAT",
    "ACKDELAY", "ACK_NS", "ACK_FB", "EVERY", "CTS", "CTS_BYTES", "CTS_SHAPE", "ITERS", "WORLD",
    "NVL_NUM", "NVL_DEN", "NVL_LAT", "GAP", "CHUNK", "KEEP_HIST", "KEEP_NV", "NPORTS", "HEAD",
    "I_COMPUTE", "I_CALL", "I_WAIT", "I_MARK", "NS_HIGH", "M_BLOCK", "M_ASYNC", "M_SEND", "M_RECV", "M_WAIT", "W_NONE",
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
EV_READY, EV_ACK, EV_ARRIVE, EV_TIMER, EV_WAKE, EV_HOP, EV_FREE, EV_PFC = 0, 1, 2, 3, 4, 5, 6, 7
NEVER = 1 << 62
MASK24 = (1 << 24) - 1
# scalar slots of sc
HN, SEQ, NMSG, NOW, NOUT, NLAUNCH, ACKFREE, ACKTOP, NTL, NNV, ERR, FRONT, RDY_NEXT, RDY_END = range(14)
# the message ring (tokenpcap.schedule.engine.ring): row mask (-1: one row per message, no ring),
# the front and the message count of the last hand-out, rows wanted when the ring was full
MMASK, HANDED, HAND_ID, MNEED = range(14, 18)
# the queued fabric: free list of packet descriptors, descriptors in use, rows of the PFC and
# queue-depth logs, packet-hops, headroom overflows, drops, PFC frames sent
PKFREE, PKUSED, NLGP, NLGQ, HOPS, HDRM_OVER, DROPS, NPFC = range(18, 26)
# config slots of cf
(LAT, ACKDELAY, ACK_NS, ACK_FB, EVERY, CTS, CTS_BYTES, CTS_SHAPE, ITERS, WORLD, NVL_NUM, NVL_DEN,
 NVL_LAT, GAP, CHUNK, KEEP_HIST, KEEP_NV, NPORTS, HEAD) = range(19)
# the queued fabric (module fabric): on, wake cap of a NIC (ns), timing bytes of an ACK and of a
# PFC frame, buffer bytes = timing bytes - F_BBOFF, serialization rounded down (ns-3) or up, the
# data and control priorities, bitmask of lossless priorities, PFC on, reserve, resume offset,
# pause quanta, pause until resume, cut-through, pipeline ns, ECMP mode and hash, queue sample ns,
# capture point (0 nic-tx, 1 nic-rx, 2 switch port) and its port, switches
(FAB, F_CAP, F_ACK_TB, F_PFC_TB, F_BBOFF, F_FLOOR, F_DPRIO, F_CPRIO, F_LOSSLESS, F_PFC, F_RESERVE,
 F_RESUME, F_QUANTA, F_UNTIL, F_CUT, F_PIPE, F_EMODE, F_EHASH, F_QLEN, F_POINT, F_PPORT,
 F_NSW) = range(19, 41)
# instruction kinds and call modes (tokenpcap.schedule.program)
I_COMPUTE, I_CALL, I_WAIT, I_MARK = 0, 1, 2, 3
#: A COMPUTE instruction's ns is ``a + b * NS_HIGH`` (``ins`` is int32: ``a, b`` in [0, 2**31)).
NS_HIGH = 1 << 31
M_BLOCK, M_ASYNC, M_SEND, M_RECV, M_WAIT = 0, 1, 2, 3, 4
W_NONE, W_STEP, W_STREAM = -1, 1, 2
PKT_DATA, PKT_CTS, PKT_ACK, PKT_PFC = 0, 1, 2, 3
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
# a NIC port's data class is paused until P_PUNTIL (NEVER: until an XON), by PFC from its ToR
P_PUNTIL = 13
P_COLS = 14
X_Q, X_HEAD, X_N, X_NEXT, X_D0, X_D1, X_D2, X_SUCC, X_PRED, X_ON = range(10)
R_NVL, R_MARK = 8, 9   # rk columns after the stream state (R_MARK .. R_MARK + 3: mark starts)
# the queued fabric (module fabric). Switch ports ``fp (P, FP_COLS)``: owner switch, port number,
# the NIC or switch port at the other end (-1), link rate as bits per ns NUM/DEN, propagation ns,
# transmitter busy until, its wire (packets on the link, FIFO of descriptors), pending FREE event
# time, round-robin pointer among data priorities, headroom and PFC threshold shift, counters,
# bytes queued, and the priorities whose PFC frame waits to leave (a bitmask); with the fast path
# (module fabric_fast), on a port whose link ends at a NIC: the arrival time of the packet its
# pending HOP event is for (-1: none pending) and the packets on its wire after that one
(FP_SW, FP_NUM_ON_SW, FP_PEER_NIC, FP_PEER_PORT, FP_RNUM, FP_RDEN, FP_PROP, FP_BUSY, FP_WHEAD,
 FP_WTAIL, FP_FREE, FP_RR, FP_HDRM, FP_SHIFT, FP_TXF, FP_TXB, FP_PFCS, FP_PFCR, FP_PAUSED_NS,
 FP_MAXQ, FP_QBYTES, FP_PFCM) = range(22)
# NICs ``fn (N, FN_COLS)``: the switch port its link enters, propagation, rate NUM/DEN, its wire,
# rx capture selected, IPv4 address, counters (frames and bytes in, PFC frames in, ns paused,
# start of the current pause)
(FN_PORT, FN_PROP, FN_RNUM, FN_RDEN, FN_WHEAD, FN_WTAIL, FN_RXSEL, FN_IP, FN_RXF, FN_RXB,
 FN_PFCR, FN_PAUSED_NS, FN_PAUSE_T0) = range(13)
# switches ``fsw (S, FS_COLS)``: buffer bytes, sum of headroom and of reserve over its ports,
# shared bytes in use, ECMP seed, bytes queued
FS_BUF, FS_HDRM, FS_RSRV, FS_SHARED, FS_SEED, FS_QUEUED = range(6)
FS_COLS = 6
# with planes (module topology_planes) a NIC's port in each plane ``fw (planes * N, FW_COLS)``,
# row ``plane * N + nic`` (no rows with one plane): its wire, its transmitter busy until, the
# switch port its link enters, propagation ns, rate NUM/DEN
FW_WHEAD, FW_WTAIL, FW_BUSY, FW_PORT, FW_PROP, FW_RNUM, FW_RDEN = range(7)
FW_COLS = 7
# packet descriptors ``pk (K, PK_COLS)``: message, packet index, kind (PKT_*; PFC: index = the
# class-enable vector, msg = quanta), frame bytes, timing bytes, source and destination NIC, QP,
# priority, flags (PK_LAST, PK_ACKREQ), ingress switch port, next in its list, arrival time (last
# bit) at the end of its current link, start of its transmission on that link
(PK_MSG, PK_IDX, PK_KIND, PK_FB, PK_TB, PK_SRC, PK_DST, PK_QP, PK_PRIO, PK_FLAGS, PK_IN, PK_NEXT,
 PK_ARR, PK_T0) = range(14)
PK_COLS = 14
PK_LAST, PK_ACKREQ = 1, 2
# egress queues ``fq (P * 8, 4)`` per (port, priority): head, tail, bytes, packets; ingress
# accounting ``fi (P * 8, 6)``: bytes, headroom bytes, XOFF sent; and of the (port, priority)'s
# egress the start of the pause it is in, the packets and bytes it dropped
Q8_HEAD, Q8_TAIL, Q8_BYTES, Q8_PKTS = range(4)
I8_BYTES, I8_HDRM, I8_PAUSED, I8_PT0, I8_DROPS, I8_DROPB = range(6)




class State(NamedTuple):
    """Arrays of the kernel (int64 unless said; built by :mod:`tokenpcap.schedule.engine.state`).

    ``ms (R, 20)`` messages (``M_*`` columns), message ``id`` at row ``id & sc[MMASK]`` (a ring
    of rows, :mod:`tokenpcap.schedule.engine.ring`; with ``sc[MMASK] == -1`` ``(M, 17)``, row
    ``id``, the ring's columns ``M_ID``, ``M_NACK``, ``M_TLAST`` absent); the transfers as
    templates (:mod:`tokenpcap.schedule.engine.access` reads them; nothing is stored per
    transfer): the countdowns (dependencies not yet arrived) of the calls in flight in slabs of
    the int32 pool ``tw`` (:mod:`tokenpcap.schedule.engine.slabs`), per call ``c_slab (C,)`` its
    slab's offset (-1: none held), ``tr_base (C + 1,)`` its first transfer id, ``c_row`` its
    first canonical row, ``c_pos``, ``c_shift``, ``c_nshift``, ``c_qbase (C,)``, per canonical
    transfer row ``ct (R, 10)`` int32 or int64 (``CT_*``) and ``dep_ptr``/``dep_list`` (its
    dependents, rows), per canonical position ``send_*``/``recv_*`` (CSR of rows), ``qglob`` the
    global QP ids of the local QPs; ``part (P, 6)`` int32 participations of ranks in calls
    (``A_*``), ``prog_ptr (iterations·W + 1,)`` and ``ins (I, 3)`` int32 the programs (kind, a,
    b; a COMPUTE's ns is ``a + b·NS_HIGH``), ``rk (W, 13)`` ranks (``R_*``, NVLink free time,
    mark starts), ``qp (Q, Q_COLS)`` QPs (``Q_*``), ``pt (N, 13)`` NIC ports (``P_*``), ``ax (Q, X_COLS)``
    the QPs of each port in creation order (a region of rows per port, row ``P_ACT_LO + order``;
    ``X_*``: the QP, its head message, that message's packets, its next packet, its FIRST, MIDDLE
    and LAST layer-1 ns, and while it is eligible its successor and predecessor in the rotation,
    a circular list), ``sh_n (S,)``, ``sh_d (S, 3)``,
    ``sh_fb (S, 3)`` packets, layer-1 ns and frame bytes (FIRST, MIDDLE, LAST) per message shape,
    ``tl (L, 6)`` timeline rows out, ``nv (V, 3)`` NVLink copies out (transfer, start, arrival);
    per call ``call_ab`` (alpha-beta ns of an NVLink-only call timed as a whole, -1 otherwise),
    ``call_nst`` int32 (ranks that started it) and ``call_pbase (C + 1,)`` int32 (its
    participations).

    The queued fabric (:mod:`tokenpcap.schedule.engine.fabric`; one-row placeholders with an
    ideal fabric): ``fp (P, FP_COLS)`` switch ports, ``fq (8P, 4)`` egress queues and ``fi (8P, 6)``
    ingress accounting per (port, priority) (and its egress pause start and drops), ``fpu (8P,)`` the time each (port, priority) is
    paused until by PFC from downstream, ``fpv (8P,)`` the PFC frame waiting to leave the port for
    that priority (-1 none, 0 XON, else XOFF quanta), ``fsw (S, FS_COLS)`` switches,
    ``fn (N, FN_COLS)`` NICs, ``pk (K, PK_COLS)`` packet descriptors, routes ``rt_ptr (S·S + 1,)``
    and ``rt_port`` (candidate egress ports of switch s towards leaf L:
    ``rt_port[rt_ptr[s·S + L]: rt_ptr[s·S + L + 1]]``), per QP its pair's UDP source port
    ``q_sport`` and the destination QPN ``q_dqpn``, per message shape the timing bytes of its
    FIRST, MIDDLE, LAST packets ``sh_tb (S, 3)``, the PFC log ``lgp (L, 6)`` (time, switch, port
    number, priority, XOFF, quanta), the queue-depth log ``lgq (L, 5)`` (interval start, switch,
    port number, priority, most bytes) and ``qsamp (8P, 2)`` each queue's current interval and
    its most bytes; with planes the NICs' plane ports ``fw (planes·N, FW_COLS)`` (no rows with
    one plane) and per QP the plane of its data and of its ACKs ``q_plane (Q, 2)``.

    Congestion control (:mod:`~tokenpcap.schedule.engine.ecn`,
    :mod:`~tokenpcap.schedule.engine.npoint`, :mod:`~tokenpcap.schedule.engine.rpoint`):
    the CNP log ``lgn (L, 4)`` (time a CNP reaches its reaction point, notification point NIC,
    reaction point NIC, QP), the rate log ``lgr`` float64 ``(L, NRL)`` and the per-QP DCQCN state
    ``rp`` float64 ``(Q, NDQ)`` and parameters ``rpp`` float64 ``(NDP,)``
    (:mod:`tokenpcap.schedule.engine.dcqcn`), and per QP its peer NIC ``q_peer``.

    The canonical order of an instant's launches (``cf[CANON]``,
    :func:`~tokenpcap.schedule.engine.canon.canon_less`): per call ``c_key (C,)`` int64, equal
    for the calls of one (iteration, family instance) (every group of one collective), and per
    canonical row ``ct_j (R,)`` int32 its index in its sender position's send list.
    """

    ms: np.ndarray
    tw: np.ndarray
    c_slab: np.ndarray
    tr_base: np.ndarray
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
    # the queued fabric (module fabric; empty with an ideal one)
    fp: np.ndarray
    fq: np.ndarray
    fi: np.ndarray
    fpu: np.ndarray
    fpv: np.ndarray
    fsw: np.ndarray
    fn: np.ndarray
    pk: np.ndarray
    rt_ptr: np.ndarray
    rt_port: np.ndarray
    q_sport: np.ndarray
    q_dqpn: np.ndarray
    sh_tb: np.ndarray
    lgp: np.ndarray
    lgq: np.ndarray
    qsamp: np.ndarray
    fw: np.ndarray
    q_plane: np.ndarray
    # ECN, CNPs and DCQCN (modules ecn, npoint, rpoint; empty with an ideal fabric)
    lgn: np.ndarray
    lgr: np.ndarray
    rp: np.ndarray
    rpp: np.ndarray
    q_peer: np.ndarray
    # the canonical order of one instant's launches (cf[CANON]; module canon)
    c_key: np.ndarray
    ct_j: np.ndarray


# ---------------------------------------------------------------- heap
# A 4-ary heap of rows ``(key0, key1, key2, a, b)`` ordered by ``(key0, key1, key2)`` (``key0 =
# time·8 + type``, ``key2`` the insertion number, so no two rows are equal): the children of row
# ``i`` are rows ``4i + 1 .. 4i + 4``. Half the levels of a binary heap; a level of the pop
# compares its children pairwise (two independent comparisons, then one), so its chain of
# dependent loads is half as long (d-ary heaps: Johnson 1975; Knuth TAOCP vol. 3, 5.2.3). The
# order in which rows are popped depends only on their keys, not on the heap's shape.

@part
def _lt(h, i, j):
    """Row ``i`` of the heap sorts before row ``j``."""
    a0 = h[i, 0]
    b0 = h[j, 0]
    if a0 != b0:
        return a0 < b0
    if h[i, 1] != h[j, 1]:
        return h[i, 1] < h[j, 1]
    return h[i, 2] < h[j, 2]


@shared
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
        par = (i - 1) >> 2
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


@inline_shared
def pop(h, sc, row):
    """Take the heap's first row into ``row``. The hole at the root goes down to a leaf along the
    smallest children, then the last row is sifted up from there (Floyd's bottom-up deletion,
    Knuth TAOCP vol. 3, 5.2.3): the last row is seldom smaller than a leaf's parent, so
    that costs about one comparison, where sifting it down from the root also compared it with
    the smallest child at every level."""
    n = sc[HN] - 1
    for c in range(5):
        row[c] = h[0, c]
    sc[HN] = n
    if n == 0:
        return
    i = 0
    m = 1
    while m < n:
        if m + 3 < n:
            m1 = m + 1 if _lt(h, m + 1, m) else m
            m2 = m + 3 if _lt(h, m + 3, m + 2) else m + 2
            if _lt(h, m2, m1):
                m1 = m2
            m = m1
        else:
            best = m
            for k in range(m + 1, n):
                if _lt(h, k, best):
                    best = k
            m = best
        for c in range(5):
            h[i, c] = h[m, c]
        i = m
        m = 4 * i + 1
    # the hole is at leaf i; the last row (n) fills it, sifted up
    x0 = h[n, 0]
    x1 = h[n, 1]
    x2 = h[n, 2]
    x3 = h[n, 3]
    x4 = h[n, 4]
    while i > 0:
        par = (i - 1) >> 2
        p0 = h[par, 0]
        if p0 < x0 or (p0 == x0 and (h[par, 1] < x1 or (h[par, 1] == x1 and h[par, 2] < x2))):
            break
        for c in range(5):
            h[i, c] = h[par, c]
        i = par
    h[i, 0] = x0
    h[i, 1] = x1
    h[i, 2] = x2
    h[i, 3] = x3
    h[i, 4] = x4


# ---------------------------------------------------------------- output rows

@part
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


__all__ += [
    "EV_HOP", "EV_FREE", "EV_PFC", "PKFREE", "PKUSED", "NLGP", "NLGQ", "HOPS", "HDRM_OVER",
    "DROPS", "NPFC", "FAB", "F_CAP", "F_ACK_TB", "F_PFC_TB", "F_BBOFF", "F_FLOOR", "F_DPRIO",
    "F_CPRIO", "F_LOSSLESS", "F_PFC", "F_RESERVE", "F_RESUME", "F_QUANTA", "F_UNTIL", "F_CUT",
    "F_PIPE", "F_EMODE", "F_EHASH", "F_QLEN", "F_POINT", "F_PPORT", "F_NSW", "NCF", "PKT_PFC",
    "P_PUNTIL", "P_COLS", "FP_SW", "FP_NUM_ON_SW", "FP_PEER_NIC", "FP_PEER_PORT", "FP_RNUM",
    "FP_RDEN", "FP_PROP", "FP_BUSY", "FP_WHEAD", "FP_WTAIL", "FP_FREE", "FP_RR", "FP_HDRM",
    "FP_SHIFT", "FP_TXF", "FP_TXB", "FP_PFCS", "FP_PFCR", "FP_PAUSED_NS", "FP_MAXQ", "FP_QBYTES", "FP_PFCM",
    "FP_COLS", "FN_PORT", "FN_PROP", "FN_RNUM", "FN_RDEN", "FN_WHEAD", "FN_WTAIL", "FN_RXSEL",
    "FN_IP", "FN_RXF", "FN_RXB", "FN_PFCR", "FN_PAUSED_NS", "FN_PAUSE_T0", "FN_COLS", "FS_BUF",
    "FS_HDRM", "FS_RSRV", "FS_SHARED", "FS_SEED", "FS_QUEUED", "FS_COLS", "PK_MSG", "PK_IDX",
    "PK_KIND", "PK_FB", "PK_TB", "PK_SRC", "PK_DST", "PK_QP", "PK_PRIO", "PK_FLAGS", "PK_IN",
    "PK_NEXT", "PK_ARR", "PK_T0", "PK_COLS", "PK_LAST", "PK_ACKREQ", "Q8_HEAD", "Q8_TAIL",
    "Q8_BYTES", "Q8_PKTS", "I8_BYTES", "I8_HDRM", "I8_PAUSED", "I8_PT0", "I8_DROPS", "I8_DROPB",
    "FW_WHEAD", "FW_WTAIL", "FW_BUSY", "FW_PORT", "FW_PROP", "FW_RNUM", "FW_RDEN", "FW_COLS",
]


# ---------------------------------------------------------------- ECN, CNPs, DCQCN
# (modules ecn, npoint, rpoint; every column below comes after the queued fabric's)
# PKT_CNP: a congestion notification packet (tokenpcap.records)
#: added to an output row's kind when its packet carries CE (the runner turns it into the rows'
#: ``flags``, tokenpcap.records.TX_FLAG_CE)
OUT_CE = 0x80
#: descriptor flags: the packet carries CE (ECN 3); an ACK carries the CNP flag (HPCC ns-3's
#: ``qbbHeader::FLAG_CNP``: the CNP travels inside the ACK)
PK_CE, PK_CNP = 4, 8
#: the ACK-queue entry's flags above its packet index (``a[e, 1] >> 24``): the ACK carries
#: the CNP flag, the entry is a CNP frame
AQ_CNPACK, AQ_CNP = 1, 2
#: scalar slots: CE marks made by switches, CNPs sent by notification points, rows of the CNP
#: and the rate logs
NCE, NCNP, NLGN, NLGR = range(26, 30)
#: scalar slots: an NVLink-only call whose end is being processed when the launch list or
#: the heap ran short (-1: none) and the first of its participations not yet finished
#: (module progs, ``ab_done``: the run returns 3 to grow them and resumes there)
AB_CALL, AB_POS = 30, 31
#: scalar slots counting what the loop did (read by :meth:`tokenpcap.schedule.runner.Schedule.
#: event_counts` and ``benchmarks/engine_timing.py``; they change nothing): events popped from
#: the heap by type (``NPOP + EV_*``), messages posted at their creating event's instant without
#: the heap (``NINLINE``), wakes popped after their port's wake had moved (``NSTALE``), wakes
#: that committed no stop slot (``NEMPTY``), stop slots committed (``NSTOP``)
NPOP = 32
NINLINE, NSTALE, NEMPTY, NSTOP = 40, 41, 42, 43
#: scalar slots of the countdown slabs (module slabs): the pool's first word never used, the
#: words of the slabs held, and from ``SLAB_FREE`` the head of each size class's free list
#: (``SLAB_FREE + k`` for slabs of ``2**k`` words, k < 32; -1: empty)
SLAB_TOP, SLAB_LIVE, SLAB_FREE = 44, 45, 46
NSC = SLAB_FREE + 32
#: config slots: ECN marking (0 off, 1 at dequeue, 2 at enqueue), bitmask of the marked
#: priorities, RED draw seed, congestion control (0 none, 1 DCQCN), a notification point's
#: least ns between two CNPs of one QP (0: one per marked packet), CNP inside the ACK, CNP
#: timing bytes, frame bytes and NIC serialization ns
(F_ECN, F_ECN_PRIOS, F_ECN_SEED, F_CC, F_CNP_GAP, F_CNP_INACK, F_CNP_TB, F_CNP_FB,
 F_CNP_NS) = range(41, 50)
#: switch port columns: RED K_min and K_max (bytes), P_max x PMAX_ONE, CE marks it made
FP_KMIN, FP_KMAX, FP_PMAX, FP_CE = range(22, 26)
PMAX_ONE = 1 << 32
#: NIC columns: CE-marked frames received, CNPs sent (as NP), CNPs received (as RP)
FN_CE, FN_CNPTX, FN_CNPRX = range(13, 16)
FN_COLS = 16
#: QP columns (``qp (Q, Q_COLS)``): CE-marked packets of its data received at its peer, the
#: time its notification point last sent it a CNP (-1: never), CNPs its NIC received
Q_CE, Q_NPLAST, Q_CNPRX = range(8, 11)
Q_COLS = 11
#: sub-kinds of EV_PFC events (row[3]; 0, 1 switch PFC timers, 2 a NIC pause end): a QP's DCQCN
#: timer (key (3 << 40) + QP), a paced QP's next allowed time (key (4 << 40) + QP)
EV_CC_RP, EV_CC_PACE = 3, 4
#: rotation-row columns (``ax (Q, X_COLS)``): a paced QP's next allowed start (ns) and its rate
#: (bit/s; 0: not paced, at the line rate), module rpoint
X_NA, X_RATE = 10, 11
#: rotation-row columns read when a stop slot of the head message is committed, copied from
#: its row when it becomes the head (module link, ``_load``; the row is in cache then, and not
#: read again at its stop): its receiving NIC, and its arrival's event words (module ring,
#: ``arrival_words``)
X_DST, X_ARRA, X_ARRB = 12, 13, 14
X_COLS = 15
__all__ += ["PKT_CNP", "OUT_CE", "PK_CE", "PK_CNP", "AQ_CNPACK", "AQ_CNP", "NCE", "NCNP", "NLGN", "NLGR",
            "F_ECN", "F_ECN_PRIOS", "F_ECN_SEED", "F_CC", "F_CNP_GAP", "F_CNP_INACK", "F_CNP_TB",
            "F_CNP_FB", "F_CNP_NS", "PMAX_ONE", "FP_KMIN", "FP_KMAX", "FP_PMAX", "FP_CE", "FN_CE", "FN_CNPTX",
            "FN_CNPRX", "Q_CE", "Q_NPLAST", "Q_CNPRX", "Q_COLS", "EV_CC_RP", "EV_CC_PACE", "X_NA",
            "X_RATE", "X_DST", "X_ARRA", "X_ARRB", "X_COLS"]


# ---------------------------------------------------------------- the fast path
# (module fabric_fast; every column below comes after the congestion control's)
#: config slot: the fast path on (1) or off (0: every packet's arrival at a NIC is an event of
#: its own, and a NIC wakes one shortest frame after its next frame's start)
F_FAST = 50
#: config slots of the order of the transfers launched at one instant (module progs,
#: ``flush_out``): 0 each event's launches become messages right after the event, in the order
#: it launched them; 1 (canonical) every launch of the instant is kept until the instant's last
#: event before its wakes, then sorted by :func:`~tokenpcap.schedule.engine.canon.canon_less`
#: (a key invariant under the translation of the data-parallel index), so that what a NIC and a
#: rank see at one instant does not depend on the order in which the instant's events ran.
#: ``C_STRIDE`` ranks between two data-parallel indices, ``C_DP`` data-parallel replicas.
CANON, C_STRIDE, C_DP = 51, 52, 53
#: config slot: the countdown pool's words free past ``sc[SLAB_TOP]`` before every event (module
#: slabs, ``slab_words``)
SLAB_HEAD = 54
NCF = 55
#: switch port columns of the fast path (module fabric_fast)
FP_FEV, FP_FN = 26, 27
FP_COLS = 28
__all__ += ["F_FAST", "FP_FEV", "FP_FN", "CANON", "C_STRIDE", "C_DP", "SLAB_TOP", "SLAB_LIVE",
            "SLAB_FREE", "SLAB_HEAD"]


# ---------------------------------------------------------------- the fabric's specialization
#: The last argument of the functions whose code reaches the queued fabric's (``kernel.run`` and
#: ``commit``, ``link.ready``, ``advance``, ``rewake``): ``QUEUED`` with a queued fabric, ``None``
#: with an ideal one. numba removes a branch on ``fabric is not None`` before typing when the
#: argument is ``None`` (its dead-branch pruning, ``numba.core.analysis.dead_branch_prune``), so
#: an ideal fabric's run types and compiles none of the fabric's, ECN's and DCQCN's functions:
#: each value is a specialization of its own in numba's cache, compiled at its first use.
QUEUED = True
__all__ += ["QUEUED"]
