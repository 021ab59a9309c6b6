"""Every header tokenpcap writes or reads, declared once in wire order.

Sources of the layouts:

* Ethernet II and 802.1Q: IEEE 802.3 clause 3, IEEE 802.1Q-2018 9.6 (TCI = PCP, DEI, VID).
* IPv4: RFC 791 3.1 with RFC 2474/3168 (DSCP/ECN in the former TOS byte), RFC 6864 (ID).
* IPv6: RFC 8200 3 (traffic class, 20-bit flow label).
* UDP: RFC 768; RoCEv2 destination port 4791 (IBTA vol.1 Annex A17.2).
* InfiniBand LRH 7.7, GRH 8.3, BTH 9.2, RETH 9.3.3, AETH 9.3.5, ImmDt 9.3.4, DETH 9.3.2,
  IETH 9.3.6, AtomicETH 9.3.7, AtomicAckETH 9.3.8, ICRC 7.8.1, VCRC 7.8.2 (IBTA vol.1 rel.1.4).
* CNP: IBTA Annex A17.9.3 (BTH opcode 0x81, BECN set, 16 reserved bytes, ICRC).
* PFC: IEEE 802.1Qbb-2011 36.1.3 / IEEE 802.3 Annex 31D (MAC control 0x8808, opcode 0x0101,
  priority-enable vector, eight pause times in quanta of 512 bit times).

The TShark names are those of Wireshark 4.0 (``tshark -G fields``).
"""
from __future__ import annotations

from tokenpcap.wire.fields import Field as F
from tokenpcap.wire.fields import Header

__all__ = [
    "ETHERNET", "DOT1Q", "IPV4", "IPV6", "UDP", "LRH", "GRH", "BTH", "RETH", "AETH", "IMMDT",
    "DETH", "IETH", "ATOMIC_ETH", "ATOMIC_ACK_ETH", "CNP_PAD", "ICRC", "VCRC", "PFC", "HEADERS",
    "ETHERTYPE_IPV4", "ETHERTYPE_IPV6", "ETHERTYPE_VLAN", "ETHERTYPE_ROCEV1", "ETHERTYPE_MAC_CONTROL",
    "ROCEV2_UDP_PORT", "IP_PROTO_UDP", "GRH_NXTHDR_IBA", "PFC_DST_MAC",
]

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_IPV6 = 0x86DD
ETHERTYPE_VLAN = 0x8100
ETHERTYPE_ROCEV1 = 0x8915
ETHERTYPE_MAC_CONTROL = 0x8808
ROCEV2_UDP_PORT = 4791
IP_PROTO_UDP = 17
GRH_NXTHDR_IBA = 0x1B
PFC_DST_MAC = 0x0180C2000001

ETHERNET = Header("Ethernet", (
    F("Destination", 48, fmt="mac", tshark="eth.dst"),
    F("Source", 48, fmt="mac", tshark="eth.src"),
    F("EtherType", 16, ETHERTYPE_IPV4, fmt="hex", tshark="eth.type"),
), spec="IEEE 802.3 3.1.1", tshark="eth")

#: The 802.1Q tag that follows an Ethernet header whose EtherType is 0x8100 (TCI, then the
#: EtherType of what the tag carries), as Wireshark and scapy layer it.
DOT1Q = Header("802.1Q", (
    F("PCP", 3, tshark="vlan.priority"),
    F("DEI", 1, fmt="bool", tshark="vlan.dei"),
    F("VID", 12, tshark="vlan.id"),
    F("EtherType", 16, ETHERTYPE_IPV4, fmt="hex", tshark="vlan.etype"),
), spec="IEEE 802.1Q-2018 9.6", tshark="vlan")

IPV4 = Header("IPv4", (
    F("Version", 4, 4, tshark="ip.version"),
    F("IHL", 4, 5),                       # TShark's ip.hdr_len shows bytes (IHL*4)
    F("DSCP", 6, 26, tshark="ip.dsfield.dscp", icrc_masked=True),
    F("ECN", 2, 2, tshark="ip.dsfield.ecn", icrc_masked=True),
    F("TotalLength", 16, tshark="ip.len"),
    F("Identification", 16, fmt="hex", tshark="ip.id"),
    F("Reserved", 1, fmt="bool", tshark="ip.flags.rb"),
    F("DF", 1, 1, fmt="bool", tshark="ip.flags.df"),
    F("MF", 1, fmt="bool", tshark="ip.flags.mf"),
    F("FragmentOffset", 13, tshark="ip.frag_offset"),
    F("TTL", 8, 64, tshark="ip.ttl", icrc_masked=True),
    F("Protocol", 8, IP_PROTO_UDP, tshark="ip.proto"),
    F("HeaderChecksum", 16, fmt="hex", tshark="ip.checksum", icrc_masked=True),
    F("SourceAddress", 32, fmt="ipv4", tshark="ip.src"),
    F("DestinationAddress", 32, fmt="ipv4", tshark="ip.dst"),
), spec="RFC 791 3.1, RFC 2474, RFC 3168", tshark="ip")

