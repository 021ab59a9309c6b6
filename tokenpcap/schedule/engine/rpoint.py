"""DCQCN's reaction point, the sending NIC (part of :mod:`tokenpcap.schedule.engine.kernel` with a
queued fabric): what a NIC does with the congestion notifications for its QPs.

A CNP (a frame of its own, or the CNP flag of an ACK: module npoint) that reaches the sender of
the QP it names is counted (``qp[q, Q_CNPRX]``, ``fn[nic, FN_CNPRX]``) and logged (``lgn``:
time, notification point, reaction point, QP).
"""
from __future__ import annotations

from numba import njit

from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.fabric import deliver
from tokenpcap.schedule.engine.npoint import np_ce

__all__ = ["cc_arrival", "cc_timer"]


@njit(cache=True, _nrt=False)
def _log_cnp(S, sc, t, np_nic, rp_nic, q):
    n = sc[NLGN]
    if n < S.lgn.shape[0]:
        S.lgn[n, 0] = t
        S.lgn[n, 1] = np_nic
        S.lgn[n, 2] = rp_nic
        S.lgn[n, 3] = q
        sc[NLGN] = n + 1


@njit(cache=True, _nrt=False)
def cc_arrival(S, cf, sc, h, a, o, nic, k, t):
    """Descriptor ``k`` that congestion control acts on (CE-marked data, a CNP, an ACK with the
    CNP flag; freed here) reaches NIC ``nic`` at ``t``."""
    pk = S.pk
    kind = pk[k, PK_KIND]
    if kind != PKT_CNP and kind != PKT_ACK:
        np_ce(S, cf, sc, h, a, o, nic, k, t)
        return
    q = pk[k, PK_QP]
    S.qp[q, Q_CNPRX] += 1
    S.fn[nic, FN_CNPRX] += 1
    _log_cnp(S, sc, t, pk[k, PK_SRC], nic, q)
    deliver(S, cf, sc, h, nic, k, t, 0)


@njit(cache=True, _nrt=False)
def cc_timer(S, cf, sc, h, a, o, kind, q, t):
    """A QP's congestion-control timer (``kind``: ``EV_CC_RP`` DCQCN, ``EV_CC_PACE`` pacing)."""
    return
