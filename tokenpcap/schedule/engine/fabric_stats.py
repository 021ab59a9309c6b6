"""The queued fabric's records (part of :mod:`tokenpcap.schedule.engine.fabric`): the depth of
every egress (port, priority) queue, sampled as the most bytes it held in each interval of
``cf[F_QLEN]`` ns in which it changed (a row when a later interval starts, and at the end of the
run), and every PFC frame a switch port sends (time its first bit leaves, switch, port number,
priority, XOFF, quanta). Rows beyond a log's size are not written: the kernel returns to grow
the logs before an event when they are within 1,024 rows of full.
"""
from __future__ import annotations

from numba import njit

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants

__all__ = ["sample", "log_q", "log_pfc", "flush_samples"]



@part
def sample(S, cf, sc, e, p, before, t):
    """Queue ``(e, p)`` changes at ``t`` from ``before`` bytes: keep the most bytes of the current
    sampling interval, write the interval's row when a later one starts."""
    qs = S.qsamp
    i = e * 8 + p
    iv = t // cf[F_QLEN]
    if qs[i, 0] != iv:
        if qs[i, 1] > 0:
            log_q(S, sc, cf, e, p, qs[i, 0], qs[i, 1])
        qs[i, 0] = iv
        qs[i, 1] = before
    now = S.fq[i, Q8_BYTES]
    if now > qs[i, 1]:
        qs[i, 1] = now
    tot = S.fp[e, FP_QBYTES]
    if tot > S.fp[e, FP_MAXQ]:
        S.fp[e, FP_MAXQ] = tot


@part
def log_q(S, sc, cf, e, p, iv, most):
    n = sc[NLGQ]
    if n < S.lgq.shape[0]:
        S.lgq[n, 0] = iv * cf[F_QLEN]
        S.lgq[n, 1] = S.fp[e, FP_SW]
        S.lgq[n, 2] = S.fp[e, FP_NUM_ON_SW]
        S.lgq[n, 3] = p
        S.lgq[n, 4] = most
        sc[NLGQ] = n + 1


@njit(cache=True, _nrt=False)
def flush_samples(S, cf, sc):
    """Write the current interval of every queue that held bytes in it (at the end of a run)."""
    qs = S.qsamp
    for i in range(qs.shape[0]):
        if qs[i, 1] > 0 and qs[i, 0] >= 0:
            log_q(S, sc, cf, i // 8, i % 8, qs[i, 0], qs[i, 1])
            qs[i, 1] = 0


@part
def log_pfc(S, sc, e, p, quanta, t):
    n = sc[NLGP]
    if n < S.lgp.shape[0]:
        S.lgp[n, 0] = t
        S.lgp[n, 1] = S.fp[e, FP_SW]
        S.lgp[n, 2] = S.fp[e, FP_NUM_ON_SW]
        S.lgp[n, 3] = p
        S.lgp[n, 4] = 1 if quanta > 0 else 0
        S.lgp[n, 5] = quanta
        sc[NLGP] = n + 1

