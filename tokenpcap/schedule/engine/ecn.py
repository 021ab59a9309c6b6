"""ECN marking at a switch's egress queue (part of :mod:`tokenpcap.schedule.engine.fabric`).

RED as switches mark for DCQCN (Floyd and Jacobson 1993; HPCC ns-3 ``switch-mmu.cc``
``ShouldSendCN``, called from ``switch-node.cc`` ``SwitchNotifyDequeue``): with ``q`` the bytes
of the packet's egress (port, priority) queue, a packet is marked when ``q > K_max``, with
probability ``P_max x (q - K_min) / (K_max - K_min)`` when ``K_min < q <= K_max``, never when
``q <= K_min``. At dequeue (``cf[F_ECN] == 1``, ns-3's and the sonic-mgmt ECN test plan's
point) ``q`` is the queue after the departing packet left; at enqueue (2) the queue the
arriving packet joins, before it. Only ECN-capable packets are marked: the data and
clear-to-send writes of the priorities of ``cf[F_ECN_PRIOS]``; ACKs, CNPs and PFC frames travel
in the control class and never are. The draw is counter-based
(:func:`tokenpcap.schedule.engine.red.red_should_mark`), keyed by (seed, switch, port, packet), so a
mark does not depend on the order in which events are processed.

A mark sets ``PK_CE`` on the packet descriptor: the capture rows downstream of the marking port
carry it (``OUT_CE``, the rows' ``flags``) and the receiving NIC turns it into a CNP (:mod:`~tokenpcap.schedule.engine.npoint`).
Counters: ``fp[e, FP_CE]`` per port, ``sc[NCE]`` in all.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.red import red_should_mark

__all__ = ["ecn_mark"]


@part
def ecn_mark(S, cf, sc, e, p, k):
    """RED on descriptor ``k`` leaving (or joining) queue ``(e, p)``: sets ``PK_CE`` when the
    queue's bytes say so (module docstring)."""
    pk = S.pk
    kind = pk[k, PK_KIND]
    if kind != PKT_DATA and kind != PKT_CTS:
        return
    if not (cf[F_ECN_PRIOS] >> p) & 1 or pk[k, PK_FLAGS] & PK_CE:
        return
    fp = S.fp
    q = S.fq[e * 8 + p, Q8_BYTES]
    key = pk[k, PK_MSG] * (MASK24 + 1) + pk[k, PK_IDX]
    if red_should_mark(q, fp[e, FP_KMIN], fp[e, FP_KMAX], fp[e, FP_PMAX] / PMAX_ONE, True, False,
                       cf[F_ECN_SEED], fp[e, FP_SW], fp[e, FP_NUM_ON_SW], key):
        pk[k, PK_FLAGS] |= PK_CE
        fp[e, FP_CE] += 1
        sc[NCE] += 1
