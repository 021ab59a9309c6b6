"""RED/ECN marking at a switch's egress queue (compiled, scalar): whether a packet leaves CE.

The marking probability is HPCC ns-3's (alibaba-edu/High-Precision-Congestion-Control,
``simulation/src/point-to-point/model/switch-mmu.cc`` ``SwitchMmu::ShouldSendCN``), called by
``SwitchNode::SwitchNotifyDequeue`` with the egress bytes of the (port, queue) after the
departing packet left them: ``q > K_max`` always; ``K_min < q <= K_max`` with probability
``P_max * double(q - K_min) / (K_max - K_min)`` (so ``P_max`` exactly at ``q == K_max``);
``q <= K_min`` never. ns-3 never marks queue 0 (its control queue) and marks Not-ECT packets too
(its data are sent with ECN 0); here only ECN-capable packets (ECN field 1, 2 or 3, RFC 3168)
are candidates, and never one of the control class (CNPs and ACKs, ns-3's queue 0): the caller
passes ``ecn_capable`` and ``control``.

The draw: a uniform in [0, 1) from a counter-based hash of ``(seed, switch, port, packet)``,
not from a generator's stream, so a packet's mark does not depend on the order in which events
run: :func:`red_uniform` chains the SplitMix64 finalizer (Steele, Lea and Flood, "Fast
Splittable Pseudorandom Number Generators", OOPSLA 2014; constants 0x9E3779B97F4A7C15,
0xBF58476D1CE4E5B9, 0x94D049BB133111EB) over the four keys and keeps the top 53 bits,
``(h >> 11) * 2**-53``. ``packet`` must identify the packet within the port (e.g. its global
packet index); marking happens when ``uniform < p``, as ns-3's ``UniformVariable(0, 1).GetValue()
< p``. Thresholds are bytes (int64), ``0 <= P_max <= 1``, ``K_min <= K_max``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["red_probability", "red_uniform", "red_should_mark", "splitmix64"]

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


@njit(cache=True, _nrt=False)
def splitmix64(x):  # type: ignore[no-untyped-def]
    """SplitMix64's output function of state ``x`` (uint64): ``z = x + golden`` then the two
    xor-shift-multiply rounds and a final xor-shift (Steele et al. 2014)."""
    z = np.uint64(x) + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, _nrt=False)
def red_uniform(seed, switch, port, packet):  # type: ignore[no-untyped-def]
    """Uniform float64 in [0, 1) keyed by ``(seed, switch, port, packet)`` (module docstring)."""
    h = splitmix64(np.uint64(seed))
    h = splitmix64(h ^ np.uint64(switch))
    h = splitmix64(h ^ np.uint64(port))
    h = splitmix64(h ^ np.uint64(packet))
    return float(h >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True, _nrt=False)
def red_probability(q_bytes, kmin_bytes, kmax_bytes, pmax):  # type: ignore[no-untyped-def]
    """The marking probability at egress queue depth ``q_bytes`` (``ShouldSendCN``)."""
    if q_bytes > kmax_bytes:
        return 1.0
    if q_bytes > kmin_bytes:
        return pmax * float(q_bytes - kmin_bytes) / float(kmax_bytes - kmin_bytes)
    return 0.0


@njit(cache=True, _nrt=False)
def red_should_mark(q_bytes, kmin_bytes, kmax_bytes, pmax, ecn_capable, control, seed, switch,
                    port, packet):  # type: ignore[no-untyped-def]
    """True when the packet leaves CE: an ECN-capable packet not of the control class, at
    egress depth ``q_bytes`` (after it left), its draw below :func:`red_probability`."""
    if control or not ecn_capable or q_bytes <= kmin_bytes:
        return False
    if q_bytes > kmax_bytes:
        return True
    return red_uniform(seed, switch, port, packet) < red_probability(q_bytes, kmin_bytes,
                                                                     kmax_bytes, pmax)
