"""Expected size of a capture of one iteration: packets, headers and pcap records (an estimate).

Until the lowering (stage 6) exists this estimate stands in for it; the lowering reproduces the
payload bytes exactly, the packet count depends on how stage 4 cuts transfers. Assumptions:

* every NIC hop of :mod:`tokenpcap.traffic` is split evenly over ``collectives.channels`` (one QP
  each), each part into RDMA WRITE messages of at most ``collectives.slice_bytes``, each message
  into packets of at most the PMTU (IBTA Vol. 1, Sec. 9.7.6: FIRST/MIDDLE/LAST or ONLY);
* RoCEv2 per packet: Ethernet 14 (+ 802.1Q 4 with a VLAN), IPv4 20 or IPv6 40, UDP 8, BTH 12,
  ICRC 4 (IBTA Annex A17 RoCEv2); RETH 16 on the first packet of each message (IBTA 9.3.3.2);
  pad to a multiple of 4 on the last packet; native InfiniBand: LRH 8, BTH 12, ICRC 4, VCRC 2;
* ACKs: one coalesced ACK per message (``generation.ack_every_packets == 0``), else one per that
  many packets of a message; an ACK is BTH + AETH 4 (62 bytes RoCEv2/IPv4);
* classic pcap: 24-byte file header, 16-byte record header per packet; native InfiniBand adds a
  16-byte ERF header per record; frames are stored without FCS;
* NCCL-like clear-to-send control writes (``generation.clear_to_send``) are not counted.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.profiles import Scenario

__all__ = ["pcap_estimate", "HEADER_BYTES"]

#: Header sizes in bytes (IBTA Vol. 1 and Annex A17; IEEE 802.3 / 802.1Q; RFC 791, 8200, 768).
HEADER_BYTES = {"eth": 14, "vlan": 4, "ipv4": 20, "ipv6": 40, "udp": 8, "bth": 12, "reth": 16,
                "aeth": 4, "immdt": 4, "icrc": 4, "lrh": 8, "grh": 40, "vcrc": 2,
                "pcap_file": 24, "pcap_record": 16, "erf": 16}


def _per_part(p: np.ndarray, slice_bytes: int, pmtu: int) -> tuple[np.ndarray, ...]:
    """Messages, packets and pad bytes of parts of ``p`` bytes (int64 arrays)."""
    full, rest = p // slice_bytes, p % slice_bytes
    per_full = -(-slice_bytes // pmtu)
    msgs = full + (rest > 0)
    pkts = full * per_full + (-(-rest // pmtu))
    pad = full * ((-slice_bytes) % 4) + ((-rest) % 4)
    return msgs, pkts, pad


def pcap_estimate(hop_bytes: np.ndarray, hop_counts: np.ndarray, s: Scenario) -> dict:
    """Estimate the capture of every packet all NICs send in one iteration (module docstring).

    Args:
        hop_bytes: int64 ``(k,)`` distinct sizes of NIC hops (point-to-point transfers between
            nodes) in one iteration.
        hop_counts: int64 ``(k,)`` how many hops of each size.
        s: the scenario (channels, slice size, PMTU, transport, IP version, VLAN, ACK policy).

    Returns a dict of ints: ``messages``, ``data_packets``, ``ack_packets``, ``payload_bytes``,
    ``header_bytes`` (all frame bytes that are not payload, including pad), ``record_bytes`` (pcap
    file and record headers), ``file_bytes``, plus ``estimate: True`` and ``format``.
    """
    c, g = s.cluster, s.generation
    ch, sl, pmtu = s.collectives.channels, s.collectives.slice_bytes, c.pmtu_bytes
    b = np.asarray(hop_bytes, dtype=np.int64)
    w = np.asarray(hop_counts, dtype=np.int64)
    base, rem = b // ch, b % ch
    m1, k1, p1 = _per_part(base + 1, sl, pmtu)
    m0, k0, p0 = _per_part(base, sl, pmtu)
    msgs = int((w * (rem * m1 + (ch - rem) * m0)).sum())
    pkts = int((w * (rem * k1 + (ch - rem) * k0)).sum())
    pad = int((w * (rem * p1 + (ch - rem) * p0)).sum())
    payload = int((w * b).sum())
    hb = HEADER_BYTES
    if c.transport == "infiniband":
        per_pkt = hb["lrh"] + hb["bth"] + hb["icrc"] + hb["vcrc"]
        per_record = hb["pcap_record"] + hb["erf"]
        fmt = "pcap (ERF records, linktype 197)"
    else:
        per_pkt = (hb["eth"] + (hb["vlan"] if c.network.vlan_id is not None else 0)
                   + (hb["ipv4"] if c.network.ip_version == 4 else hb["ipv6"])
                   + hb["udp"] + hb["bth"] + hb["icrc"])
        per_record = hb["pcap_record"]
        fmt = "pcap (Ethernet)"
    if g.ack_every_packets == 0:
        acks = msgs
    else:
        n = g.ack_every_packets
        # per message ceil(packets / n): parts of equal size share their count
        def acks_of(p: np.ndarray) -> np.ndarray:
            full, rest = p // sl, p % sl
            return full * (-(-(-(-sl // pmtu)) // n)) + (-(-(-(-rest // pmtu)) // n))
        acks = int((w * (rem * acks_of(base + 1) + (ch - rem) * acks_of(base))).sum())
    headers = pkts * per_pkt + msgs * hb["reth"] + pad + acks * (per_pkt + hb["aeth"])
    records = hb["pcap_file"] + (pkts + acks) * per_record
    return {
        "estimate": True,
        "format": fmt,
        "messages": msgs,
        "data_packets": pkts,
        "ack_packets": acks,
        "payload_bytes": payload,
        "header_bytes": headers,
        "record_bytes": records,
        "file_bytes": payload + headers + records,
    }
