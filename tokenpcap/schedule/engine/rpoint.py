"""DCQCN's reaction point, the sending NIC (part of :mod:`tokenpcap.schedule.engine.kernel` with a
queued fabric): what a NIC does with the congestion notifications for its QPs, and the pacing
of a QP at its DCQCN rate.

A CNP (a frame of its own, or the CNP flag of an ACK: module npoint) that reaches the sender of
the QP it names is counted (``qp[q, Q_CNPRX]``, ``fn[nic, FN_CNPRX]``) and logged (``lgn``:
time, notification point, reaction point, QP). With DCQCN on (``cf[F_CC] == 1``) it drives the
QP's rate (:mod:`tokenpcap.schedule.engine.dcqcn`, state ``S.rp``, parameters ``S.rpp``, rate
changes logged in ``S.lgr``). A QP has at most one DCQCN timer event (``EV_PFC`` of sub-kind
``EV_CC_RP``, at the earliest of its decrease check and increase timer; stale ones are ignored
by ``dcqcn_on_timer``), and none before its first CNP.

Pacing (``docs/architecture.md``): a QP below its line rate has ``ax[e, X_RATE]`` its rate; its
every packet is a stop of its port's rotation (:mod:`~tokenpcap.schedule.engine.link`), after
which its next allowed start ``X_NA`` is set (:mod:`~tokenpcap.schedule.engine.pace`) and,
when that is later than the port's clock, it leaves the rotation and rejoins at ``X_NA`` on an
``EV_CC_PACE`` event keyed by the QP, in its creation-order place (HPCC ns-3
``RdmaEgressQueue::GetNextQindex``: round-robin over the QPs whose ``m_nextAvail`` has come).
A QP at the line rate is in the closed-form rotation like any other; a QP that never saw a CNP
costs nothing.

A rate change while a QP waits for ``X_NA``: HPCC ns-3's Mellanox DCQCN (``rdma-hw.cc``, the
``*Mlx`` functions) assigns ``m_rate`` without ``ChangeRate``, so the wait keeps the old rate and
the new one counts from the next packet; the ``hpcc-ns3`` variant does so, as its fixtures need.
ConnectX's per-QP rate limiter is a shaper that releases a packet when the bits of the one
before have been paid at the rate in force (NVIDIA documents the limiter, not its arithmetic):
the ``connectx`` variant pays what is still owed, ``(X_NA - t) * old``, at the new rate from
``t`` on, rounded up to whole ns. Without it a QP cut to ``rpg_min_rate`` (1 Mb/s) right after a
4 KiB packet waits 33 ms however soon its rate recovers (a 63 -> 1 incast's receiver sat idle
10 ms after every sender was back near the line rate).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.dcqcn import DP_LINE_BPS, DP_VARIANT, dcqcn_on_cnp, dcqcn_on_timer
from tokenpcap.schedule.engine.dcqcn_rules import DCQCN_CONNECTX
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push
from tokenpcap.schedule.engine.fabric import deliver
from tokenpcap.schedule.engine.link import act_link, advance, rewake, touch
from tokenpcap.schedule.engine.npoint import np_ce
from tokenpcap.schedule.engine.pace import paced_rate, push_rp_timer

__all__ = ["cc_arrival", "cc_timer"]


@part
def _log_cnp(S, sc, t, np_nic, rp_nic, q):
    n = sc[NLGN]
    if n < S.lgn.shape[0]:
        S.lgn[n, 0] = t
        S.lgn[n, 1] = np_nic
        S.lgn[n, 2] = rp_nic
        S.lgn[n, 3] = q
        sc[NLGN] = n + 1


@part
def _row(S, q):
    return S.pt[S.qp[q, Q_PORT], P_ACT_LO] + S.qp[q, Q_ORDER]


@part
def _repace(S, sc, h, r, q, t, old):
    """ConnectX: QP ``q`` (rotation row ``r``), waiting off the rotation for its next allowed
    start ``X_NA > t`` after a packet paced at ``old`` bit/s, has its rate changed at ``t`` to
    ``X_RATE`` (0: the line rate): the bits its rate limiter still owes, ``(X_NA - t) * old``,
    are paid at the new rate from ``t`` on (module docstring), and its rejoin timer moves."""
    ax = S.ax
    if ax[r, X_ON] or ax[r, X_NA] <= t or old <= 0 or S.qp[q, Q_HEAD] < 0:
        return
    rate = ax[r, X_RATE]
    if rate <= 0:
        rate = np.int64(S.rpp[DP_LINE_BPS])
    wait = np.int64(np.ceil(np.float64(ax[r, X_NA] - t) * (np.float64(old) / np.float64(rate))))
    ax[r, X_NA] = t + max(np.int64(1), wait)
    push(h, sc, ax[r, X_NA], EV_PFC, (EV_CC_PACE << 40) + q, EV_CC_PACE, q)


@part
def _set_rate(S, cf, sc, h, a, o, q, t):
    """QP ``q``'s DCQCN rate may have changed at ``t``: its frames before ``t`` are committed at
    the old rate, the later ones paced at the new one; with ConnectX's rate limiter a start it
    waits for moves too (:func:`_repace`), with HPCC ns-3's it does not."""
    r = _row(S, q)
    new = paced_rate(S, q)
    old = S.ax[r, X_RATE]
    if new != old:
        port = S.qp[q, Q_PORT]
        advance(S, cf, sc, h, a, o, port, t, QUEUED)
        S.ax[r, X_RATE] = new
        if S.rpp[DP_VARIANT] == DCQCN_CONNECTX:
            _repace(S, sc, h, r, q, t, old)
        S.pt[port, P_STOP] = -1
        rewake(S, cf, sc, h, port, QUEUED)


@part
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
    if cf[F_CC] == 1:
        push_rp_timer(h, sc, q, dcqcn_on_cnp(S.rp, q, t, S.rpp, S.lgr, sc[NLGR:NLGR + 1]))
        _set_rate(S, cf, sc, h, a, o, q, t)


@part
def cc_timer(S, cf, sc, h, a, o, kind, q, t):
    """A QP's timer event at ``t``: ``EV_CC_RP`` its DCQCN timers, ``EV_CC_PACE`` its next
    allowed start (it rejoins its port's rotation)."""
    if kind == EV_CC_RP:
        push_rp_timer(h, sc, q, dcqcn_on_timer(S.rp, q, t, S.rpp, S.lgr, sc[NLGR:NLGR + 1]))
        _set_rate(S, cf, sc, h, a, o, q, t)
        return
    r = _row(S, q)
    if S.ax[r, X_ON] or S.ax[r, X_NA] != t or S.qp[q, Q_HEAD] < 0:
        return
    port = S.qp[q, Q_PORT]
    advance(S, cf, sc, h, a, o, port, t, QUEUED)
    act_link(S, port, r)
    touch(S, port, t)
    rewake(S, cf, sc, h, port, QUEUED)
