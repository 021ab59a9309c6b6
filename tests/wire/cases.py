"""The case frames of tests/cases as (PACKET_DTYPE row, WireContext) pairs, from their params.

scapy-roce-vectors.json ``params``: QPN A 0x000c11, QPN B 0x000d2a, UDP source port 0xd7f8, TOS 0x6a
for data (DSCP 26, ECT(0)) and 0xc2 for the CNP (DSCP 48), TTL 64, DF, UDP checksum 0 over IPv4,
P_Key 0xffff, MigReq 1, a 520-byte RDMA WRITE at PMTU 256, payload byte i = (i*7+3) & 0xff. The
addresses (02:00:00:00:00:0a/10.0.0.1 = A, 02:00:00:00:00:0b/10.0.0.2 = B, fd00::1/fd00::2), PSNs,
IP IDs, RETH/AETH/ImmDt values and the payloads of the other vectors are the opaque data the frames
carry; every other byte (lengths, checksums, flags, pad, ICRC) is ours to get right.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import WireContext

QPN_A, QPN_B = 0x000C11, 0x000D2A
SPORT = 0xD7F8
PARAMS_PATTERN = ((np.arange(4096) * 7 + 3) & 0xFF).astype(np.uint8)
MACS = np.array([[2, 0, 0, 0, 0, 0x0A], [2, 0, 0, 0, 0, 0x0B]], np.uint8)
IPV4S = np.array([[10, 0, 0, 1], [10, 0, 0, 2]], np.uint8)
IPV6S = np.array([list(ipaddress.IPv6Address(a).packed) for a in ("fd00::1", "fd00::2")], np.uint8)


def row(**kw) -> np.void:
    r = np.zeros(1, PACKET_DTYPE)[0]
    kw.setdefault("udp_sport", SPORT)
    kw.setdefault("pad", (-kw.get("payload_bytes", 0)) & 3)
    for k, v in kw.items():
        r[k] = v
    return r


def pattern(payload: bytes) -> np.ndarray:
    """A payload pattern whose prefix is ``payload`` (payload bytes depend only on position)."""
    pat = np.zeros(4096, np.uint8)
    pat[:len(payload)] = np.frombuffer(payload, np.uint8)
    return pat


A_TO_B = dict(nic=0, peer_nic=1, src_qp=QPN_A, dest_qp=QPN_B)
B_TO_A = dict(nic=1, peer_nic=0, src_qp=QPN_B, dest_qp=QPN_A)
RETH = dict(reth_rkey=0xABCDEF)


def ctx4(pat: np.ndarray = PARAMS_PATTERN, **kw) -> WireContext:
    return WireContext(mac=MACS, ipv4=IPV4S, payload_pattern=pat, **kw)


def ctx6(pat: np.ndarray, **kw) -> WireContext:
    return WireContext(ip_version=6, mac=MACS, ipv6=IPV6S, payload_pattern=pat, flow_label=0, **kw)


#: vector name -> (row, context)
SCAPY_VECTORS = {
    "rc_write_first_psn_fffffe": (row(opcode=0x06, psn=0xFFFFFE, ip_id=1, payload_bytes=256,
                                      reth_va=0x7F1234560000, reth_len=520, **RETH, **A_TO_B), ctx4()),
    "rc_write_middle_psn_ffffff": (row(opcode=0x07, psn=0xFFFFFF, ip_id=2, payload_bytes=256, **A_TO_B), ctx4()),
    "rc_write_last_psn_000000_ackreq": (row(opcode=0x08, psn=0, ip_id=3, payload_bytes=8, ack_req=1,
                                            **A_TO_B), ctx4()),
    "rc_ack_psn_000000": (row(opcode=0x11, psn=0, ip_id=0x101, aeth=0x1F000001, **B_TO_A), ctx4()),
    "cnp_b_to_a": (row(opcode=0x81, psn=0, ip_id=0x102, becn=1, **B_TO_A), ctx4()),
    "rc_write_only_imm_pad3_se": (row(opcode=0x0B, psn=1, ip_id=4, payload_bytes=13, ack_req=1, solicited=1,
                                      reth_va=0x7F1234570000, reth_len=13, imm=0xDEADBEEF, **RETH, **A_TO_B),
                                  ctx4(pattern(b"hello, rdma!!"))),
    "rc_write_last_imm": (row(opcode=0x09, psn=2, ip_id=5, payload_bytes=64, ack_req=1, imm=0x208, **A_TO_B),
                          ctx4(pattern(b""))),
    "rc_send_only_pad2": (row(opcode=0x04, psn=3, ip_id=6, payload_bytes=18, ack_req=1, **A_TO_B),
                          ctx4(pattern(bytes(range(18))))),
    "rc_read_request": (row(opcode=0x0C, psn=4, ip_id=7, ack_req=1, reth_va=0x7F1234580000, reth_len=16,
                            **RETH, **A_TO_B), ctx4()),
    "rc_read_response_only": (row(opcode=0x10, psn=4, ip_id=0x103, payload_bytes=16, aeth=0x1F000004,
                                  **B_TO_A), ctx4(pattern(bytes(range(16))))),
    "ipv6_rc_write_only_udpcsum": (row(opcode=0x0A, psn=0x10, payload_bytes=32, ack_req=1, reth_va=0x1000,
                                       reth_rkey=0x42, reth_len=32, **A_TO_B), ctx6(pattern(bytes(range(32))))),
    "ipv6_rc_write_only_udpcsum0": (row(opcode=0x0A, psn=0x10, payload_bytes=32, ack_req=1, reth_va=0x1000,
                                        reth_rkey=0x42, reth_len=32, **A_TO_B),
                                    ctx6(pattern(bytes(range(32))), ipv6_udp_checksum=False)),
    "vlan100_pcp3_rc_write_only": (row(opcode=0x0A, psn=0x20, ip_id=8, payload_bytes=8, ack_req=1,
                                       reth_va=0x2000, reth_rkey=0x42, reth_len=8, **A_TO_B),
                                   ctx4(pattern(b"\x11" * 8), vlan_id=100, pcp=3)),
}


def ib_cases(hw_frames: dict, scapy_vectors: dict) -> dict[str, tuple[np.void, WireContext, str]]:
    """Native IB frames (captured, and the generated one) as (row, context, expected hex)."""
    frames = {f["frame"]: f["hex"] for f in hw_frames["native_ib"]}
    lids = np.array([1, 4], np.uint16)
    ib = dict(transport="infiniband", lid=lids)
    f6 = bytes.fromhex(frames[6])
    f5 = bytes.fromhex(frames[5])
    gids = np.array([list(f5[16:32]), list(f5[32:48])], np.uint8)
    return {
        # LRH(VL0,SL0,LNH=2,DLID=4,SLID=1) + BTH(SEND ONLY, M=1, A=1, DestQP 0x870408, PSN 0x123) + 32 B
        "ib_local_rc_send_only_32B": (
            row(opcode=0x04, payload_bytes=32, ack_req=1, dest_qp=0x870408, psn=0x123, nic=0, peer_nic=1),
            WireContext(payload_pattern=pattern(bytes(range(32))), **ib),
            scapy_vectors["native_ib_generated"]["hex"]),
        # captured frame 11: RC ACK, DestQP 0x870408, PSN 0xd40a55, AETH 0x1f000001
        "hw_frame_11_ack": (
            row(opcode=0x11, dest_qp=0x870408, psn=0xD40A55, aeth=0x1F000001, nic=0, peer_nic=1),
            WireContext(**ib), frames[11]),
        # captured frame 6: UD SEND ONLY, DETH Q_Key 0xb1b SrcQP 0x404, 60 bytes of payload
        "hw_frame_6_ud_send": (
            row(opcode=0x64, dest_qp=0x405, psn=0x0D43BC, src_qp=0x404, payload_bytes=60, nic=0, peer_nic=1),
            WireContext(q_key=0xB1B, payload_pattern=pattern(f6[28:88]), **ib), frames[6]),
        # captured frame 5: with GRH (LNH=3) to a multicast DLID 0xc000 / GID, HopLmt 0, TClass 0
        "hw_frame_5_ud_send_grh": (
            row(opcode=0x64, dest_qp=0xFFFFFF, psn=0x0020AF, src_qp=0x405, payload_bytes=60, nic=0, peer_nic=1),
            WireContext(transport="infiniband", lid=np.array([4, 0xC000], np.uint16), ipv6=gids, ib_grh=True,
                        ttl=0, dscp=0, ecn=0, flow_label=0, q_key=0xB1B, payload_pattern=pattern(f5[68:128])),
            frames[5]),
    }
