"""Which headers stack in which order, for each wire context: the one table every frame reader reads.

A *wire context* is a transport with its options: RoCEv2 over IPv4 or IPv6, with or without an
802.1Q tag, RoCEv1 (Ethernet + GRH, read only), native InfiniBand local (LRH) or global
(LRH + GRH). For each, :class:`Stack` says which headers precede the BTH (wire order), where the
ICRC's coverage starts and what it prepends, which bits it masks, and what trails the packet:

========================= ============================== =========== ============== ===========
context                   headers before the BTH         ICRC from   ICRC prefix    trailer
========================= ============================== =========== ============== ===========
rocev2-ipv4 [+vlan]       Ethernet [802.1Q] IPv4 UDP     IPv4        8 x 0xFF       ICRC
rocev2-ipv6 [+vlan]       Ethernet [802.1Q] IPv6 UDP     IPv6        8 x 0xFF       ICRC
rocev1                    Ethernet GRH                   GRH         8 x 0xFF       ICRC
ib-local                  LRH                            LRH         none           ICRC VCRC
ib-global                 LRH GRH                        LRH         none           ICRC VCRC
========================= ============================== =========== ============== ===========

ICRC masks (IBTA vol.1 7.8.1; RoCEv2 Annex A17.4.1.3; cases C1-C4): the fields declared
``icrc_masked`` in :mod:`tokenpcap.wire.headers` (IPv4 DSCP, ECN, TTL, header checksum; IPv6 and
GRH traffic class, flow label, hop limit; UDP checksum; BTH FECN, BECN, Resv6a; LRH VL), and with
a GRH behind the LRH the whole LRH. The frame lengths (:func:`tokenpcap.wire.rdma.frame_bytes`),
the vectorized builder's layouts (:mod:`tokenpcap.wire.layout`), the scalar reference ICRC
(:mod:`tokenpcap.wire.crc`) and the capture analysis' ICRC check (:mod:`tokenpcap.analysis.crc`)
read this table.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header

__all__ = ["Stack", "stack", "STACKS", "ICRC_PREFIX"]

#: What the ICRC of a RoCE packet (v1 and v2) covers before the packet: 8 bytes of 0xFF standing
#: for the masked LRH it does not carry (RoCEv2 Annex A17.4.1.3).
ICRC_PREFIX = b"\xff" * 8


@dataclass(frozen=True)
class Stack:
    """The headers of one wire context (module docstring).

    Attributes:
        name: ``rocev2-ipv4``, ``rocev2-ipv4-vlan``, ``rocev2-ipv6``, ``rocev2-ipv6-vlan``,
            ``rocev1``, ``ib-local`` or ``ib-global``.
        headers: the headers before the BTH, in wire order.
        icrc_from: index in ``headers`` of the first header the ICRC covers.
        icrc_prefix: bytes the ICRC covers before that header.
        whole_masked: headers the ICRC masks entirely (the LRH when a GRH follows it).
        trailer: what follows the payload and pad: ``(ICRC,)`` or ``(ICRC, VCRC)``.
    """

    name: str
    headers: tuple[Header, ...]
    icrc_from: int
    icrc_prefix: bytes
    whole_masked: tuple[Header, ...] = ()
    trailer: tuple[Header, ...] = (H.ICRC,)

    @functools.cached_property
    def before_bth_bytes(self) -> int:
        """Bytes of the headers before the BTH."""
        return sum(h.size for h in self.headers)

    @functools.cached_property
    def trailer_bytes(self) -> int:
        """Bytes of the trailer (ICRC, and VCRC on native InfiniBand)."""
        return sum(h.size for h in self.trailer)

    @functools.cached_property
    def icrc_start(self) -> int:
        """Offset in the frame of the first byte the ICRC covers (after its prefix)."""
        return sum(h.size for h in self.headers[:self.icrc_from])

    def offset(self, header: Header) -> int:
        """Offset in the frame of ``header`` (one of :attr:`headers`, or the BTH right after them).

        Raises:
            EncodeError: the context has no such header.
        """
        col = 0
        for h in self.headers:
            if h is header:
                return col
            col += h.size
        if header is H.BTH:
            return col
        raise EncodeError(f"wire context {self.name}: no {header.name} header, expected one of "
                          f"{', '.join(h.name for h in self.headers)}, BTH")

    def icrc_mask(self) -> np.ndarray:
        """uint8 ``(before_bth_bytes - icrc_start + 12,)``: OR mask of the covered headers through
        the BTH; the ICRC is CRC-32 over ``icrc_prefix + (bytes | mask) + the rest``."""
        parts = [np.full(h.size, 0xFF, np.uint8) if h in self.whole_masked else h.icrc_mask()
                 for h in self.headers[self.icrc_from:]]
        out = np.concatenate(parts + [H.BTH.icrc_mask()])
        out.flags.writeable = False
        return out


def _roce(ip: Header, vlan: bool) -> Stack:
    name = f"rocev2-ipv{4 if ip is H.IPV4 else 6}" + ("-vlan" if vlan else "")
    heads = (H.ETHERNET,) + ((H.DOT1Q,) if vlan else ()) + (ip, H.UDP)
    return Stack(name, heads, len(heads) - 2, ICRC_PREFIX)


#: Every wire context by name.
STACKS: dict[str, Stack] = {s.name: s for s in (
    _roce(H.IPV4, False), _roce(H.IPV4, True), _roce(H.IPV6, False), _roce(H.IPV6, True),
    Stack("rocev1", (H.ETHERNET, H.GRH), 1, ICRC_PREFIX),
    Stack("ib-local", (H.LRH,), 0, b"", trailer=(H.ICRC, H.VCRC)),
    Stack("ib-global", (H.LRH, H.GRH), 0, b"", whole_masked=(H.LRH,), trailer=(H.ICRC, H.VCRC)),
)}


def stack(transport: str = "rocev2", ip_version: int = 4, vlan: bool = False,
          grh: bool = False) -> Stack:
    """The :class:`Stack` of a wire context as generated frames use it.

    Args:
        transport: ``"rocev2"`` or ``"infiniband"``; ip_version 4/6 and vlan for RoCEv2, grh for IB.

    Raises:
        EncodeError: unknown transport or IP version.
    """
    if transport == "rocev2":
        if ip_version not in (4, 6):
            raise EncodeError(f"ip_version: got {ip_version!r}, expected 4 or 6")
        return STACKS[f"rocev2-ipv{ip_version}" + ("-vlan" if vlan else "")]
    if transport == "infiniband":
        return STACKS["ib-global" if grh else "ib-local"]
    raise EncodeError(f"transport: got {transport!r}, expected 'rocev2' or 'infiniband'")
