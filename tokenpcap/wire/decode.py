"""Frame decoder and pretty-printer: bytes → the declared headers, payload, pad and CRCs.

Walks the same declarations the builders use: Ethernet [802.1Q] → IPv4 | IPv6 → UDP 4791 → BTH
(RoCEv2), Ethernet 0x8915 → GRH → BTH (RoCEv1), Ethernet 0x8808 → PFC, or LRH [GRH] → BTH for native
InfiniBand; after the BTH the extended headers that :data:`tokenpcap.wire.rdma.OPCODES` lists.
The end of the transport packet comes from the IP/GRH/LRH length, so Ethernet padding after the
ICRC is not mistaken for payload (C7: payload = UDP length − 8 − 12 − ext − pad − 4).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tokenpcap.errors import DecodeError
from tokenpcap.wire import crc
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header
from tokenpcap.wire.rdma import OPCODES

__all__ = ["DecodedFrame", "decode_frame", "pretty_frame"]


@dataclass
class DecodedFrame:
    """A decoded frame.

    Attributes:
        headers: ``(Header, values)`` in wire order.
        payload_offset: byte offset of the RDMA payload (-1 when the frame has no BTH).
        payload_bytes: RDMA payload bytes, without pad.
        pad: BTH PadCnt.
        icrc, vcrc: the CRC values on the wire (``None`` when absent).
        icrc_ok, vcrc_ok: whether they match the reference computation (``None`` when absent).
    """

    headers: list[tuple[Header, dict[str, int]]] = field(default_factory=list)
    payload_offset: int = -1
    payload_bytes: int = 0
    pad: int = 0
    icrc: int | None = None
    vcrc: int | None = None
    icrc_ok: bool | None = None
    vcrc_ok: bool | None = None

    def __getitem__(self, name: str) -> dict[str, int]:
        """Values of the first header called ``name``. Raises: KeyError if absent."""
        for h, values in self.headers:
            if h.name == name:
                return values
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(h.name == name for h, _ in self.headers)


def decode_frame(frame: bytes, link: str = "ethernet") -> DecodedFrame:
    """Decode one frame (no FCS).

    Args:
        frame: the bytes.
        link: ``"ethernet"`` or ``"infiniband"`` (LRH..VCRC, as in an ERF type-21 record).

    Raises:
        DecodeError: bytes shorter than a header or than a length field says, an unknown opcode,
            an unknown link.
    """
    out = DecodedFrame()
    frame = bytes(frame)

    def take(h: Header, off: int) -> tuple[dict[str, int], int]:
        v = h.unpack(frame, off)
        out.headers.append((h, v))
        return v, off + h.size

    if link == "infiniband":
        lrh, off = take(H.LRH, 0)
        end = lrh["PktLen"] * 4
        if lrh["LNH"] == 3:
            _, off = take(H.GRH, off)
        elif lrh["LNH"] != 2:
            raise DecodeError(f"LRH at byte 0: LNH {lrh['LNH']}, expected 2 or 3 (IBA transport)")
        _transport(frame, off, end, out, take)
        check = crc.check_ib_packet(frame)
        out.vcrc = H.VCRC.unpack(frame, end)["VCRC"]
        out.headers.append((H.VCRC, {"VCRC": out.vcrc}))
        out.icrc_ok, out.vcrc_ok = check.icrc_wire == check.icrc_computed, check.vcrc_wire == check.vcrc_computed
        return out
    if link != "ethernet":
        raise DecodeError(f"link: got {link!r}, expected 'ethernet' or 'infiniband'")
    eth, off = take(H.ETHERNET, 0)
    etype = eth["EtherType"]
    if etype == H.ETHERTYPE_VLAN:
        tag, off = take(H.DOT1Q, off)
        etype = tag["EtherType"]
    if etype == H.ETHERTYPE_MAC_CONTROL:
        take(H.PFC, off)
        return out
    if etype == H.ETHERTYPE_IPV4:
        ip, l4 = take(H.IPV4, off)
        end = off + ip["TotalLength"]
        proto = ip["Protocol"]
    elif etype in (H.ETHERTYPE_IPV6, H.ETHERTYPE_ROCEV1):
        ip, l4 = take(H.IPV6 if etype == H.ETHERTYPE_IPV6 else H.GRH, off)
        end = l4 + ip.get("PayloadLength", ip.get("PayLen", 0))
        proto = ip.get("NextHeader", H.IP_PROTO_UDP)
    else:
        return out
    if etype != H.ETHERTYPE_ROCEV1:
        if proto != H.IP_PROTO_UDP:
            return out
        udp, l4 = take(H.UDP, l4)
        if udp["DestinationPort"] != H.ROCEV2_UDP_PORT:
            return out
    if len(frame) < end:
        raise DecodeError(f"frame ends at byte {len(frame)}, its IP length says byte {end}")
    _transport(frame, l4, end, out, take)
    check = crc.check_ethernet_frame(frame)
    out.icrc_ok = check.ok
    return out


def _transport(frame: bytes, off: int, end: int, out: DecodedFrame, take) -> None:
    """BTH, extended headers, payload, pad and ICRC between ``off`` and ``end`` (ICRC included)."""
    bth, off = take(H.BTH, off)
    op = OPCODES.get(bth["OpCode"])
    if op is None:
        raise DecodeError(f"BTH.OpCode at byte {off - H.BTH.size}: got 0x{bth['OpCode']:02x}, "
                          f"expected one of {', '.join(f'0x{c:02x}' for c in sorted(OPCODES))}")
    for h in op.ext:
        _, off = take(h, off)
    icrc_at = end - H.ICRC.size
    if icrc_at < off:
        raise DecodeError(f"{op.name} at byte {off}: length says the ICRC starts at byte {icrc_at}, "
                          f"before the end of the headers")
    out.pad = bth["PadCnt"]
    out.payload_offset = off
    out.payload_bytes = icrc_at - off - out.pad
    if out.payload_bytes < 0:
        raise DecodeError(f"BTH.PadCnt {out.pad} at byte {off}: more pad than payload ({icrc_at - off} bytes)")
    out.icrc = H.ICRC.unpack(frame, icrc_at)["ICRC"]
    out.headers.append((H.ICRC, {"ICRC": out.icrc}))


def pretty_frame(frame: bytes, link: str = "ethernet") -> str:
    """Several lines, one per header (spec names, display formats), then payload and CRC status.

    Raises:
        DecodeError: see :func:`decode_frame`.
    """
    d = decode_frame(frame, link)
    lines = [h.pretty(v) for h, v in d.headers if h not in (H.ICRC, H.VCRC)]
    if d.payload_offset >= 0:
        lines.append(f"payload: {d.payload_bytes} bytes at offset {d.payload_offset}, pad {d.pad}")
        lines.append(f"ICRC: 0x{d.icrc:08x} {'ok' if d.icrc_ok else 'BAD'}")
    if d.vcrc is not None:
        lines.append(f"VCRC: 0x{d.vcrc:04x} {'ok' if d.vcrc_ok else 'BAD'}")
    return "\n".join(lines)
