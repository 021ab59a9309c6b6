"""A paced QP's next allowed start (part of :mod:`tokenpcap.schedule.engine.link`; the rate comes
from DCQCN, module rpoint).

A QP whose rate is below its NIC's line rate (``ax[e, X_RATE]``, bit/s; 0: not paced) starts a
packet no earlier than its next allowed time ``ax[e, X_NA]``: the start of its previous packet
plus that packet's timing bytes at the QP's rate
(:func:`tokenpcap.schedule.engine.pacing.next_send_ns`: HPCC ns-3's ``RdmaHw::UpdateNextAvail``
truncation, or the ceiling; a rate change during the wait moves it with the connectx variant,
:mod:`tokenpcap.schedule.engine.rpoint`). Each packet it sends also feeds DCQCN's byte counter
(:func:`tokenpcap.schedule.engine.dcqcn.dcqcn_on_bytes_sent`), whose timer event, when it
returns one, is queued here.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.dcqcn import DP_LINE_BPS, DP_VARIANT, DQ_RATE_BPS, dcqcn_on_bytes_sent
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push
from tokenpcap.schedule.engine.pacing import next_send_ns

__all__ = ["pace_next", "push_rp_timer", "paced_rate"]


@part
def paced_rate(S, q):
    """``X_RATE`` of QP ``q`` from its DCQCN rate: bit/s below the line rate, else 0."""
    rate = np.int64(S.rp[q, DQ_RATE_BPS])
    return rate if rate < np.int64(S.rpp[DP_LINE_BPS]) else 0


@part
def push_rp_timer(h, sc, q, due):
    """Queue QP ``q``'s DCQCN timer event at ``due`` (none when ``due < 0``)."""
    if due >= 0:
        push(h, sc, due, EV_PFC, (EV_CC_RP << 40) + q, EV_CC_RP, q)


@part
def pace_next(S, sc, h, q, t0, tb):
    """QP ``q`` (paced) started a packet of ``tb`` timing bytes at ``t0``: its next allowed start
    (ns), at the rate it sent at; the byte counter may change the rate of its next packets."""
    r = S.pt[S.qp[q, Q_PORT], P_ACT_LO] + S.qp[q, Q_ORDER]
    na = next_send_ns(t0, tb, S.ax[r, X_RATE], np.int64(S.rpp[DP_VARIANT]))
    due = dcqcn_on_bytes_sent(S.rp, q, t0, tb, S.rpp, S.lgr, sc[NLGR:NLGR + 1])
    push_rp_timer(h, sc, q, due)
    S.ax[r, X_RATE] = paced_rate(S, q)
    return na
