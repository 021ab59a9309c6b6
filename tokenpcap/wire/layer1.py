"""Layer-1 time of a frame on a link (C12): what a frame occupies beyond its captured bytes.

Ethernet (RoCEv2): a frame of ``L`` bytes as captured (no FCS) occupies
``(L + 4 FCS + 8 preamble/SFD + 12 IFG) * 8 / rate`` (IEEE 802.3 clauses 3.1.1 and 4.4.2).
C12: 60 B at 10 Gb/s is 67.2 ns; 4170 B at 400 Gb/s 83.88 ns, at 100 Gb/s 335.52 ns.

Native InfiniBand: a packet of ``L`` bytes as captured (LRH..VCRC) occupies ``(L + 2) * 8 / rate``:
one start delimiter (SDP) and one end delimiter (EGP) character and no inter-packet gap (IBTA
vol.2, physical layer packet framing; on a 4x link LRH..VCRC is 4k + 2 bytes, so with the two
delimiters a packet fills whole 4-lane rows). ``link_gbps`` is the data rate after 8b/10b or
64b/66b encoding (EDR 4x 100, HDR 200, NDR 400). Flow-control packets and skip ordered sets are
not modelled (they take well under 1 % of a link).

The engine gives each frame the ceiling of its time in whole ns (:func:`layer1_time_ns`), so no
window of a trace ever exceeds the link rate; :func:`layer1_time_ps` is the exact value for tests.
The rate is taken as the exact decimal the profile wrote (``Fraction(repr(link_gbps))``).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["ETH_L1_OVERHEAD_BYTES", "IB_L1_OVERHEAD_BYTES", "layer1_overhead_bytes", "layer1_time_ps",
           "layer1_time_ns"]

#: Ethernet layer-1 bytes not in a capture: FCS 4 + preamble and SFD 8 + minimum IFG 12 (802.3).
ETH_L1_OVERHEAD_BYTES = 4 + 8 + 12
#: InfiniBand: start-of-data-packet (SDP) and end-of-good-packet (EGP) delimiter characters (IBTA
#: vol.2, physical layer packet framing).
IB_L1_OVERHEAD_BYTES = 2


def layer1_overhead_bytes(transport: str) -> int:
    """Bytes a frame occupies on the wire beyond its captured length (see the module docstring).

    Raises:
        InputError: unknown transport.
    """
    if transport == "rocev2":
        return ETH_L1_OVERHEAD_BYTES
    if transport == "infiniband":
        return IB_L1_OVERHEAD_BYTES
    raise InputError(f"transport: got {transport!r}, expected 'rocev2' or 'infiniband'")


def _rate(link_gbps: float) -> tuple[int, int]:
    """Link rate as an exact fraction num/den of bits per ns (the decimal the profile wrote)."""
    try:
        r = Fraction(repr(float(link_gbps)))
    except (TypeError, ValueError, OverflowError):
        r = Fraction(0)
    if not r > 0:
        raise InputError(f"link_gbps: got {link_gbps!r}, expected a number > 0")
    return r.numerator, r.denominator


def layer1_time_ps(frame_bytes, link_gbps: float, transport: str = "rocev2") -> np.ndarray:
    """Layer-1 time of frames in picoseconds, rounded up (exact when it is a whole ps).

    C12: 60 B at 10 Gb/s → 67200 ps; 4170 B at 400 Gb/s → 83880 ps; at 100 Gb/s → 335520 ps.

    Args:
        frame_bytes: int ``(n,)`` captured frame lengths (no FCS; LRH..VCRC for InfiniBand).
        link_gbps: link data rate in Gb/s (> 0).
        transport: ``"rocev2"`` or ``"infiniband"``.

    Returns:
        int64 ``(n,)`` ps.

    Raises:
        InputError: a rate <= 0 or an unknown transport.
    """
    num, den = _rate(link_gbps)
    bits = (np.asarray(frame_bytes, dtype=np.int64) + layer1_overhead_bytes(transport)) * 8
    return -(-(bits * (1000 * den)) // num)


def layer1_time_ns(frame_bytes, link_gbps: float, transport: str = "rocev2") -> np.ndarray:
    """Layer-1 time of frames in whole ns, rounded up: what one frame occupies on the link.

    ``ceil((L + overhead) * 8 / link_gbps)``; 4170 B at 400 Gb/s (83.88 ns) → 84 ns. See
    :func:`layer1_time_ps` for arguments; returns int64 ``(n,)`` ns.
    """
    num, den = _rate(link_gbps)
    bits = (np.asarray(frame_bytes, dtype=np.int64) + layer1_overhead_bytes(transport)) * 8
    return -(-(bits * den) // num)