IPV6 = Header("IPv6", (
    F("Version", 4, 6, tshark="ipv6.version"),
    F("TrafficClass", 8, 0x6A, fmt="hex", tshark="ipv6.tclass", icrc_masked=True),
    F("FlowLabel", 20, fmt="hex", tshark="ipv6.flow", icrc_masked=True),
    F("PayloadLength", 16, tshark="ipv6.plen"),
    F("NextHeader", 8, IP_PROTO_UDP, tshark="ipv6.nxt"),
    F("HopLimit", 8, 64, tshark="ipv6.hlim", icrc_masked=True),
    F("SourceAddress", 128, fmt="ipv6", tshark="ipv6.src"),
    F("DestinationAddress", 128, fmt="ipv6", tshark="ipv6.dst"),
), spec="RFC 8200 3", tshark="ipv6")

UDP = Header("UDP", (
    F("SourcePort", 16, 0xC000, fmt="hex", tshark="udp.srcport"),
    F("DestinationPort", 16, ROCEV2_UDP_PORT, tshark="udp.dstport"),
    F("Length", 16, tshark="udp.length"),
    F("Checksum", 16, fmt="hex", tshark="udp.checksum", icrc_masked=True),
), spec="RFC 768; IBTA Annex A17.2", tshark="udp")

LRH = Header("LRH", (
    F("VL", 4, tshark="infiniband.lrh.vl", icrc_masked=True),
    F("LVer", 4, tshark="infiniband.lrh.lver"),
    F("SL", 4, tshark="infiniband.lrh.sl"),
    F("Reserved2", 2, tshark="infiniband.lrh.reserved2"),
    F("LNH", 2, 2, tshark="infiniband.lrh.lnh"),
    F("DLID", 16, fmt="hex", tshark="infiniband.lrh.dlid"),
    F("Reserved5", 5, tshark="infiniband.lrh.reserved5"),
    F("PktLen", 11, tshark="infiniband.lrh.pktlen"),
    F("SLID", 16, fmt="hex", tshark="infiniband.lrh.slid"),
), spec="IBTA vol.1 7.7", tshark="infiniband.lrh")

GRH = Header("GRH", (
    F("IPVer", 4, 6, tshark="infiniband.grh.ipver"),
    F("TClass", 8, fmt="hex", tshark="infiniband.grh.tclass", icrc_masked=True),
    F("FlowLabel", 20, fmt="hex", tshark="infiniband.grh.flowlabel", icrc_masked=True),
    F("PayLen", 16, tshark="infiniband.grh.paylen"),
    F("NxtHdr", 8, GRH_NXTHDR_IBA, fmt="hex", tshark="infiniband.grh.nxthdr"),
    F("HopLmt", 8, 64, tshark="infiniband.grh.hoplmt", icrc_masked=True),
    F("SGID", 128, fmt="ipv6", tshark="infiniband.grh.sgid"),
    F("DGID", 128, fmt="ipv6", tshark="infiniband.grh.dgid"),
), spec="IBTA vol.1 8.3", tshark="infiniband.grh")

BTH = Header("BTH", (
    F("OpCode", 8, fmt="hex", tshark="infiniband.bth.opcode"),
    F("SE", 1, fmt="bool", tshark="infiniband.bth.se"),
    F("MigReq", 1, 1, fmt="bool", tshark="infiniband.bth.m"),
    F("PadCnt", 2, tshark="infiniband.bth.padcnt"),
    F("TVer", 4, tshark="infiniband.bth.tver"),
    F("P_Key", 16, 0xFFFF, fmt="hex", tshark="infiniband.bth.p_key"),
    F("FECN", 1, fmt="bool", icrc_masked=True),
    F("BECN", 1, fmt="bool", icrc_masked=True),
    F("Resv6a", 6, icrc_masked=True),
    F("DestQP", 24, fmt="hex", tshark="infiniband.bth.destqp"),
    F("AckReq", 1, fmt="bool", tshark="infiniband.bth.a"),
    F("Resv7", 7, tshark="infiniband.bth.reserved7"),
    F("PSN", 24, fmt="hex", tshark="infiniband.bth.psn"),
), spec="IBTA vol.1 9.2", tshark="infiniband.bth")

