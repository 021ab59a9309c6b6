"""DCQCN reaction point (the sender NIC's rate control), compiled, one QP per call: the timers,
when they are due, and the protocol by which the engine keeps one pending timer event per QP.
The rules, their sources and the array layouts are in :mod:`tokenpcap.schedule.engine.dcqcn_rules`
(re-exported here).

Cost and laziness (results equal those of eager timers, as ns-3 and isekai run them): a QP
that never saw a CNP has no timer (``DQ_ACTIVE`` 0; :func:`dcqcn_on_bytes_sent` returns at
once; its byte counter starts at the first CNP, where isekai counts from the QP's first byte).
Alpha never needs an event: its updates depend only on each period's CNP flag, so they are
applied, in time order with the other timers, when a call reaches them (and skipped in one step
once alpha stops changing). A decrease check is due only in a period that saw a CNP. The
increase timer parks once the target is the line rate and an increase left the rate unchanged:
every later increase would leave both as they are; the timer and byte-counter events it skips
only advance the stages, which the next cut reads (``DQ_INC_PARKED_NS`` says where the timer
would have fired). Ties at one ns: alpha update, then increase, then decrease (ns-3's order:
its +1 ns offset, and equal-time events in the order scheduled, the increase first); timers due
at or before ``now`` run before the CNP or bytes of a call at ``now``.

Engine protocol (one pending timer per QP): every ``dcqcn_on_*`` returns the time (ns) of a
timer event the caller must add for that QP, or -1 for none, and the caller hands every such
event, when it fires, to :func:`dcqcn_on_timer`. The QP holds at most two events (the next
due and one earlier wake-up that, firing, asks again); an event it no longer holds is stale and
:func:`dcqcn_on_timer` returns -1 for it. Who calls what, when:

* setup: ``p = dcqcn_params(cfg, line_bps)`` per NIC line rate
  (:mod:`~tokenpcap.schedule.engine.dcqcn_params`), ``st = dcqcn_state(n_qp, p)``, a rate log.
* a CNP for QP ``q`` reaches its sender NIC at ``t``: :func:`dcqcn_on_cnp`.
* a timer event of ``q`` fires: :func:`dcqcn_on_timer`.
* ``q`` starts a data packet of ``b`` bytes at ``t``: if ``st[q, DQ_ACTIVE]`` (test it inline:
  one load, where a call costs ~40 ns),
  :func:`dcqcn_on_bytes_sent`; then its next allowed start is
  :func:`tokenpcap.schedule.engine.pacing.next_send_ns` ``(t, b, st[q, DQ_RATE_BPS], variant)``
  (at the line rate that is the serialisation time: no wait). A rate change takes effect from
  the next packet, as in ns-3; with the connectx variant it also moves a wait under way
  (:mod:`tokenpcap.schedule.engine.rpoint`).
* a new flow on a QP under ns-3's conventions (a fresh QP per flow): :func:`dcqcn_reset_qp`.
* side files: the rows of the log (time, QP, old and new rate, alpha, cause, target); the
  caller copies them out and sets ``nlog[0] = 0`` before ``cap`` fills.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.dcqcn_rules import *  # noqa: F401,F403 - columns, constants
from tokenpcap.schedule.engine.dcqcn_rules import _alpha_frac, _alpha_next, _cut, _increase, _log

__all__ = ["dcqcn_state", "dcqcn_reset_qp", "dcqcn_on_cnp", "dcqcn_on_timer",
           "dcqcn_on_bytes_sent", "dcqcn_alpha", "dcqcn_next_due_ns"]


def dcqcn_state(n_qp: int, p: np.ndarray) -> np.ndarray:
    """float64 ``(n_qp, NDQ)``: every QP at the line rate, inactive, no timer (the row
    :func:`dcqcn_reset_qp` writes, repeated)."""
    row = np.zeros((1, NDQ), np.float64)
    dcqcn_reset_qp(row, 0, p)
    return np.repeat(row, int(n_qp), axis=0)


@njit(cache=True, _nrt=False)
def dcqcn_reset_qp(st, q, p):  # type: ignore[no-untyped-def]
    """QP ``q`` back to its first state (line rate, no CNP seen, no timer): ns-3 gives every
    flow a new QP (``RdmaHw::AddQueuePair``); a pending timer event becomes stale."""
    for c in range(NDQ):
        st[q, c] = 0.0
    st[q, DQ_RATE_BPS] = p[DP_LINE_BPS]
    st[q, DQ_TARGET_BPS] = p[DP_LINE_BPS]
    st[q, DQ_ALPHA_DUE_NS] = -1.0
    st[q, DQ_DEC_BASE_NS] = -1.0
    st[q, DQ_DEC_DUE_NS] = -1.0
    st[q, DQ_INC_DUE_NS] = -1.0
    st[q, DQ_TIMER_NS] = -1.0
    st[q, DQ_LAST_CUT_NS] = -1.0
    st[q, DQ_INC_PARKED_NS] = -1.0
    st[q, DQ_TIMER2_NS] = -1.0


@njit(cache=True, _nrt=False)
def _alpha_update(st, q, p):  # type: ignore[no-untyped-def]
    """Apply one alpha update and clear the period's CNP flag. Returns False when it left
    alpha unchanged with no CNP (a fixed point: every later update would too)."""
    a = st[q, DQ_ALPHA]
    cnp = st[q, DQ_ALPHA_CNP] != 0.0
    nf = _alpha_next(a, cnp, p)
    st[q, DQ_ALPHA] = nf
    st[q, DQ_ALPHA_CNP] = 0.0
    return cnp or nf != a


@njit(cache=True, _nrt=False)
def _run_due(st, q, now, p, log, nlog):  # type: ignore[no-untyped-def]
    """Every timer of QP ``q`` due at or before ``now``, in time order (ties: alpha, increase,
    decrease)."""
    while True:
        kind = 0
        best = 0.0
        ad = st[q, DQ_ALPHA_DUE_NS]
        if ad >= 0.0 and ad <= now:
            kind, best = 1, ad
        idue = st[q, DQ_INC_DUE_NS]
        if idue >= 0.0 and idue <= now and (kind == 0 or idue < best):
            kind, best = 2, idue
        dd = st[q, DQ_DEC_DUE_NS]
        if dd >= 0.0 and dd <= now and (kind == 0 or dd < best):
            kind, best = 3, dd
        if kind == 0:
            return
        if kind == 1:
            per = p[DP_ALPHA_PERIOD_NS]
            if _alpha_update(st, q, p):
                st[q, DQ_ALPHA_DUE_NS] = ad + per
            else:   # no CNP and a fixed point: skip to the first update after now
                st[q, DQ_ALPHA_DUE_NS] = ad + (np.int64((now - ad) // per) + 1) * per
        elif kind == 2:
            st[q, DQ_INC_DUE_NS] = idue + p[DP_INC_PERIOD_NS]
            old = _increase(st, q, p, False)
            if st[q, DQ_RATE_BPS] != old:
                _log(st, log, nlog, idue, q, old, st[q, DQ_RATE_BPS], _alpha_frac(st, q, p),
                     CAUSE_TIMER)
        else:
            old = _cut(st, q, p, dd)
            if st[q, DQ_RATE_BPS] != old:
                _log(st, log, nlog, dd, q, old, st[q, DQ_RATE_BPS], _alpha_frac(st, q, p),
                     CAUSE_CUT)


@njit(cache=True, _nrt=False)
def dcqcn_next_due_ns(st, q):  # type: ignore[no-untyped-def]
    """The earliest timer of QP ``q`` that needs an event (increase or decrease), -1 none."""
    a = st[q, DQ_INC_DUE_NS]
    b = st[q, DQ_DEC_DUE_NS]
    if a < 0.0:
        return np.int64(b)
    if b < 0.0 or a < b:
        return np.int64(a)
    return np.int64(b)


@njit(cache=True, _nrt=False)
def _resched(st, q):  # type: ignore[no-untyped-def]
    """The time of a timer event the caller must add for QP ``q``, or -1. The caller holds at
    most two (``DQ_TIMER_NS`` <= ``DQ_TIMER2_NS``): none is added while a held one comes at or
    before the next due timer (it wakes the QP, which then asks again); an earlier due one is
    added, the held one kept as the second (a third, later one, is forgotten: stale)."""
    due = dcqcn_next_due_ns(st, q)
    h1 = np.int64(st[q, DQ_TIMER_NS])
    if due < 0 or (h1 >= 0 and h1 <= due) or due == np.int64(st[q, DQ_TIMER2_NS]):
        return np.int64(-1)
    st[q, DQ_TIMER2_NS] = float(h1)
    st[q, DQ_TIMER_NS] = float(due)
    return due


@njit(cache=True, _nrt=False)
def dcqcn_on_cnp(st, q, now, p, log, nlog):  # type: ignore[no-untyped-def]
    """A CNP for QP ``q`` reaches its sender NIC at ``now`` (ns). Returns the time of a timer
    event to schedule, or -1 (module docstring)."""
    now_f = float(now)
    st[q, DQ_N_CNP] += 1.0
    if st[q, DQ_ACTIVE] == 0.0:
        st[q, DQ_ACTIVE] = 1.0
        st[q, DQ_ALPHA] = p[DP_ALPHA_INIT]
        st[q, DQ_ALPHA_CNP] = 0.0
        st[q, DQ_ALPHA_DUE_NS] = now_f + p[DP_ALPHA_PERIOD_NS]
        base = now_f + p[DP_DEC_PERIOD_NS] + p[DP_DEC_OFFSET_NS]
        st[q, DQ_DEC_BASE_NS] = base
        first = p[DP_FIRST_CNP_BPS]
        if first > 0.0:
            if first > p[DP_LINE_BPS]:
                first = p[DP_LINE_BPS]
            old = st[q, DQ_RATE_BPS]
            st[q, DQ_RATE_BPS] = first
            st[q, DQ_TARGET_BPS] = first
            if first != old:
                _log(st, log, nlog, now_f, q, old, first, _alpha_frac(st, q, p), CAUSE_FIRST_CNP)
        if p[DP_VARIANT] == DCQCN_CONNECTX:
            st[q, DQ_INC_DUE_NS] = now_f + p[DP_INC_PERIOD_NS]
            mark = first == 0.0
        else:
            mark = True
        if mark:
            st[q, DQ_DEC_CNP] = 1.0
            st[q, DQ_DEC_DUE_NS] = base
        return _resched(st, q)
    _run_due(st, q, now_f, p, log, nlog)
    st[q, DQ_ALPHA_CNP] = 1.0
    if st[q, DQ_DEC_CNP] == 0.0:
        st[q, DQ_DEC_CNP] = 1.0
        base = st[q, DQ_DEC_BASE_NS]
        per = p[DP_DEC_PERIOD_NS]
        if now_f < base:
            st[q, DQ_DEC_DUE_NS] = base
        else:   # the first grid point after now
            st[q, DQ_DEC_DUE_NS] = base + (np.int64((now_f - base) // per) + 1) * per
    return _resched(st, q)


@njit(cache=True, _nrt=False)
def dcqcn_on_timer(st, q, now, p, log, nlog):  # type: ignore[no-untyped-def]
    """A timer event of QP ``q`` fires at ``now``: one the QP no longer holds (``now`` is
    neither ``DQ_TIMER_NS`` nor ``DQ_TIMER2_NS``) is stale and returns -1; otherwise runs the
    timers due and returns the time of an event to add, or -1."""
    t = np.int64(now)
    if t == np.int64(st[q, DQ_TIMER_NS]):
        st[q, DQ_TIMER_NS] = st[q, DQ_TIMER2_NS]
        st[q, DQ_TIMER2_NS] = -1.0
    elif t == np.int64(st[q, DQ_TIMER2_NS]):
        st[q, DQ_TIMER2_NS] = -1.0
    else:
        return np.int64(-1)
    _run_due(st, q, float(now), p, log, nlog)
    return _resched(st, q)


@njit(cache=True, _nrt=False)
def dcqcn_on_bytes_sent(st, q, now, nbytes, p, log, nlog):  # type: ignore[no-untyped-def]
    """QP ``q`` starts sending a packet of ``nbytes`` at ``now``: the byte counter (connectx,
    ``rpg_byte_reset`` > 0, while the QP recovers). Returns as :func:`dcqcn_on_cnp`; a QP that
    never saw a CNP returns -1 at once."""
    if st[q, DQ_ACTIVE] == 0.0 or p[DP_BYTE_RESET_BYTES] <= 0.0:
        return np.int64(-1)
    now_f = float(now)
    _run_due(st, q, now_f, p, log, nlog)
    reset = p[DP_BYTE_RESET_BYTES]
    c = st[q, DQ_BYTE_COUNT] + float(nbytes)
    while c >= reset and st[q, DQ_INC_DUE_NS] >= 0.0:
        c -= reset
        old = _increase(st, q, p, True)
        if st[q, DQ_RATE_BPS] != old:
            _log(st, log, nlog, now_f, q, old, st[q, DQ_RATE_BPS], _alpha_frac(st, q, p),
                 CAUSE_BYTES)
    if c >= reset:     # parked: the byte events only advance the byte stage
        k = np.int64(c // reset)
        st[q, DQ_BYTE_STAGE] += float(k)
        c -= float(k) * reset
    st[q, DQ_BYTE_COUNT] = c
    return _resched(st, q)


@njit(cache=True, _nrt=False)
def dcqcn_alpha(st, q, now, p):  # type: ignore[no-untyped-def]
    """Alpha of QP ``q`` at ``now`` (ns) as a fraction in [0, 1], the updates due by then
    applied to a copy (``st`` unchanged); 0 for a QP that never saw a CNP."""
    if st[q, DQ_ACTIVE] == 0.0:
        return 0.0
    a = st[q, DQ_ALPHA]
    cnp = st[q, DQ_ALPHA_CNP] != 0.0
    due = st[q, DQ_ALPHA_DUE_NS]
    per = p[DP_ALPHA_PERIOD_NS]
    while due <= now:
        nf = _alpha_next(a, cnp, p)
        if nf == a and not cnp:
            break
        a = nf
        cnp = False
        due += per
    if p[DP_VARIANT] == DCQCN_CONNECTX:
        return a / 1024.0
    return a
