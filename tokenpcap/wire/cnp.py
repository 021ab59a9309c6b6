"""RoCEv2 congestion notification packets (CNPs), a batch at a time: the ``PACKET_DTYPE`` rows of
the CNPs a notification point sends, which :class:`tokenpcap.wire.builder.FrameBuilder` turns into
frames like any other row (its opcode group 0x81).

A CNP (IBTA vol. 1 Annex A17.9.3) is Ethernet [802.1Q] / IP / UDP 4791 / BTH / 16 reserved zero
bytes / ICRC:

======== ================================================================================
field    value
======== ================================================================================
BTH      OpCode 0x81, SE 0, MigReq 0, PadCnt 0, TVer 0, P_Key of the context, FECN 0,
         BECN 1 (byte 4 = 0x40), DestQP = the QPN of the QP that sent the marked packet
         (the reaction point's), AckReq 0, PSN 0
payload  none: 16 reserved bytes, zero, then the ICRC
IP       DSCP ``WireContext.cnp_dscp`` (ConnectX CNP_DSCP 48), ECN ``WireContext.ecn``
         (a ConnectX-4 Lx CNP: TOS 0xc2, DSCP 48 with ECT(0)), IPv4 ID 0, DF, TTL of the context
UDP      source port ``fabric.np.cnp_udp_sport`` (the same capture: 0), destination 4791
802.1Q   PCP ``WireContext.cnp_pcp`` (CNP_802P_PRIO 6) when the frames are tagged
======== ================================================================================

Over IPv4 untagged the frame is :func:`cnp_frame_bytes` = 74 bytes (UDP length 40, IPv4 total
length 60), 78 with the FCS; the scapy vector ``cnp_b_to_a`` of ``tests/cases`` is one.
TShark shows opcode 0x81 as "Unknown (129)" (filter ``infiniband.bth.opcode == 0x81``), our
decoder (:mod:`tokenpcap.wire.decode`) as ``CNP`` with its reserved bytes.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire.rdma import CNP, frame_bytes

__all__ = ["CNP", "cnp_frame_bytes", "cnp_packets"]


def cnp_frame_bytes(ip_version: int = 4, vlan: bool = False) -> int:
    """Bytes of a CNP frame without FCS: 74 over IPv4, 94 over IPv6, 4 more with 802.1Q."""
    return int(frame_bytes(np.array([CNP], np.uint8), 0, ip_version=ip_version, vlan=vlan)[0])


def cnp_packets(time_ns: np.ndarray, nic: np.ndarray, peer_nic: np.ndarray,
                dest_qp: np.ndarray, src_qp: np.ndarray, msg: np.ndarray, udp_sport: int,
                frame_len: np.ndarray | int) -> np.ndarray:
    """``PACKET_DTYPE`` rows of CNPs (module docstring), in the order given.

    Args:
        time_ns: int64 ``(n,)``, first bit of each CNP leaving ``nic``.
        nic: int ``(n,)``, the notification point (the NIC that received the marked packet).
        peer_nic: int ``(n,)``, the reaction point (the NIC that sent it).
        dest_qp: ``(n,)`` the reaction point's QPN (BTH DestQP, 24 bits).
        src_qp: ``(n,)`` the notification point's QPN of the pair (not on the wire; keys the
            IPv6 flow label as for the pair's other frames).
        msg: int64 ``(n,)``, the message of the marked packet (``PACKET_DTYPE.msg``).
        udp_sport: UDP source port of every CNP (0..65535).
        frame_len: frame bytes without FCS (:func:`cnp_frame_bytes` of the context), one value
            or ``(n,)``.

    Returns:
        ``PACKET_DTYPE (n,)``: opcode 0x81, PSN 0, BECN 1, no payload, ``ce`` 0.

    Raises:
        EncodeError: a QPN over 24 bits or a UDP port outside 0..65535.
    """
    if not 0 <= int(udp_sport) <= 0xFFFF:
        raise EncodeError(f"udp_sport: got {udp_sport}, expected 0..65535")
    dq, sq = np.asarray(dest_qp, np.int64), np.asarray(src_qp, np.int64)
    for name, q in (("dest_qp", dq), ("src_qp", sq)):
        if q.size and (int(q.min()) < 0 or int(q.max()) >> 24):
            raise EncodeError(f"{name}: got {int(q.max()) if int(q.max()) >> 24 else int(q.min())}"
                              f", expected 0..{(1 << 24) - 1} (24-bit QPN)")
    out = np.zeros(dq.size, PACKET_DTYPE)
    out["time_ns"] = time_ns
    out["nic"] = nic
    out["peer_nic"] = peer_nic
    out["msg"] = msg
    out["opcode"] = CNP
    out["dest_qp"] = dq
    out["src_qp"] = sq
    out["udp_sport"] = int(udp_sport)
    out["becn"] = 1
    out["frame_bytes"] = frame_len
    return out
