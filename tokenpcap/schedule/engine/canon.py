"""The canonical order of the transfers launched at one instant (part of
:mod:`tokenpcap.schedule.engine.kernel`, ``cf[CANON]``): when the instant's last event before
its wakes is done (:func:`instant_over`), its launches are sorted by :func:`canon_less` before
they become messages and NVLink copies (:func:`tokenpcap.schedule.engine.progs.flush_out`), so
that what a NIC and a GPU see at one instant does not depend on the order in which the
instant's events ran (:mod:`tokenpcap.schedule.replicas`).
"""
from __future__ import annotations

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine import access as A

__all__ = ["canon_less", "canon_sort", "instant_over"]


@part
def canon_less(S, cf, x, y):
    """Transfer ``x`` comes before ``y`` among the launches of one instant (``cf[CANON]``): by
    the key of their collective (:func:`~tokenpcap.schedule.engine.access.call_key`: the
    iteration and the family instance, equal for every group), the sender's rank with its
    data-parallel index removed, the index in its sender's send list
    (:func:`~tokenpcap.schedule.engine.access.send_index`), then the sender's data-parallel
    index (``rank // cf[C_STRIDE] % cf[C_DP]``, :mod:`tokenpcap.collectives.layout`). The first
    three are invariant under the translation of the data-parallel index and tell apart any two
    transfers that are not images of each other (a rank is in one group of a collective, its
    call's send list names each of its transfers once), so two transfers that share a NIC or a
    GPU are in the same order as their images; the last only orders a transfer's images, which
    share a NIC only as one's data and the other's clear-to-send write, whose QPs
    :func:`~tokenpcap.schedule.engine.progs.flush_out` creates data first and whose ids put
    every data message first (:mod:`tokenpcap.schedule.replicas`)."""
    kx = A.call_key(S, x)
    ky = A.call_key(S, y)
    if kx != ky:
        return kx < ky
    st = cf[C_STRIDE]
    D = cf[C_DP]
    sx = A.src_rank(S, x)
    sy = A.src_rank(S, y)
    dx = sx // st % D
    dy = sy // st % D
    bx = sx - dx * st
    by = sy - dy * st
    if bx != by:
        return bx < by
    jx = A.send_index(S, x)
    jy = A.send_index(S, y)
    if jx != jy:
        return jx < jy
    return dx < dy


@part
def _sift(S, cf, lst, i, n):
    """Sift ``lst[i]`` down the max-heap ``lst[:n]`` ordered by :func:`canon_less`."""
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and canon_less(S, cf, lst[c], lst[c + 1]):
            c += 1
        if not canon_less(S, cf, lst[i], lst[c]):
            return
        v = lst[i]
        lst[i] = lst[c]
        lst[c] = v
        i = c


@part
def canon_sort(S, cf, lst, m):
    """Sort ``lst[:m]`` by :func:`canon_less` in place (heapsort: no allocation, O(m log m);
    Williams 1964, Knuth TAOCP vol. 3, 5.2.3)."""
    for i in range(m // 2 - 1, -1, -1):
        _sift(S, cf, lst, i, m)
    for n in range(m - 1, 0, -1):
        v = lst[0]
        lst[0] = lst[n]
        lst[n] = v
        _sift(S, cf, lst, 0, n)


@part
def instant_over(cf, sc, h):
    """The launches kept so far become messages now: always when ``cf[CANON]`` is 0 (after each
    event), else when the heap holds nothing more of this instant before its wakes (the next
    event is later, or a WAKE or a queued fabric's event, which come after READY at one
    instant)."""
    if not cf[CANON] or sc[HN] == 0:
        return True
    return (h[0, 0] >> 3) > sc[NOW] or (h[0, 0] & 7) >= EV_WAKE
