"""Rate pacing of a QP: the next time (integer ns) it may start a packet, at its current rate.

HPCC ns-3 (alibaba-edu/High-Precision-Congestion-Control, ``simulation/src/point-to-point/model/
rdma-hw.cc`` ``RdmaHw::UpdateNextAvail``, called by ``PktSent`` after each packet leaves the
NIC queue): ``m_nextAvail = Now() + interframeGap + Seconds(m_rate.CalculateTxTime(size))``,
``size`` the packet as ns-3 transmits it, ``interframeGap`` 0 (the ``InterframeGap`` default).
``DataRate::CalculateTxTime`` is the double ``size * 8.0 / bps``; ``Time::FromDouble`` (core
``nstime.h``, 128-bit ``int64x64_t``) keeps the double's integer part and ``floor(frac *
2**64)`` 64ths, multiplies by 10**9 (the default ns resolution) and keeps the integer part:
:func:`tx_time_ns_ns3` reproduces that bit for bit, which is ``floor(8e9 size / bps)`` except
where the double is a hair below an integer (1,000 B at 400 Gb/s: 19 ns, not 20). A DCQCN rate
change moves no pending ``m_nextAvail``: the ``*Mlx`` functions assign ``m_rate`` directly
(``ChangeRate``, which shifts it, serves HPCC, TIMELY, DCTCP and PINT), so the new rate takes
effect from the next packet.

ConnectX (:func:`tx_time_ns_ceil`): the exact ``ceil(8e9 size / bps)`` in integers, so a QP
never exceeds its rate (NVIDIA documents no rounding of its rate limiter).

:func:`next_send_ns` picks by the DCQCN variant code (``DCQCN_CONNECTX`` / ``DCQCN_HPCC_NS3``
of :mod:`~tokenpcap.schedule.engine.dcqcn_rules`). ``size_bytes`` is whatever length the caller's link
serialises for the packet (its own layer-1 accounting); ``rate_bps`` > 0.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.dcqcn_rules import DCQCN_HPCC_NS3

__all__ = ["tx_time_ns_ns3", "tx_time_ns_ceil", "next_send_ns"]

_TWO64 = 18446744073709551616.0     # HP128_MAX_64 (18446744073709551615.0) rounds to 2**64
_TWO32 = 4294967296.0
_NS_PER_S = 1_000_000_000


@njit(cache=True, _nrt=False)
def tx_time_ns_ns3(size_bytes, rate_bps):  # type: ignore[no-untyped-def]
    """``Seconds(DataRate(rate_bps).CalculateTxTime(size_bytes))`` in ns (int64), as ns-3."""
    d = float(size_bytes) * 8.0 / float(rate_bps)
    hi = math.floor(d)
    lo = math.floor((d - hi) * _TWO64)           # (int128_t) of the fraction in 2**-64 units
    lh = math.floor(lo / _TWO32)                 # split so that lo * 10**9 fits in int64
    ll = lo - lh * _TWO32
    a = np.int64(lh) * _NS_PER_S
    b = np.int64(ll) * _NS_PER_S
    frac_ns = (a + (b >> 32)) >> 32              # floor(lo * 10**9 / 2**64)
    return np.int64(hi) * _NS_PER_S + frac_ns


@njit(cache=True, _nrt=False)
def tx_time_ns_ceil(size_bytes, rate_bps):  # type: ignore[no-untyped-def]
    """``ceil(size_bytes * 8 * 10**9 / rate_bps)`` ns (int64), exact integer arithmetic."""
    num = np.int64(size_bytes) * 8 * _NS_PER_S
    r = np.int64(rate_bps)
    return (num + r - 1) // r


@njit(cache=True, _nrt=False)
def next_send_ns(now_ns, size_bytes, rate_bps, variant):  # type: ignore[no-untyped-def]
    """The QP's next allowed start after it starts a ``size_bytes`` packet at ``now_ns``."""
    if variant == DCQCN_HPCC_NS3:
        return np.int64(now_ns) + tx_time_ns_ns3(size_bytes, rate_bps)
    return np.int64(now_ns) + tx_time_ns_ceil(size_bytes, rate_bps)
