"""A NIC's side of PFC with a queued fabric (part of :mod:`tokenpcap.schedule.engine.kernel`): the
pause frames its ToR sends it stop its data priority after the frame in progress (IEEE 802.1Qbb:
for ``quanta x 512`` bit times at its rate, or until an XON with ``cf[F_UNTIL]``, ns-3's
convention) and resume it; its ACKs (the control priority) go on. The port's pause is its
``P_PUNTIL``, which :func:`tokenpcap.schedule.engine.link.advance` and ``rewake`` respect.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.events import push
from tokenpcap.schedule.engine.fabric import pk_free
from tokenpcap.schedule.engine.link import advance, rewake, touch

__all__ = ["nic_pfc", "nic_pause_end"]


@part
def nic_pfc(S, cf, sc, h, a, o, nic, k, t):
    """A PFC frame (descriptor ``k``, freed here) from its ToR reaches NIC ``nic`` at ``t``: its
    data priority stops after the frame in progress, for the frame's pause time (or until an XON
    with ``cf[F_UNTIL]``), or resumes on an XON; ACKs (the control priority) go on."""
    pt = S.pt
    fn = S.fn
    pk = S.pk
    fn[nic, FN_PFCR] += 1
    vec = pk[k, PK_IDX]
    quanta = pk[k, PK_MSG]
    pk_free(S, sc, k)
    if not (vec >> cf[F_DPRIO]) & 1:
        return
    advance(S, cf, sc, h, a, o, nic, t, QUEUED)
    paused = pt[nic, P_PUNTIL] > t
    if quanta == 0:
        if paused:
            fn[nic, FN_PAUSED_NS] += t - fn[nic, FN_PAUSE_T0]
        pt[nic, P_PUNTIL] = t
        touch(S, nic, t)
    else:
        if not paused:
            fn[nic, FN_PAUSE_T0] = t
        if cf[F_UNTIL]:
            pt[nic, P_PUNTIL] = NEVER
        else:
            u = t + (quanta * 512 * fn[nic, FN_RDEN] + fn[nic, FN_RNUM] - 1) // fn[nic, FN_RNUM]
            pt[nic, P_PUNTIL] = u
            push(h, sc, u, EV_PFC, (1 << 40) + nic, 2, nic)
    rewake(S, cf, sc, h, nic, QUEUED)


@part
def nic_pause_end(S, cf, sc, h, a, o, nic, t):
    """A NIC's pause time ran out at ``t`` (unless a later XOFF extended it or an XON ended it)."""
    pt = S.pt
    if pt[nic, P_PUNTIL] == t:
        S.fn[nic, FN_PAUSED_NS] += t - S.fn[nic, FN_PAUSE_T0]
        touch(S, nic, t)
        rewake(S, cf, sc, h, nic, QUEUED)
