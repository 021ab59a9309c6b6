"""Scalar reference CRCs and checksums: ICRC (RoCEv2 over IPv4/IPv6, RoCEv1, native IB), VCRC,
the IPv4 header checksum and the UDP checksum over IPv6.

These are the slow, obviously-right versions (zlib for CRC-32, a bit loop for CRC-16) that the
tests hold the vectorized builder to, and that the analysis uses to check foreign captures.

ICRC (IBTA vol.1 7.8.1; RoCEv2: Annex A17.4.1.3; cases C1, C2, C4): CRC-32 as zlib computes it
(polynomial 0x04C11DB7 reflected, init and xorout 0xFFFFFFFF) over the packet with the variant
fields set to all ones, written least-significant byte first:

* RoCEv2/IPv4: 8 bytes 0xFF (in place of the LRH), the IPv4 header with TOS (DSCP/ECN), TTL and
  header checksum all ones, the UDP header with the checksum all ones, the BTH with byte 4
  (FECN, BECN, Resv6a) all ones, then everything up to the ICRC.
* RoCEv2/IPv6 and RoCEv1 / IB with GRH: 8 bytes 0xFF, the IPv6 header / GRH with traffic class,
  flow label and hop limit all ones, [UDP with the checksum all ones], BTH byte 4 all ones ...
* Native IB local (LRH LNH=2): the LRH itself with only its VL nibble all ones, BTH byte 4 all ones.

VCRC (IBTA 7.8.2): CRC-16, polynomial 0x100B (reflected 0xD008), init and xorout 0xFFFF, over
LRH..ICRC unmasked, least-significant byte first.

Which bits are masked, and where the ICRC's coverage starts, come from the one table of wire
contexts (:mod:`tokenpcap.wire.stack`), derived from the header declarations.
"""
from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from tokenpcap.errors import DecodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire.stack import STACKS

__all__ = [
    "icrc_masked_bytes", "icrc", "icrc_of_ib", "vcrc16", "ipv4_checksum", "udp_checksum_ipv6",
    "CrcCheck", "check_ethernet_frame", "check_ib_packet", "VCRC_POLY_REFLECTED",
]

VCRC_POLY_REFLECTED = 0xD008  # bit-reversal of 0x100B



def vcrc16(data: bytes) -> int:
    """VCRC: CRC-16, poly 0x100B reflected, init 0xFFFF, xorout 0xFFFF (IBTA vol.1 7.8.2), bit by bit."""
    reg = 0xFFFF
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ VCRC_POLY_REFLECTED if reg & 1 else reg >> 1
    return reg ^ 0xFFFF


def ipv4_checksum(header: bytes) -> int:
    """RFC 791/1071 header checksum: ones' complement of the ones' complement sum of 16-bit words.

    ``header`` is the 20-byte header with its checksum field zero.
    """
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_checksum_ipv6(src: bytes, dst: bytes, udp: bytes) -> int:
    """RFC 8200 8.1 UDP checksum over the IPv6 pseudo-header and ``udp`` (checksum field zero).

    A computed 0 is sent as 0xFFFF (RFC 768).
    """
    data = src + dst + struct.pack("!IxxxB", len(udp), H.IP_PROTO_UDP) + udp
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    csum = ~total & 0xFFFF
    return csum or 0xFFFF


def _masked(packet: bytes, mask) -> bytes:  # type: ignore[no-untyped-def]
    """``packet`` with ``mask`` (uint8, from its start) OR-ed in: the ICRC's view of it."""
    out = bytearray(packet)
    for i, m in enumerate(mask.tolist()[:len(out)]):
        out[i] |= m
    return bytes(out)


def _l2(frame: bytes) -> tuple[int, int]:
    """(EtherType, offset of the L3 header) of an Ethernet II frame with at most one 802.1Q tag."""
    if len(frame) < 14:
        raise DecodeError(f"Ethernet at byte 0: need 14 bytes, got {len(frame)}")
    etype = int.from_bytes(frame[12:14], "big")
    if etype == H.ETHERTYPE_VLAN:
        if len(frame) < 18:
            raise DecodeError(f"802.1Q at byte 14: need 4 bytes, got {len(frame) - 14}")
        return int.from_bytes(frame[16:18], "big"), 18
    return etype, 14


