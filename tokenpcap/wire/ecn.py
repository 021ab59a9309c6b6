"""CE marks on RoCEv2 frames: the IP ECN field of a packet a switch marked (``PACKET_DTYPE.ce``).

A switch that marks a packet rewrites the two ECN bits of its IPv4 TOS byte or IPv6 traffic class
to CE (3) (RFC 3168 5 and 6.1.1: only an ECT packet, ECN 1 or 2, is marked; a Not-ECT one would be
dropped instead) and, over IPv4, updates the header checksum (RFC 1624: the 16-bit word that holds
the TOS byte grows by ``3 - ECT``). The RoCEv2 ICRC masks the TOS byte (IPv4)
and the traffic class (IPv6) to ones, so it is the same before and after the mark: a switch never
recomputes it (IBTA vol. 1 7.8.1, RoCEv2 Annex A17.4.1.3; the masks are
:mod:`tokenpcap.wire.crc`'s). InfiniBand has no IP header (its congestion mark is the BTH FECN
bit), so a CE row there is refused.

The vectorized builder ORs :func:`ce_bits` into the header words of the marked rows and adds
:func:`ipv4_checksum_delta` to their checksum sums; the scalar reference
(:func:`tokenpcap.wire.frame.build_frame`) writes :func:`row_ecn`.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire.context import WireContext

__all__ = ["ECN_CE", "ce_bits", "check_ce", "ipv4_checksum_delta", "row_ecn"]

#: The ECN codepoint Congestion Experienced (RFC 3168 5: binary 11).
ECN_CE = 3


def check_ce(ctx: WireContext, ce: np.ndarray, first: int = 0) -> None:
    """``ce`` (uint8 ``(n,)``, rows ``first..``) is 0/1, and 1 only where a mark exists: RoCEv2
    with an ECT codepoint in ``ctx.ecn``.

    Raises:
        EncodeError: naming the first bad row, its value and what was expected.
    """
    if not ce.size or int(ce.max()) == 0:
        return
    bad = np.flatnonzero(ce > 1)
    if bad.size:
        i = int(bad[0])
        raise EncodeError(f"packets[{first + i}].ce: got {ce[i]}, expected 0 or 1")
    i = first + int(np.flatnonzero(ce)[0])
    if ctx.transport != "rocev2":
        raise EncodeError(f"packets[{i}].ce: got 1, expected 0 under transport "
                          f"{ctx.transport!r} (no IP ECN field; InfiniBand marks BTH FECN)")
    if ctx.ecn == 0:
        raise EncodeError(f"packets[{i}].ce: got 1, expected 0 for Not-ECT packets (network.ecn "
                          "0: RFC 3168 5 marks only ECT packets)")


def row_ecn(row: np.void | dict, ctx: WireContext) -> int:
    """The IP ECN field of one row: :data:`ECN_CE` when ``row["ce"]``, else ``ctx.ecn``; a
    row without a ``ce`` key is unmarked.

    Raises:
        EncodeError: as :func:`check_ce`.
    """
    ce = int(row["ce"]) if "ce" in (row.dtype.names if isinstance(row, np.void) else row) else 0
    check_ce(ctx, np.array([ce], np.uint8))
    return ECN_CE if ce else ctx.ecn


def ce_bits(ip_version: int, l3: int) -> tuple[int, np.uint64]:
    """Where the ECN bits of an IP header that starts at byte ``l3`` of the frame lie in its
    big-endian 64-bit header words: ``(word index, mask of the two bits)`` (IPv4: the low bits
    of the TOS byte; IPv6: the low bits of the traffic class, which spans bytes 0-1)."""
    if ip_version == 4:
        a = l3 * 8 + H.IPV4.slot("ECN").bit_offset
    else:
        a = l3 * 8 + H.IPV6.slot("TrafficClass").bit_offset + 6
    j = a // 64
    return j, np.uint64(ECN_CE << (64 * j + 64 - (a + 2)))


def ipv4_checksum_delta(ctx: WireContext, ce: np.ndarray) -> np.ndarray:
    """What marking adds to the RFC 1071 sum of each IPv4 header: ``3 - ctx.ecn`` for a marked
    row (the TOS byte is the low byte of the header's first 16-bit word), else 0; int64 ``(n,)``."""
    return ce.astype(np.int64) * (ECN_CE - int(ctx.ecn))
