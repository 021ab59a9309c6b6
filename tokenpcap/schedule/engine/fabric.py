"""The queued fabric inside the compiled engine (part of :mod:`tokenpcap.schedule.engine.kernel`):
switches that store and forward every packet through per-(egress port, priority) FIFOs of a
shared buffer, with priority-based flow control (PFC, IEEE 802.1Qbb) from ingress accounting.

With ``cf[FAB] == 1`` every frame a NIC sends (data, clear-to-send writes, ACKs) enters the fabric
when its NIC commits it (:func:`inject`), instead of arriving ``network.latency_ns`` after its last
bit; it then crosses links and switches packet by packet, and its arrival at the destination NIC
(:func:`hop`) is what queues the ACK and the message's arrival, so a transfer that depends on
another starts when the other really arrived (closed loop).

**Links.** A link is a FIFO of packet descriptors in flight (a *wire*: the NIC's uplink, index
``nic``, or a switch port's link, index ``N + port``). A packet that starts at ``t0`` on a link of
rate ``r`` arrives at its far end at ``t0 + ser + prop`` (its last bit: store-and-forward) with
``ser`` the serialization of its timing bytes at ``r`` (the same layer-1 accounting as the NICs:
frame + FCS + preamble + inter-frame gap, ceiling ns; or ns-3's payload + 48 B, truncated), or, into
a switch that cuts through, at ``t0 + prop + pipeline_ns`` (its head, as when both sides run at one
rate). Arrivals on a link are in order, so a wire holds one heap event: its head's arrival (HOP;
on a link to a NIC with the fast path, the arrival of its first packet with consequences there:
:mod:`~tokenpcap.schedule.engine.fabric_fast`).

**Planes** (:mod:`~tokenpcap.schedule.engine.topology_planes`). A NIC has one port in each
plane (``S.fw``); its frames keep the NIC's one transmitter (its round robin over all its QPs
at ``link_gbps``) and then leave on the port of their QP's plane (``S.q_plane``; an ACK on the
port of its QP's other end), each port a FIFO at its own rate (``link_gbps / planes``), and are
routed towards the destination's port in the same plane.

**Switches.** A packet that arrives at a switch is routed towards the leaf of its destination NIC
(``rt_ptr``/``rt_port``: up-down routes, several candidates when ECMP applies, chosen by
:func:`tokenpcap.schedule.engine.ecmp.ecmp_index` on the RoCEv2 5-tuple, the destination QPN or
the packet index, seeded per switch), admitted by ingress accounting, and queued at its egress
port in the FIFO of its priority. A free transmitter sends, at each frame boundary: a waiting PFC
frame first, then the control priority (ACKs; strict), then the data priorities round-robin,
skipping those paused by the downstream device. A port with nothing queued starts a packet the
moment it arrives (no event of its own); a busy one is woken by one FREE event when it is free.

**Ingress accounting and PFC** (:mod:`~tokenpcap.schedule.engine.fabric_mmu`; HPCC ns-3 ``switch-mmu.cc`` ``UpdateIngressAdmission``,
``RemoveFromIngressAdmission``, ``CheckShouldPause``, ``CheckShouldResume``, ``GetPfcThreshold``; the
same knobs as SONiC's buffer profiles): per (ingress port, lossless priority) the first
``reserve`` bytes are guaranteed, then bytes come from the switch's shared pool while the
(port, priority)'s shared use stays below the dynamic threshold ``alpha x (buffer - sum of
headroom - sum of reserve - shared in use)`` (``alpha = 2^-shift`` per port), and beyond it from the
port's headroom. XOFF is sent on the ingress port (to the upstream NIC or switch) when headroom is
in use or the shared use reaches the threshold; XON when the headroom is empty and the shared use
is at most the threshold minus the resume offset (or zero). A lossless priority never drops: a
packet that would overflow the headroom is admitted and counted (``sc[HDRM_OVER]``), which the
caller reports. A lossy priority drops what does not fit the buffer (``sc[DROPS]``); data and
clear-to-send writes cannot be retransmitted by this model, so their drop is an error
(``sc[ERR] = 5``).

**Pauses.** The upstream port stops sending that priority when the XOFF's last bit arrives (a
frame already started goes on), for ``quanta x 512`` bit times at its rate, or until an XON with
``F_UNTIL`` (ns-3's convention); the switch refreshes an XOFF halfway through its pause time while
it still holds it. A NIC's data priority carries all its QPs; its ACKs (control priority) go on.

Capture rows (``emit``, :data:`tokenpcap.schedule.engine.port.TX_DTYPE`): ``F_POINT`` 1 (nic-rx)
writes the frames a selected NIC receives, timed at their first bit's arrival; 2 a switch port's
egress (a port mirror), timed at their first bit leaving it. A PFC frame's row: ``nic`` =
``-1 - port`` of the switch port that sends it, ``peer_nic`` the NIC it goes to (or ``-1 -`` the
switch port), ``msg`` its quanta (0: XON), ``index`` its class-enable vector.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import emit, push
from tokenpcap.schedule.engine.ecmp import ecmp_index
from tokenpcap.schedule.engine.ecn import ecn_mark
from tokenpcap.schedule.engine.fabric_fast import fast_wire, next_event, skip_silent, wire_pushed
from tokenpcap.schedule.engine.fabric_mmu import admit, release
from tokenpcap.schedule.engine.fabric_stats import flush_samples, log_pfc, sample
from tokenpcap.schedule.engine.ring import push_arrival

__all__ = ["ser_ns", "inject", "hop", "deliver", "free_event", "pfc_event", "pk_free",
           "flush_samples"]

_UDP_ROCE = 4791


@part
def ser_ns(cf, tb, num, den):
    """Serialization (ns) of ``tb`` timing bytes at ``num / den`` bits per ns (ceiling, or floor
    with ``cf[F_FLOOR]``: ns-3's ``DataRate::CalculateTxTime`` through ``Seconds(double)``)."""
    x = tb * 8 * den
    if cf[F_FLOOR]:
        return x // num
    return (x + num - 1) // num


@part
def _alloc(S, sc):
    k = sc[PKFREE]
    sc[PKFREE] = S.pk[k, PK_NEXT]
    sc[PKUSED] += 1
    return k


@part
def pk_free(S, sc, k):
    S.pk[k, PK_NEXT] = sc[PKFREE]
    sc[PKFREE] = k
    sc[PKUSED] -= 1


@part
def _wire(S, cf, w):
    """Wire ``w``: ``(table, row, head column, tail column)``: a NIC's uplink (``w < N``, row of
    ``S.fn``), a switch port's link (row ``w - N`` of ``S.fp``) or, with planes, a NIC's port in
    a plane (row ``w - N - P`` of ``S.fw``)."""
    N = cf[NPORTS]
    if w < N:
        return S.fn, w, FN_WHEAD, FN_WTAIL
    P = S.fp.shape[0]
    if w < N + P:
        return S.fp, w - N, FP_WHEAD, FP_WTAIL
    return S.fw, w - N - P, FW_WHEAD, FW_WTAIL


@part
def _plane(S, k):
    """The plane of descriptor ``k``: its QP's data plane, or for an ACK or a CNP (both go
    from the data's receiver back to its sender) its ACK plane."""
    kind = S.pk[k, PK_KIND]
    return S.q_plane[S.pk[k, PK_QP], 1 if kind == PKT_ACK or kind == PKT_CNP else 0]


@part
def _wire_push(S, cf, sc, h, w, k, t0, arr):
    """Descriptor ``k`` starts at ``t0`` on wire ``w`` and arrives at its far end at ``arr``."""
    pk = S.pk
    pk[k, PK_ARR] = arr
    pk[k, PK_T0] = t0
    pk[k, PK_NEXT] = -1
    tab, r, ch, ct = _wire(S, cf, w)
    empty = tab[r, ct] < 0
    if empty:
        tab[r, ch] = k
    else:
        pk[tab[r, ct], PK_NEXT] = k
    tab[r, ct] = k
    if fast_wire(S, cf, w):
        wire_pushed(S, sc, h, w, r, k, arr)
    elif empty:
        push(h, sc, arr, EV_HOP, w, w, 0)


@part
def inject(S, cf, sc, h, nic, t0, d, msg, idx, kind, fb, tb, flags, qp):
    """NIC ``nic`` starts a frame at ``t0`` that holds its link ``d`` ns: the packet enters the
    fabric (its ToR receives it ``prop`` later; the whole frame ``d`` after that unless it cuts
    through)."""
    pk = S.pk
    k = _alloc(S, sc)
    pk[k, PK_MSG] = msg
    pk[k, PK_IDX] = idx
    pk[k, PK_KIND] = kind
    pk[k, PK_FB] = fb
    pk[k, PK_TB] = tb
    pk[k, PK_SRC] = nic
    pk[k, PK_QP] = qp
    pk[k, PK_FLAGS] = flags
    pk[k, PK_IN] = -1
    if kind == PKT_ACK or kind == PKT_CNP:
        pk[k, PK_DST] = S.ms[msg & sc[MMASK], M_SRC]
        pk[k, PK_PRIO] = cf[F_CPRIO]
    else:
        pk[k, PK_DST] = S.ms[msg & sc[MMASK], M_DST]
        pk[k, PK_PRIO] = cf[F_DPRIO]
    if sc[MMASK] >= 0:
        S.ms[msg & sc[MMASK], M_NACK] += 1          # in flight: the row is held (module ring)
    if S.fw.shape[0] > 0:
        # planes: the frame leaves on the NIC's port in its QP's plane, at that port's rate,
        # after the frames before it on that port (module topology_planes)
        fw = S.fw
        r = _plane(S, k) * cf[NPORTS] + nic
        t1 = t0 if t0 > fw[r, FW_BUSY] else fw[r, FW_BUSY]
        ser = ser_ns(cf, tb, fw[r, FW_RNUM], fw[r, FW_RDEN])
        fw[r, FW_BUSY] = t1 + ser
        prop = fw[r, FW_PROP]
        arr = t1 + prop + cf[F_PIPE] if cf[F_CUT] else t1 + ser + prop + cf[F_PIPE]
        _wire_push(S, cf, sc, h, cf[NPORTS] + S.fp.shape[0] + r, k, t1, arr)
        return
    prop = S.fn[nic, FN_PROP]
    arr = t0 + prop + cf[F_PIPE] if cf[F_CUT] else t0 + d + prop + cf[F_PIPE]
    _wire_push(S, cf, sc, h, nic, k, t0, arr)


@part
def _request_pfc(S, cf, sc, h, o, q, p, quanta, t):
    """Queue a PFC frame for priority ``p`` on switch port ``q`` (it leaves at the next frame
    boundary, ahead of any data: a FREE event of the port at ``t`` or when it is free; no call
    back into the transmit path, which is where the request comes from)."""
    S.fpv[q * 8 + p] = quanta
    fp = S.fp
    fp[q, FP_PFCM] |= 1 << p
    if fp[q, FP_FREE] < 0:
        w = fp[q, FP_BUSY] if fp[q, FP_BUSY] > t else t
        fp[q, FP_FREE] = w
        push(h, sc, w, EV_FREE, q, q, 0)


@part
def _route(S, cf, s, k):
    """Egress port of switch ``s`` for descriptor ``k``."""
    pk = S.pk
    fn = S.fn
    d = pk[k, PK_DST]
    if S.fw.shape[0] > 0:
        ep = S.fw[_plane(S, k) * cf[NPORTS] + d, FW_PORT]
    else:
        ep = fn[d, FN_PORT]
    leaf = S.fp[ep, FP_SW]
    if leaf == s:
        return ep
    b = s * cf[F_NSW] + leaf
    lo = S.rt_ptr[b]
    n = S.rt_ptr[b + 1] - lo
    if n == 1:
        return S.rt_port[lo]
    src = pk[k, PK_SRC]
    qp = pk[k, PK_QP]
    j = ecmp_index(cf[F_EMODE], cf[F_EHASH], fn[src, FN_IP], fn[d, FN_IP], S.q_sport[qp],
                   _UDP_ROCE, S.q_dqpn[qp], pk[k, PK_IDX], S.fsw[s, FS_SEED], n)
    return S.rt_port[lo + j]


@part
def _switch_in(S, cf, sc, h, o, q, k, t):
    """Descriptor ``k`` has arrived on port ``q`` of its switch at ``t``."""
    pk = S.pk
    fp = S.fp
    if pk[k, PK_KIND] == PKT_PFC:
        _port_pause(S, cf, sc, h, o, q, k, t)
        pk_free(S, sc, k)
        return
    s = fp[q, FP_SW]
    e = _route(S, cf, s, k)
    p = pk[k, PK_PRIO]
    bb = pk[k, PK_TB] - cf[F_BBOFF]
    if p != cf[F_CPRIO]:
        if cf[F_PFC] and (cf[F_LOSSLESS] >> p) & 1:
            if admit(S, cf, sc, s, q, p, bb):
                _request_pfc(S, cf, sc, h, o, q, p, cf[F_QUANTA], t)
        elif S.fsw[s, FS_QUEUED] + bb > S.fsw[s, FS_BUF]:
            sc[DROPS] += 1
            S.fi[e * 8 + p, I8_DROPS] += 1
            S.fi[e * 8 + p, I8_DROPB] += pk[k, PK_FB]
            if pk[k, PK_KIND] != PKT_ACK and pk[k, PK_KIND] != PKT_CNP:
                sc[ERR] = 5                          # a lost data packet: not retransmitted here
            if sc[MMASK] >= 0:
                S.ms[pk[k, PK_MSG] & sc[MMASK], M_NACK] -= 1
            pk_free(S, sc, k)
            return
    pk[k, PK_IN] = q
    pk[k, PK_NEXT] = -1
    if cf[F_ECN] == 2:
        ecn_mark(S, cf, sc, e, p, k)
    i = e * 8 + p
    fq = S.fq
    before = fq[i, Q8_BYTES]
    if fq[i, Q8_TAIL] >= 0:
        pk[fq[i, Q8_TAIL], PK_NEXT] = k
    else:
        fq[i, Q8_HEAD] = k
    fq[i, Q8_TAIL] = k
    fq[i, Q8_BYTES] += bb
    fq[i, Q8_PKTS] += 1
    S.fsw[s, FS_QUEUED] += bb
    fp[e, FP_QBYTES] += bb
    sample(S, cf, sc, e, p, before, t)
    _kick(S, cf, sc, h, o, e, t)


@part
def _kick(S, cf, sc, h, o, e, t):
    """Port ``e`` has something new to send at ``t``: start it now, or be woken when free."""
    fp = S.fp
    if fp[e, FP_BUSY] <= t:
        _port_start(S, cf, sc, h, o, e, t)
    elif fp[e, FP_FREE] < 0:
        fp[e, FP_FREE] = fp[e, FP_BUSY]
        push(h, sc, fp[e, FP_BUSY], EV_FREE, e, e, 0)


@part
def free_event(S, cf, sc, h, o, e, t):
    """FREE: port ``e``'s transmitter is free at ``t``."""
    fp = S.fp
    fp[e, FP_FREE] = -1
    if fp[e, FP_BUSY] <= t:
        _port_start(S, cf, sc, h, o, e, t)
    else:
        # another event at this instant started a frame first: wait for that one
        fp[e, FP_FREE] = fp[e, FP_BUSY]
        push(h, sc, fp[e, FP_BUSY], EV_FREE, e, e, 0)


@part
def _pick(S, cf, e, t):
    """Priority whose queue port ``e`` serves next at ``t`` (-1: none eligible)."""
    fq = S.fq
    c = cf[F_CPRIO]
    if fq[e * 8 + c, Q8_HEAD] >= 0:
        return c
    rr = S.fp[e, FP_RR]
    for j in range(1, 9):
        p = (rr + j) & 7
        if p != c and fq[e * 8 + p, Q8_HEAD] >= 0 and S.fpu[e * 8 + p] <= t:
            S.fp[e, FP_RR] = p
            return p
    return -1


@part
def _port_start(S, cf, sc, h, o, e, t):
    """Port ``e`` is idle at ``t``: send its next frame, if any (module docstring)."""
    fp = S.fp
    pk = S.pk
    for p in range(8 if fp[e, FP_PFCM] else 0):
        v = S.fpv[e * 8 + p]
        if v >= 0:
            S.fpv[e * 8 + p] = -1
            fp[e, FP_PFCM] &= ~(1 << p)
            k = _alloc(S, sc)
            pk[k, PK_MSG] = v
            pk[k, PK_IDX] = 1 << p
            pk[k, PK_KIND] = PKT_PFC
            pk[k, PK_FB] = 60
            pk[k, PK_TB] = cf[F_PFC_TB]
            pk[k, PK_SRC] = -1 - e
            pk[k, PK_DST] = fp[e, FP_PEER_NIC] if fp[e, FP_PEER_NIC] >= 0 else -1 - fp[e, FP_PEER_PORT]
            pk[k, PK_PRIO] = p
            pk[k, PK_FLAGS] = 0
            log_pfc(S, sc, e, p, v, t)
            fp[e, FP_PFCS] += 1
            sc[NPFC] += 1
            if v > 0 and not cf[F_UNTIL]:
                # refresh the XOFF halfway through its pause time while it is still held
                half = (v * 512 * fp[e, FP_RDEN] + fp[e, FP_RNUM] - 1) // fp[e, FP_RNUM] // 2
                push(h, sc, t + (half if half > 0 else 1), EV_PFC, e * 8 + p, 0, e * 8 + p)
            _transmit(S, cf, sc, h, o, e, k, t)
            return
    p = _pick(S, cf, e, t)
    if p < 0:
        return
    i = e * 8 + p
    fq = S.fq
    k = fq[i, Q8_HEAD]
    fq[i, Q8_HEAD] = pk[k, PK_NEXT]
    if fq[i, Q8_HEAD] < 0:
        fq[i, Q8_TAIL] = -1
    bb = pk[k, PK_TB] - cf[F_BBOFF]
    before = fq[i, Q8_BYTES]
    fq[i, Q8_BYTES] -= bb
    fq[i, Q8_PKTS] -= 1
    s = fp[e, FP_SW]
    S.fsw[s, FS_QUEUED] -= bb
    fp[e, FP_QBYTES] -= bb
    sample(S, cf, sc, e, p, before, t)
    if cf[F_ECN] == 1:
        ecn_mark(S, cf, sc, e, p, k)
    if p != cf[F_CPRIO] and cf[F_PFC] and (cf[F_LOSSLESS] >> p) & 1:
        if release(S, cf, s, pk[k, PK_IN], p, bb):
            _request_pfc(S, cf, sc, h, o, pk[k, PK_IN], p, 0, t)
    _transmit(S, cf, sc, h, o, e, k, t)


@part
def _transmit(S, cf, sc, h, o, e, k, t):
    """Port ``e`` starts sending descriptor ``k`` at ``t``."""
    fp = S.fp
    pk = S.pk
    ser = ser_ns(cf, pk[k, PK_TB], fp[e, FP_RNUM], fp[e, FP_RDEN])
    prop = fp[e, FP_PROP]
    peer = fp[e, FP_PEER_NIC]
    if peer < 0 and cf[F_CUT]:
        arr = t + prop + cf[F_PIPE]
    elif peer < 0:
        arr = t + ser + prop + cf[F_PIPE]
    else:
        arr = t + ser + prop
    fp[e, FP_TXF] += 1
    fp[e, FP_TXB] += pk[k, PK_FB]
    kind = pk[k, PK_KIND]
    pt_ = cf[F_POINT]
    row = -1
    if pt_ == 2 and e == cf[F_PPORT]:
        row = t
    elif pt_ == 1 and peer >= 0 and S.fn[peer, FN_RXSEL]:
        row = t + prop
    if row >= 0:
        if kind == PKT_PFC:
            emit(o, sc, row, pk[k, PK_SRC], pk[k, PK_DST], pk[k, PK_MSG], pk[k, PK_IDX], kind, 60)
        else:
            emit(o, sc, row, pk[k, PK_SRC], pk[k, PK_DST], pk[k, PK_MSG], pk[k, PK_IDX],
                 kind | (OUT_CE if pk[k, PK_FLAGS] & PK_CE else 0), pk[k, PK_FB])
            mk = sc[MMASK]
            if mk >= 0:
                r = pk[k, PK_MSG] & mk
                if S.ms[r, M_TLAST] < row:
                    S.ms[r, M_TLAST] = row
    _wire_push(S, cf, sc, h, cf[NPORTS] + e, k, t, arr)
    fp[e, FP_BUSY] = t + ser
    more = fp[e, FP_PFCM] != 0 or fp[e, FP_QBYTES] > 0 or S.fq[e * 8 + cf[F_CPRIO], Q8_HEAD] >= 0
    if more and fp[e, FP_FREE] < 0:
        fp[e, FP_FREE] = t + ser
        push(h, sc, t + ser, EV_FREE, e, e, 0)


@part
def _port_pause(S, cf, sc, h, o, e, k, t):
    """A PFC frame from downstream arrived on switch port ``e``: pause or resume its priorities."""
    fp = S.fp
    fp[e, FP_PFCR] += 1
    vec = S.pk[k, PK_IDX]
    quanta = S.pk[k, PK_MSG]
    for p in range(8):
        if (vec >> p) & 1:
            i = e * 8 + p
            if quanta == 0:
                if S.fpu[i] > t:
                    fp[e, FP_PAUSED_NS] += t - S.fi[i, I8_PT0]
                S.fpu[i] = t
                _kick(S, cf, sc, h, o, e, t)
            else:
                if S.fpu[i] <= t:
                    S.fi[i, I8_PT0] = t
                if cf[F_UNTIL]:
                    S.fpu[i] = NEVER
                else:
                    until = t + (quanta * 512 * fp[e, FP_RDEN] + fp[e, FP_RNUM] - 1) // fp[e, FP_RNUM]
                    S.fpu[i] = until
                    push(h, sc, until, EV_PFC, i, 1, i)


@part
def pfc_event(S, cf, sc, h, o, kind, i, t):
    """PFC timer of switch (port, priority) ``i``: 0 refresh an XOFF still held, 1 a pause ends."""
    e = i // 8
    p = i % 8
    if kind == 0:
        if S.fi[i, I8_PAUSED] and S.fpv[i] < 0:
            _request_pfc(S, cf, sc, h, o, e, p, cf[F_QUANTA], t)
    elif S.fpu[i] == t:
        S.fp[e, FP_PAUSED_NS] += t - S.fi[i, I8_PT0]
        _kick(S, cf, sc, h, o, e, t)


@part
def hop(S, cf, sc, h, o, w, t):
    """HOP: the head of wire ``w`` reaches the far end at ``t``. Returns ``(nic, k)`` when it is a
    frame for a NIC that the NIC must act on (``k`` left allocated: a PFC frame, which the caller
    applies to the NIC's port), else ``(-1, -1)``."""
    pk = S.pk
    tab, r, ch, ct = _wire(S, cf, w)
    fast = fast_wire(S, cf, w)
    if fast:
        skip_silent(S, r, sc, t)
    k = tab[r, ch]
    nx = pk[k, PK_NEXT]
    tab[r, ch] = nx
    if nx < 0:
        tab[r, ct] = -1
    elif fast:
        next_event(S, sc, h, w, r)
    else:
        push(h, sc, pk[nx, PK_ARR], EV_HOP, w, w, 0)
    sc[HOPS] += 1
    if w < cf[NPORTS]:
        _switch_in(S, cf, sc, h, o, S.fn[w, FN_PORT], k, t)
        return -1, -1
    if w >= cf[NPORTS] + S.fp.shape[0]:
        _switch_in(S, cf, sc, h, o, S.fw[r, FW_PORT], k, t)
        return -1, -1
    nic = S.fp[r, FP_PEER_NIC]
    if nic < 0:
        _switch_in(S, cf, sc, h, o, S.fp[r, FP_PEER_PORT], k, t)
        return -1, -1
    fn = S.fn
    fn[nic, FN_RXF] += 1
    fn[nic, FN_RXB] += pk[k, PK_FB]
    kind = pk[k, PK_KIND]
    if kind == PKT_PFC or kind == PKT_CNP or pk[k, PK_FLAGS] & (PK_CE | PK_CNP):
        return nic, k                   # PFC (module nicpfc), congestion control (rpoint)
    deliver(S, cf, sc, h, nic, k, t, 0)
    return -1, -1


@part
def deliver(S, cf, sc, h, nic, k, t, aflags):
    """Descriptor ``k`` (data, clear-to-send, ACK or CNP; freed here) is received by NIC ``nic``
    at ``t``: a packet with AckReq queues its ACK (with the ACK-queue flags ``aflags``, module
    events' ``AQ_*``), a message's last packet its arrival."""
    pk = S.pk
    kind = pk[k, PK_KIND]
    msg = pk[k, PK_MSG]
    if kind != PKT_ACK and kind != PKT_CNP:
        fl = pk[k, PK_FLAGS]
        if fl & PK_ACKREQ:
            push(h, sc, t + cf[ACKDELAY], EV_ACK, msg * (MASK24 + 1) + pk[k, PK_IDX], nic, aflags)
        if fl & PK_LAST:
            push_arrival(h, sc, S.ms, t, msg)
    if sc[MMASK] >= 0:
        S.ms[msg & sc[MMASK], M_NACK] -= 1
    pk_free(S, sc, k)
