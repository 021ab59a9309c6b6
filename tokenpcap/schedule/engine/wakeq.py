"""The NICs' wakes as an indexed binary heap of ports (part of :mod:`tokenpcap.schedule.engine.kernel`).

A port has at most one wake: its time is ``pt[port, P_WAKE]`` (``NEVER``: none). The ports that
may have one sit in ``S.wq (N,)`` int64, a binary heap of ports ordered by ``(P_WKEY, port)``
(``pt[port, P_WPOS]`` its position, -1 when not in it), where ``P_WKEY <= P_WAKE``: the order
of the event heap's WAKE events (type ``EV_WAKE``, keyed by NIC;
:mod:`tokenpcap.schedule.engine.events`), merged with the event heap by ``time·8 + type``.

* A wake moved earlier moves its port up at once (like a push: a step or none on average).
* A wake moved later, or dropped, only changes ``P_WAKE``: the port is put back at its new time
  (or taken out) when it reaches the top (:func:`wake_next`), so a wake moved many times between
  two firings costs one sift down, and a superseded wake leaves nothing behind to be popped and
  skipped (the event heap holds only messages, timers and the fabric's events).

Since every port's key is at most its wake, the top's key bounds the next wake from below
(:func:`wake_peek`); when it equals the top's wake, that wake is the next one. ``sc[WN]`` is
the heap's size; every placement of a port counts as a push in ``sc[SEQ]`` (the events pushed,
read by tests and benchmarks), every put-back in ``sc[NSTALE]``.
"""
from __future__ import annotations

from numba import njit

from tokenpcap.schedule.engine.events import (EV_WAKE, NEVER, NSTALE, P_WAKE, P_WKEY, P_WPOS, SEQ,
                                              WN)

__all__ = ["wake_set", "wake_peek", "wake_next", "wake_pop"]


@njit(cache=True, _nrt=False)
def _before(pt, k, port, other):
    """Whether ``port`` held at key ``k`` comes before ``other``."""
    u = pt[other, P_WKEY]
    return k < u or (k == u and port < other)


@njit(cache=True, _nrt=False)
def _place(S, sc, i, port):
    """Move ``port`` (its key already set) from hole ``i`` up or down to its place."""
    pt = S.pt
    wq = S.wq
    k = pt[port, P_WKEY]
    while i > 0:
        par = (i - 1) >> 1
        if not _before(pt, k, port, wq[par]):
            break
        wq[i] = wq[par]
        pt[wq[i], P_WPOS] = i
        i = par
    n = sc[WN]
    while True:
        m = 2 * i + 1
        if m >= n:
            break
        if m + 1 < n and _before(pt, pt[wq[m + 1], P_WKEY], wq[m + 1], wq[m]):
            m += 1
        if not _before(pt, pt[wq[m], P_WKEY], wq[m], port):
            break
        wq[i] = wq[m]
        pt[wq[i], P_WPOS] = i
        i = m
    wq[i] = port
    pt[port, P_WPOS] = i


@njit(cache=True, _nrt=False)
def _remove_top(S, sc):
    pt = S.pt
    wq = S.wq
    n = sc[WN] - 1
    sc[WN] = n
    pt[wq[0], P_WPOS] = -1
    if n > 0:
        _place(S, sc, 0, wq[n])


@njit(cache=True, _nrt=False)
def wake_set(S, sc, port, t):
    """``port``'s wake is at ``t`` (ns; ``NEVER``: it has none), earlier or later than before."""
    pt = S.pt
    if pt[port, P_WAKE] == t:
        return
    pt[port, P_WAKE] = t
    if t >= NEVER:
        return                          # taken out when it reaches the top
    i = pt[port, P_WPOS]
    if i < 0:
        i = sc[WN]
        sc[WN] = i + 1
    elif t >= pt[port, P_WKEY]:
        return                          # later: put back when it reaches the top
    sc[SEQ] += 1
    pt[port, P_WKEY] = t
    _place(S, sc, i, port)


@njit(cache=True, _nrt=False)
def wake_peek(S, sc):
    """At most ``time·8 + EV_WAKE`` of the next wake (``NEVER`` when the heap is empty)."""
    if sc[WN] == 0:
        return NEVER
    return S.pt[S.wq[0], P_WKEY] * 8 + EV_WAKE


@njit(cache=True, _nrt=False)
def wake_next(S, sc):
    """``time·8 + EV_WAKE`` of the next wake, ``NEVER`` when no port has one; the top of the
    heap is then its port (ports held earlier than their wake are put back at it first)."""
    pt = S.pt
    wq = S.wq
    while sc[WN] > 0:
        port = wq[0]
        w = pt[port, P_WAKE]
        if pt[port, P_WKEY] == w:
            return w * 8 + EV_WAKE
        sc[NSTALE] += 1
        if w >= NEVER:
            _remove_top(S, sc)
        else:
            sc[SEQ] += 1
            pt[port, P_WKEY] = w
            _place(S, sc, 0, port)
    return NEVER


@njit(cache=True, _nrt=False)
def wake_pop(S, sc):
    """The port of the next wake (after :func:`wake_next`), out of the heap, its wake done."""
    port = S.wq[0]
    _remove_top(S, sc)
    S.pt[port, P_WAKE] = NEVER
    return port
