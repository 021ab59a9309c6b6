"""The NICs' wakes as an indexed binary heap of ports (part of :mod:`tokenpcap.schedule.engine.kernel`).

A port has at most one wake: its time is ``pt[port, P_WAKE]`` (``NEVER``: none), and while it
has one the port sits at position ``pt[port, P_WPOS]`` of ``S.wq (N,)`` int64, a binary heap of
ports ordered by ``(P_WAKE, port)``: the order of the event heap's WAKE events (type
``EV_WAKE``, keyed by NIC; :mod:`tokenpcap.schedule.engine.events`), which the kernel merges with
the event heap by ``time·8 + type``. Moving a wake moves the port in place (``O(log N)``), so a
superseded wake leaves nothing behind to be popped and skipped: the event heap keeps only
messages, timers and the fabric's events. ``sc[WN]`` is the heap's size; every wake set counts
as a push in ``sc[SEQ]`` (the events pushed, read by tests and benchmarks).
"""
from __future__ import annotations

from numba import njit

from tokenpcap.schedule.engine.events import EV_WAKE, NEVER, P_WAKE, P_WPOS, SEQ, WN

__all__ = ["wake_set", "wake_pop", "wake_key"]


@njit(cache=True, _nrt=False)
def _before(pt, t, port, other):
    """Whether a wake of ``port`` at ``t`` comes before ``other``'s."""
    u = pt[other, P_WAKE]
    return t < u or (t == u and port < other)


@njit(cache=True, _nrt=False)
def _place(S, sc, i, port):
    """Move ``port`` (its wake already set) from hole ``i`` up or down to its place."""
    pt = S.pt
    wq = S.wq
    t = pt[port, P_WAKE]
    while i > 0:
        par = (i - 1) >> 1
        if not _before(pt, t, port, wq[par]):
            break
        wq[i] = wq[par]
        pt[wq[i], P_WPOS] = i
        i = par
    n = sc[WN]
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        if m + 1 < n and _before(pt, pt[wq[m + 1], P_WAKE], wq[m + 1], wq[m]):
            m += 1
        if not _before(pt, pt[wq[m], P_WAKE], wq[m], port):
            break
        wq[i] = wq[m]
        pt[wq[i], P_WPOS] = i
        i = m
    wq[i] = port
    pt[port, P_WPOS] = i


@njit(cache=True, _nrt=False)
def _remove(S, sc, port):
    pt = S.pt
    wq = S.wq
    i = pt[port, P_WPOS]
    n = sc[WN] - 1
    sc[WN] = n
    pt[port, P_WPOS] = -1
    if i < n:
        _place(S, sc, i, wq[n])


@njit(cache=True, _nrt=False)
def wake_set(S, sc, port, t):
    """``port``'s wake is at ``t`` (ns; ``NEVER``: it has none), earlier or later than before."""
    pt = S.pt
    if t >= NEVER:
        pt[port, P_WAKE] = NEVER
        if pt[port, P_WPOS] >= 0:
            _remove(S, sc, port)
        return
    if pt[port, P_WAKE] == t:
        return
    sc[SEQ] += 1
    pt[port, P_WAKE] = t
    i = pt[port, P_WPOS]
    if i < 0:
        i = sc[WN]
        sc[WN] = i + 1
    _place(S, sc, i, port)


@njit(cache=True, _nrt=False)
def wake_key(S, sc):
    """``time·8 + EV_WAKE`` of the next wake (the event heap's key), ``NEVER`` when none."""
    if sc[WN] == 0:
        return NEVER
    return S.pt[S.wq[0], P_WAKE] * 8 + EV_WAKE


@njit(cache=True, _nrt=False)
def wake_pop(S, sc):
    """The port of the next wake, taken out of the heap (its ``P_WAKE`` set to ``NEVER``)."""
    port = S.wq[0]
    _remove(S, sc, port)
    S.pt[port, P_WAKE] = NEVER
    return port
