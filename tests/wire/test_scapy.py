"""scapy (test-only oracle, GPL: never imported by tokenpcap) parses our RoCEv2 frames, its field
values equal ours, its BTH.compute_icrc equals our ICRC, and its checksum computations agree."""
from __future__ import annotations

import numpy as np
import pytest

from tokenpcap.wire import FrameBuilder, rdma
from tokenpcap.wire.decode import decode_frame

from .test_tshark import context, packets

scapy_l2 = pytest.importorskip("scapy.layers.l2")
from scapy.contrib.roce import BTH, CNPPadding  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "vlan"])
def test_scapy_agrees_with_every_frame(kind):
    rng = np.random.default_rng(100 + len(kind))
    ctx = context(kind, rng)
    p = packets(rng, 400)
    for r, frame in zip(p, FrameBuilder(ctx).frames(p)):
        pkt = Ether(frame)
        bth = pkt[BTH]
        # scapy's compute_icrc counts Ethernet padding (frames under 60 bytes) as payload: give it
        # the frame without the padding the NIC adds after the ICRC.
        ip_end = (18 if Dot1Q in pkt else 14) + (pkt[IP].len if IP in pkt else 40 + pkt[IPv6].plen)
        unpadded = Ether(frame[:ip_end])[BTH] if ip_end < len(frame) else bth
        assert unpadded.compute_icrc(None) == bth.icrc.to_bytes(4, "big")    # scapy's ICRC
        assert (bth.opcode, bth.psn, bth.dqpn, bth.padcount, bth.ackreq, bth.solicited, bth.pkey) == \
            (r["opcode"], r["psn"], r["dest_qp"], r["pad"], r["ack_req"], r["solicited"], 0xFFFF)
        if r["opcode"] == rdma.CNP:
            assert bth.becn == 1 and bth.migreq == 0 and CNPPadding in pkt
        udp = pkt[UDP]
        assert (udp.sport, udp.dport) == (r["udp_sport"], 4791)
        assert bytes(Ether(frame))[:len(frame)] == frame                      # re-serializes unchanged
        if kind == "ipv6":
            ip6 = pkt[IPv6]
            redo = pkt.copy()
            del redo[UDP].chksum
            assert Ether(bytes(redo))[UDP].chksum == udp.chksum != 0          # scapy's UDP checksum
            assert ip6.fl == int(rdma.rocev2_flow_label(r["src_qp"], r["dest_qp"]))
            assert ip6.plen == udp.len
        else:
            ip = pkt[IP]
            redo = ip.copy()
            del redo.chksum
            assert IP(bytes(redo)).chksum == ip.chksum                        # scapy's IP checksum
            assert ip.flags == "DF" and udp.chksum == 0 and ip.len == udp.len + 20
        if kind == "vlan":
            assert (pkt[Dot1Q].prio, pkt[Dot1Q].vlan) == (6 if r["opcode"] == rdma.CNP else 3, 42)
        payload_bytes = decode_frame(frame).payload_bytes
        assert payload_bytes == r["payload_bytes"]