RETH = Header("RETH", (
    F("VA", 64, fmt="hex", tshark="infiniband.reth.va"),
    F("R_Key", 32, fmt="hex", tshark="infiniband.reth.r_key"),
    F("DMALen", 32, tshark="infiniband.reth.dmalen"),
), spec="IBTA vol.1 9.3.3", tshark="infiniband.reth")

AETH = Header("AETH", (
    F("Syndrome", 8, fmt="hex", tshark="infiniband.aeth.syndrome"),
    F("MSN", 24, tshark="infiniband.aeth.msn"),
), spec="IBTA vol.1 9.3.5", tshark="infiniband.aeth")

IMMDT = Header("ImmDt", (
    F("ImmDt", 32, fmt="hex", tshark="infiniband.immdt"),   # TShark shows it as bytes
), spec="IBTA vol.1 9.3.4", tshark="infiniband.immdt")

DETH = Header("DETH", (
    F("Q_Key", 32, fmt="hex", tshark="infiniband.deth.q_key"),
    F("Reserved", 8),
    F("SrcQP", 24, fmt="hex", tshark="infiniband.deth.srcqp"),
), spec="IBTA vol.1 9.3.2", tshark="infiniband.deth")

IETH = Header("IETH", (
    F("R_Key", 32, fmt="hex"),
), spec="IBTA vol.1 9.3.6", tshark="infiniband.ieth")

ATOMIC_ETH = Header("AtomicETH", (
    F("VA", 64, fmt="hex"),
    F("R_Key", 32, fmt="hex"),
    F("SwapDt", 64, fmt="hex", tshark="infiniband.atomiceth.swapdt"),
    F("CmpDt", 64, fmt="hex", tshark="infiniband.atomiceth.cmpdt"),
), spec="IBTA vol.1 9.3.7", tshark="infiniband.atomiceth")

ATOMIC_ACK_ETH = Header("AtomicAckETH", (
    F("OrigRemDt", 64, fmt="hex", tshark="infiniband.atomicacketh.origremdt"),
), spec="IBTA vol.1 9.3.8", tshark="infiniband.atomicacketh")

CNP_PAD = Header("CNP", (
    F("Reserved", 128, fmt="hex"),
), spec="IBTA vol.1 Annex A17.9.3")

#: Invariant CRC: CRC-32 (zlib) of the masked packet, written least-significant byte first.
ICRC = Header("ICRC", (
    F("ICRC", 32, fmt="hex", tshark="infiniband.invariant.crc", little_endian=True),
), spec="IBTA vol.1 7.8.1", tshark="infiniband.invariant.crc")

#: Variant CRC (native InfiniBand only): CRC-16 over LRH..ICRC, least-significant byte first.
VCRC = Header("VCRC", (
    F("VCRC", 16, fmt="hex", tshark="infiniband.variant.crc", little_endian=True),
), spec="IBTA vol.1 7.8.2", tshark="infiniband.variant.crc")

#: Priority-based flow control frame body (after an Ethernet header to 01:80:c2:00:00:01 with
#: EtherType 0x8808); the frame is then zero-padded to the 60-byte minimum.
PFC = Header("PFC", (
    F("Opcode", 16, 0x0101, fmt="hex", tshark="macc.opcode"),
    F("ClassEnableVector", 16, fmt="hex", tshark="macc.cbfc.enbv"),
    *(F(f"Time{k}", 16, tshark=f"macc.cbfc.pause_time.c{k}") for k in range(8)),
), spec="IEEE 802.1Qbb-2011 36.1.3; IEEE 802.3 Annex 31D", tshark="macc")

#: Every declared header by its spec name.
HEADERS: dict[str, Header] = {h.name: h for h in (
    ETHERNET, DOT1Q, IPV4, IPV6, UDP, LRH, GRH, BTH, RETH, AETH, IMMDT, DETH, IETH, ATOMIC_ETH,
    ATOMIC_ACK_ETH, CNP_PAD, ICRC, VCRC, PFC)}
