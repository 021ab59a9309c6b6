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
(:func:`red_mark`), keyed by (seed, switch, port, packet), so a
mark does not depend on the order in which events are processed.

A mark sets ``PK_CE`` on the packet descriptor: the capture rows downstream of the marking port
carry it and the receiving NIC turns it into a CNP (:mod:`~tokenpcap.schedule.engine.npoint`).
Counters: ``fp[e, FP_CE]`` per port, ``sc[NCE]`` in all.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants

__all__ = ["ecn_mark", "red_mark"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, _nrt=False)
def _mix64(z):
    """SplitMix64's finalizer (Steele, Lea and Flood, OOPSLA 2014) of uint64 ``z``."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, _nrt=False)
def red_mark(q, kmin, kmax, pmax_q32, seed, switch, port, key):
    """RED's decision for a packet that sees ``q`` queued bytes: True above ``kmax``, False at
    or below ``kmin``, in between True when a uniform 32-bit draw ``u`` (SplitMix64 of seed,
    switch, port and packet ``key``, chained) satisfies ``u x (kmax - kmin) < pmax_q32 x (q -
    kmin)`` (``pmax_q32 = P_max x 2**32``): probability ``P_max (q - kmin) / (kmax - kmin)``
    in exact integer arithmetic."""
    if q > kmax:
        return True
    if q <= kmin:
        return False
    z = _mix64(np.uint64(seed) * _GOLDEN + np.uint64(switch))
    z = _mix64(z + np.uint64(port) * _GOLDEN)
    z = _mix64(z + np.uint64(key) * _GOLDEN)
    u = np.int64(z >> np.uint64(32))
    return u * (kmax - kmin) < pmax_q32 * (q - kmin)


@njit(cache=True, _nrt=False)
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
    if red_mark(q, fp[e, FP_KMIN], fp[e, FP_KMAX], fp[e, FP_PMAX], cf[F_ECN_SEED], fp[e, FP_SW],
                fp[e, FP_NUM_ON_SW], key):
        pk[k, PK_FLAGS] |= PK_CE
        fp[e, FP_CE] += 1
        sc[NCE] += 1
