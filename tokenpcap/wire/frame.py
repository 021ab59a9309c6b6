"""Scalar frame building: one ``PACKET_DTYPE`` row → the bytes a NIC puts on the wire.

This is the reference the vectorized :class:`tokenpcap.wire.builder.FrameBuilder` must equal byte
for byte. It packs every header from its declaration (:mod:`tokenpcap.wire.headers`) and computes
the CRCs with the reference code of :mod:`tokenpcap.wire.crc` (zlib over the masked bytes).

Fields as NICs set them: IPv4 DF set and header checksum correct (RFC 791), TTL and DSCP/ECN from
the context (ECN CE on a row a switch marked, ``ce``: :mod:`tokenpcap.wire.ecn`), UDP checksum 0
over IPv4 (allowed by RFC 768 and IBTA A17.4.1.2) and correct over IPv6 (RFC 8200 8.1); BTH
PadCnt with zero pad bytes; CNP with BECN set, MigReq 0, PSN as given, the CNP DSCP/PCP and 16
zero bytes (A17.9.3); frames shorter than 60 bytes zero-padded after the
ICRC (IEEE 802.3).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.wire import crc
from tokenpcap.wire import headers as H
from tokenpcap.wire.context import PAYLOAD_PATTERN_BYTES, WireContext
from tokenpcap.wire.ecn import row_ecn
from tokenpcap.wire.lines import LINE_FORMATS, encode_lines
from tokenpcap.wire.rdma import CNP, ETH_MIN_FRAME_BYTES, OPCODES, rocev2_flow_label

__all__ = ["build_frame", "build_pfc_frame", "transport_fields"]


def _int(row: np.void | dict, name: str) -> int:
    return int(row[name])


def transport_fields(row: np.void | dict, ctx: WireContext) -> dict[str, dict[str, int]]:
    """Values of the BTH and the extended headers of one packet row, by header name.

    Raises:
        EncodeError: unknown opcode, payload on an opcode without payload, PadCnt inconsistent
            with the payload length.
    """
    op = _int(row, "opcode")
    if op not in OPCODES:
        raise EncodeError(f"BTH.OpCode: got 0x{op:02x}, expected one of "
                          f"{', '.join(f'0x{c:02x}' for c in sorted(OPCODES))}")
    info = OPCODES[op]
    pay = _int(row, "payload_bytes")
    if pay and not info.payload:
        raise EncodeError(f"payload_bytes: got {pay} for opcode 0x{op:02x} ({info.name}), expected 0")
    pad = (-pay) & 3
    if _int(row, "pad") != pad:
        raise EncodeError(f"pad: got {_int(row, 'pad')} for {pay} payload bytes, expected {pad}")
    cnp = op == CNP
    out = {"BTH": dict(
        OpCode=op, SE=_int(row, "solicited"), MigReq=0 if cnp else ctx.mig_req, PadCnt=pad,
        P_Key=ctx.p_key, BECN=1 if cnp else _int(row, "becn"), DestQP=_int(row, "dest_qp"),
        AckReq=_int(row, "ack_req"), PSN=_int(row, "psn"))}
    for h in info.ext:
        if h is H.RETH:
            out[h.name] = dict(VA=_int(row, "reth_va"), R_Key=_int(row, "reth_rkey"),
                               DMALen=_int(row, "reth_len"))
        elif h is H.AETH:
            aeth = _int(row, "aeth")
            out[h.name] = dict(Syndrome=aeth >> 24, MSN=aeth & 0xFFFFFF)
        elif h is H.IMMDT:
            out[h.name] = dict(ImmDt=_int(row, "imm"))
        elif h is H.DETH:
            out[h.name] = dict(Q_Key=ctx.q_key, SrcQP=_int(row, "src_qp"))
        elif h is H.IETH:
            out[h.name] = dict(R_Key=_int(row, "reth_rkey"))
        elif h is H.ATOMIC_ETH:
            out[h.name] = dict(VA=_int(row, "reth_va"), R_Key=_int(row, "reth_rkey"))
        else:   # AtomicAckETH, CNP reserved bytes: zero
            out[h.name] = {}
    return out


def _names(row: np.void | dict):
    return row.keys() if isinstance(row, dict) else row.dtype.names


def build_frame(row: np.void | dict, ctx: WireContext, payload: bytes | None = None) -> bytes:
    """Build one frame (no FCS) from a ``PACKET_DTYPE`` row.

    Args:
        row: one row of a ``PACKET_DTYPE`` array (or a dict with the same keys).
        ctx: transport, marking and per-NIC addresses.
        payload: explicit payload bytes (length ``row["payload_bytes"]``); default: the first
            ``payload_bytes`` bytes of ``ctx.pattern``, or with ``line_protocol`` 1/2 of the
            pattern's data in LL/LL128 lines flagged ``line_flag`` (:mod:`tokenpcap.wire.lines`).

    Returns:
        RoCEv2: Ethernet [802.1Q] IPv4|IPv6 UDP BTH ext payload pad ICRC [zero pad to 60 bytes];
        InfiniBand: LRH [GRH] BTH ext payload pad ICRC VCRC.

    Raises:
        EncodeError: a value that does not fit its field (names header, field, value, range), an
            unknown opcode, a NIC index outside the address arrays, a payload of the wrong length.
    """
    fields = transport_fields(row, ctx)
    npay = _int(row, "payload_bytes")
    if payload is None:
        if npay > ctx.pattern.size:
            raise EncodeError(f"payload_bytes: got {npay}, expected at most {ctx.pattern.size}")
        code = int(row["line_protocol"]) if "line_protocol" in _names(row) else 0
        if code:                # NCCL LL/LL128 lines over the pattern (tokenpcap.wire.lines)
            size = LINE_FORMATS[code][0]
            base = ctx.pattern[:PAYLOAD_PATTERN_BYTES]
            lines = encode_lines(code, base, int(row["line_flag"]), base.size // size)
            payload = lines[:npay].tobytes()
        else:
            payload = ctx.pattern[:npay].tobytes()
    elif len(payload) != npay:
        raise EncodeError(f"payload: got {len(payload)} bytes, expected payload_bytes = {npay}")
    body = b"".join(h.pack(fields[h.name]) for h in (H.BTH, *OPCODES[_int(row, "opcode")].ext))
    body += payload + b"\0" * fields["BTH"]["PadCnt"]
    nic, peer = _int(row, "nic"), _int(row, "peer_nic")
    if not (0 <= nic < ctx.n_nics and 0 <= peer < ctx.n_nics):
        raise EncodeError(f"nic/peer_nic: got {nic}/{peer}, expected 0..{ctx.n_nics - 1} "
                          f"(the WireContext address arrays)")
    if ctx.transport == "infiniband":
        row_ecn(row, ctx)                      # refuses a CE mark: IB has no IP ECN field
        return _build_ib(row, ctx, body, nic, peer)
    return _build_rocev2(row, ctx, body, nic, peer)


def _flow_label(row: np.void | dict, ctx: WireContext) -> int:
    if ctx.flow_label is not None:
        return ctx.flow_label
    return int(rocev2_flow_label(_int(row, "src_qp"), _int(row, "dest_qp")))


def _build_rocev2(row, ctx: WireContext, body: bytes, nic: int, peer: int) -> bytes:
    cnp = _int(row, "opcode") == CNP
    dscp = ctx.cnp_dscp if cnp else ctx.dscp
    ecn = row_ecn(row, ctx)                    # CE when a switch marked it (ecn.py)
    udp_len = H.UDP.size + len(body) + H.ICRC.size
    udp = H.UDP.pack(SourcePort=_int(row, "udp_sport"), Length=udp_len)
    if ctx.ip_version == 4:
        ip_fields = dict(DSCP=dscp, ECN=ecn, TotalLength=H.IPV4.size + udp_len,
                         Identification=_int(row, "ip_id"), DF=1, TTL=ctx.ttl,
                         SourceAddress=int.from_bytes(ctx.ipv4[nic].tobytes(), "big"),
                         DestinationAddress=int.from_bytes(ctx.ipv4[peer].tobytes(), "big"))
        ip_fields["HeaderChecksum"] = crc.ipv4_checksum(H.IPV4.pack(ip_fields))
        ip = H.IPV4.pack(ip_fields)
        ethertype = H.ETHERTYPE_IPV4
    else:
        ip = H.IPV6.pack(TrafficClass=(dscp << 2) | ecn, FlowLabel=_flow_label(row, ctx),
                         PayloadLength=udp_len, HopLimit=ctx.ttl,
                         SourceAddress=int.from_bytes(ctx.ipv6[nic].tobytes(), "big"),
                         DestinationAddress=int.from_bytes(ctx.ipv6[peer].tobytes(), "big"))
        ethertype = H.ETHERTYPE_IPV6
    eth = H.ETHERNET.pack(Destination=int.from_bytes(ctx.mac[peer].tobytes(), "big"),
                          Source=int.from_bytes(ctx.mac[nic].tobytes(), "big"),
                          EtherType=H.ETHERTYPE_VLAN if ctx.vlan else ethertype)
    if ctx.vlan:
        eth += H.DOT1Q.pack(PCP=ctx.cnp_pcp if cnp else ctx.pcp, DEI=ctx.dei, VID=ctx.vlan_id,
                            EtherType=ethertype)
    frame = eth + ip + udp + body + b"\0" * H.ICRC.size
    icrc = H.ICRC.pack(ICRC=crc.icrc(frame))
    if ctx.ip_version == 6 and ctx.ipv6_udp_checksum:
        l4 = len(eth) + H.IPV6.size
        seg = udp + body + icrc
        udp = H.UDP.pack(SourcePort=_int(row, "udp_sport"), Length=udp_len,
                         Checksum=crc.udp_checksum_ipv6(ctx.ipv6[nic].tobytes(), ctx.ipv6[peer].tobytes(), seg))
        frame = frame[:l4] + udp + frame[l4 + H.UDP.size:]
    frame = frame[:-H.ICRC.size] + icrc
    return frame + b"\0" * max(0, ETH_MIN_FRAME_BYTES - len(frame))


def _build_ib(row, ctx: WireContext, body: bytes, nic: int, peer: int) -> bytes:
    grh = b""
    if ctx.grh:
        grh = H.GRH.pack(TClass=ctx.traffic_class, FlowLabel=_flow_label(row, ctx),
                         PayLen=len(body) + H.ICRC.size, HopLmt=ctx.ttl,
                         SGID=int.from_bytes(ctx.ipv6[nic].tobytes(), "big"),
                         DGID=int.from_bytes(ctx.ipv6[peer].tobytes(), "big"))
    pktlen = H.LRH.size + len(grh) + len(body) + H.ICRC.size
    lrh = H.LRH.pack(VL=ctx.vl, SL=ctx.sl, LNH=3 if ctx.grh else 2, DLID=int(ctx.lid[peer]),
                     PktLen=pktlen // 4, SLID=int(ctx.lid[nic]))
    packet = lrh + grh + body + b"\0" * H.ICRC.size
    packet = packet[:-H.ICRC.size] + H.ICRC.pack(ICRC=crc.icrc_of_ib(packet))
    return packet + H.VCRC.pack(VCRC=crc.vcrc16(packet))


def build_pfc_frame(src_mac: bytes, class_enable: int, pause_quanta: list[int] | tuple[int, ...]) -> bytes:
    """An 802.1Qbb priority flow control frame (60 bytes, no FCS).

    Args:
        src_mac: 6 bytes, the sender's MAC.
        class_enable: priority-enable vector, bit k for priority k (0..255).
        pause_quanta: eight pause times in quanta of 512 bit times (0 = XON).

    Raises:
        EncodeError: wrong MAC length, a vector or quanta out of range, not eight quanta.
    """
    if len(src_mac) != 6:
        raise EncodeError(f"src_mac: got {len(src_mac)} bytes, expected 6")
    if len(pause_quanta) != 8:
        raise EncodeError(f"pause_quanta: got {len(pause_quanta)} values, expected 8")
    if not 0 <= class_enable <= 0xFF:
        raise EncodeError(f"PFC.ClassEnableVector: got {class_enable}, expected 0..255 (eight priorities)")
    eth = H.ETHERNET.pack(Destination=H.PFC_DST_MAC, Source=int.from_bytes(src_mac, "big"),
                          EtherType=H.ETHERTYPE_MAC_CONTROL)
    body = H.PFC.pack(ClassEnableVector=class_enable, **{f"Time{k}": q for k, q in enumerate(pause_quanta)})
    frame = eth + body
    return frame + b"\0" * (ETH_MIN_FRAME_BYTES - len(frame))