def icrc_masked_bytes(frame: bytes) -> bytes:
    """The exact bytes the ICRC of an Ethernet frame (RoCEv2 IPv4/IPv6, or RoCEv1) covers.

    Returns:
        8 bytes 0xFF + the masked packet from the IP header / GRH up to, not including, the ICRC.

    Raises:
        DecodeError: not RoCE (EtherType, IP protocol or UDP port), or shorter than its lengths say.
    """
    etype, l3 = _l2(frame)
    if etype == H.ETHERTYPE_IPV4:
        ip = H.IPV4.unpack(frame, l3)
        if ip["Protocol"] != H.IP_PROTO_UDP or ip["IHL"] != 5:
            raise DecodeError(f"IPv4 at byte {l3}: protocol {ip['Protocol']}, IHL {ip['IHL']}; "
                              f"expected UDP (17) without options (IHL 5)")
        end = l3 + ip["TotalLength"]
        udp = l3 + 20
        ctx = "rocev2-ipv4"
    elif etype == H.ETHERTYPE_IPV6 or etype == H.ETHERTYPE_ROCEV1:
        ip = H.IPV6.unpack(frame, l3)   # the GRH has the IPv6 layout
        end = l3 + 40 + ip["PayloadLength"]
        udp = l3 + 40 if etype == H.ETHERTYPE_IPV6 else None
        if udp is not None and ip["NextHeader"] != H.IP_PROTO_UDP:
            raise DecodeError(f"IPv6 at byte {l3}: next header {ip['NextHeader']}, expected UDP (17)")
        ctx = "rocev2-ipv6" if udp is not None else "rocev1"
    else:
        raise DecodeError(f"EtherType at byte {l3 - 2}: got 0x{etype:04x}, expected 0x0800, 0x86dd "
                          f"(RoCEv2) or 0x8915 (RoCEv1)")
    if len(frame) < end:
        raise DecodeError(f"frame ends at byte {len(frame)}, its IP length says byte {end}")
    if udp is not None:
        u = H.UDP.unpack(frame, udp)
        if u["DestinationPort"] != H.ROCEV2_UDP_PORT:
            raise DecodeError(f"UDP at byte {udp}: destination port {u['DestinationPort']}, expected 4791")
    st = STACKS[ctx]
    return st.icrc_prefix + _masked(frame[l3:end], st.icrc_mask())[:-H.ICRC.size]


def icrc(frame: bytes) -> int:
    """ICRC that an Ethernet frame (RoCEv2 or RoCEv1) should carry, as an int (zlib's value)."""
    return zlib.crc32(icrc_masked_bytes(frame))


def icrc_of_ib(packet: bytes) -> int:
    """ICRC a native InfiniBand packet (LRH..ICRC[+VCRC]) should carry (C4).

    Raises:
        DecodeError: shorter than its LRH PktLen says, or LNH not 2 (local) or 3 (global).
    """
    lrh = H.LRH.unpack(packet, 0)
    end = lrh["PktLen"] * 4
    if len(packet) < end or end < 8 + 12 + 4:
        raise DecodeError(f"LRH PktLen {lrh['PktLen']} words: packet of {len(packet)} bytes, "
                          f"expected at least {max(end, 24)}")
    if lrh["LNH"] not in (2, 3):
        raise DecodeError(f"LRH at byte 0: LNH {lrh['LNH']}, expected 2 (IBA local) or 3 (IBA global)")
    st = STACKS["ib-local" if lrh["LNH"] == 2 else "ib-global"]
    return zlib.crc32(_masked(packet[:end - H.ICRC.size], st.icrc_mask()))


class CrcCheck(NamedTuple):
    """Result of checking one frame: the values on the wire and the values computed."""

    icrc_wire: int
    icrc_computed: int
    vcrc_wire: int | None = None
    vcrc_computed: int | None = None

    @property
    def ok(self) -> bool:
        """Both CRCs (VCRC only on native IB) match."""
        return self.icrc_wire == self.icrc_computed and self.vcrc_wire == self.vcrc_computed


def check_ethernet_frame(frame: bytes) -> CrcCheck:
    """Read and recompute the ICRC of a RoCEv2/RoCEv1 frame. Raises: DecodeError (see icrc)."""
    masked = icrc_masked_bytes(frame)
    _, l3 = _l2(frame)
    pos = l3 + len(masked) - 8
    wire = H.ICRC.unpack(frame, pos)["ICRC"]
    return CrcCheck(wire, zlib.crc32(masked))


def check_ib_packet(packet: bytes) -> CrcCheck:
    """Read and recompute ICRC and VCRC of a native IB packet (LRH..VCRC). Raises: DecodeError."""
    computed = icrc_of_ib(packet)
    end = H.LRH.unpack(packet, 0)["PktLen"] * 4
    wire = H.ICRC.unpack(packet, end - 4)["ICRC"]
    vwire = H.VCRC.unpack(packet, end)["VCRC"]
    return CrcCheck(wire, computed, vwire, vcrc16(packet[:end]))
