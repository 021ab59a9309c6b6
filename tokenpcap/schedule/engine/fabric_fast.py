"""The queued fabric's fast path (part of :mod:`tokenpcap.schedule.engine.fabric`, on with
``cf[F_FAST]``): the same results as the per-packet path, with fewer events.

**Silent arrivals at a NIC.** Most packets that reach a NIC have no consequence there beyond
counters: a packet without flags (neither the last of its message nor asking for an ACK) and
an ACK only add to the NIC's frames and bytes received and to the fabric's packet-hops, give
back their descriptor, and settle the hold they had on their message's row
(:mod:`tokenpcap.schedule.engine.ring`). Such a packet needs no event of its own: the wire of a
switch port whose link ends at a NIC keeps its HOP event for the first packet on it that has
consequences (a flag, a PFC frame, any kind or flag a later part gives meaning to) or, at the
latest, for the :data:`SILENT_RUN`-th packet; that event takes every packet before it off the
wire first (:func:`skip_silent`, in arrival order). A wire's packets arrive in order, so every
packet with consequences is still handled alone at its own arrival time, in the heap's order:
message times, ACKs, PFC, captures and logs are those of the per-packet path. What changes is
only when the counters of silent packets are added (at the next event of their wire, or at the
end of the run: :func:`drain`) and when their rows' holds are settled: never after the message's
last packet on the same wire, and at most :data:`SILENT_RUN` - 1 packets per wire later (a
message whose packets take several wires, ``ecmp.mode: spray``, may keep its row a little
longer, which only grows the ring).

**A NIC's wake** (:func:`tokenpcap.schedule.engine.fabstate.wake_cap_ns`): a frame must be in
the fabric before its arrival at the ToR, at least the NIC link's propagation after its start,
so a NIC commits all the frames that start within that time at one wake instead of one or two.

Both are switched off together (``cf[F_FAST] = 0``,
:data:`tokenpcap.schedule.engine.fabstate.FAST_PATH`): what the tests compare against.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push

__all__ = ["SILENT_RUN", "fast_wire", "wire_pushed", "skip_silent", "next_event", "drain"]

#: Most packets a NIC's downlink holds behind its pending event (or with none pending): bounds
#: the descriptors and message rows that silent packets hold after their arrival.
SILENT_RUN = 64


@part
def fast_wire(S, cf, w):
    """True when wire ``w`` is a switch port's link to a NIC and the fast path is on (wires from
    ``N + P`` on, if any, are a NIC's own ports: module fabric)."""
    e = w - cf[NPORTS]
    return cf[F_FAST] != 0 and 0 <= e < S.fp.shape[0] and S.fp[e, FP_PEER_NIC] >= 0


@part
def _silent(pk, k):
    """A data, clear-to-send or ACK packet without flags: its arrival at a NIC only counts."""
    kind = pk[k, PK_KIND]
    return (kind == PKT_DATA or kind == PKT_CTS or kind == PKT_ACK) and pk[k, PK_FLAGS] == 0


@part
def wire_pushed(S, sc, h, w, e, k, arr):
    """Descriptor ``k`` (arriving at ``arr``) was appended to wire ``w``, port ``e``'s link to a
    NIC: it gets the wire's HOP event when none is pending and it has consequences or ends a run
    of :data:`SILENT_RUN` packets."""
    fp = S.fp
    n = fp[e, FP_FN] + 1
    if fp[e, FP_FEV] < 0 and (n >= SILENT_RUN or not _silent(S.pk, k)):
        fp[e, FP_FEV] = arr
        fp[e, FP_FN] = 0
        push(h, sc, arr, EV_HOP, w, w, 0)
    else:
        fp[e, FP_FN] = n


@part
def _arrive_silent(S, sc, nic, k):
    """A silent packet (descriptor ``k``, freed here) has arrived at NIC ``nic``."""
    pk = S.pk
    sc[HOPS] += 1
    S.fn[nic, FN_RXF] += 1
    S.fn[nic, FN_RXB] += pk[k, PK_FB]
    if sc[MMASK] >= 0:
        S.ms[pk[k, PK_MSG] & sc[MMASK], M_NACK] -= 1
    pk[k, PK_NEXT] = sc[PKFREE]
    sc[PKFREE] = k
    sc[PKUSED] -= 1


@part
def skip_silent(S, e, sc, t):
    """The HOP event of port ``e``'s link to a NIC at ``t``: the silent packets before the one it
    is for arrive (in order); that one is then the wire's head."""
    fp = S.fp
    pk = S.pk
    nic = fp[e, FP_PEER_NIC]
    k = fp[e, FP_WHEAD]
    while pk[k, PK_ARR] < t:
        nx = pk[k, PK_NEXT]
        _arrive_silent(S, sc, nic, k)
        k = nx
    fp[e, FP_WHEAD] = k
    fp[e, FP_FEV] = -1


@part
def next_event(S, sc, h, w, e):
    """After the head of port ``e``'s link to a NIC was taken off: the HOP event of the next packet
    on it with consequences, or of the one that ends a run of :data:`SILENT_RUN`, if any."""
    fp = S.fp
    pk = S.pk
    k = fp[e, FP_WHEAD]
    n = fp[e, FP_FN]
    for j in range(1, n + 1):
        if j >= SILENT_RUN or not _silent(pk, k):
            fp[e, FP_FEV] = pk[k, PK_ARR]
            fp[e, FP_FN] = n - j
            push(h, sc, pk[k, PK_ARR], EV_HOP, w, w, 0)
            return
        k = pk[k, PK_NEXT]


@part
def drain(S, cf, sc):
    """End of the run: the silent packets still on NICs' downlinks arrive (no event is left)."""
    if cf[FAB] == 0 or cf[F_FAST] == 0:
        return
    fp = S.fp
    pk = S.pk
    for e in range(fp.shape[0]):
        nic = fp[e, FP_PEER_NIC]
        if nic < 0:
            continue
        k = fp[e, FP_WHEAD]
        while k >= 0:
            nx = pk[k, PK_NEXT]
            _arrive_silent(S, sc, nic, k)
            k = nx
        fp[e, FP_WHEAD] = -1
        fp[e, FP_WTAIL] = -1
        fp[e, FP_FN] = 0
