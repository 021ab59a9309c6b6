"""Expected size of a capture of one iteration: packets, headers and pcap records (an estimate).

Computed from the plan alone (no schedule, no packets), so that ``plan`` states the size of a
capture of scenarios far too large to generate. Assumptions (what stages 4-6 do):

* every NIC hop of :mod:`tokenpcap.collectives.traffic` is split over ``collectives.channels`` (one QP each)
  in whole elements as :func:`tokenpcap.collectives.traffic.ring_chunk_bytes` does, each part into RDMA WRITE messages of at most ``collectives.slice_bytes``, each message
  into packets of at most the PMTU (IBTA Vol. 1, Sec. 9.7.6: FIRST/MIDDLE/LAST or ONLY);
* RoCEv2 per packet: Ethernet 14 (+ 802.1Q 4 with a VLAN), IPv4 20 or IPv6 40, UDP 8, BTH 12,
  ICRC 4 (IBTA Annex A17 RoCEv2); RETH 16 on the first packet of each message (IBTA 9.3.3.2);
  pad to a multiple of 4 on the last packet; native InfiniBand: LRH 8, BTH 12, ICRC 4, VCRC 2;
* ACKs: one coalesced ACK per message (``generation.ack_every_packets == 0``), else one per that
  many packets of a message; an ACK is BTH + AETH 4 (62 bytes RoCEv2/IPv4);
* classic pcap: 24-byte file header, 16-byte record header per packet; native InfiniBand adds a
  16-byte ERF header per record; frames are stored without FCS;
* NCCL-like clear-to-send (``generation.clear_to_send``, :mod:`tokenpcap.schedule.engine.nic`): each data message
  ends in WRITE with immediate (ImmDt 4 bytes on its last packet) and is preceded by one RDMA
  WRITE ONLY of ``CTS_BYTES`` (64) in the reverse direction, itself acknowledged by one ACK.

The lowering writes exactly these counts; ``tests/plan/test_plan.py`` compares them with the exact
per-message prediction of ``generate`` (:mod:`tokenpcap.generate.size`).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.profiles import Scenario

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


def pcap_estimate(hop_bytes: np.ndarray, hop_counts: np.ndarray, s: Scenario,
                  hop_elem_bytes: np.ndarray | None = None,
                  messages: tuple[tuple[int, int], ...] = ()) -> dict:
    """Estimate the capture of every packet all NICs send in one iteration (module docstring).

    Args:
        hop_bytes: int64 ``(k,)`` distinct sizes of NIC hops (point-to-point transfers between
            nodes) in one iteration.
        hop_counts: int64 ``(k,)`` how many hops of each size.
        s: the scenario (channels, slice size, PMTU, transport, IP version, VLAN, ACK policy).
        hop_elem_bytes: int64 ``(k,)`` element size of each hop (the channel split is in whole
            elements); default 1 byte.
        messages: ``((wire bytes, messages), ...)``: NIC messages already cut (the LL and
            LL128 calls, whose messages are one protocol step each,
            :func:`tokenpcap.collectives.transfers.protocol_slice_bytes`), counted as they are.

    Returns a dict of ints: ``messages`` (data messages), ``data_packets``, ``cts_packets``
    (clear-to-send writes, one per data message or 0), ``ack_packets`` (of data and CTS writes),
    ``payload_bytes`` (RDMA data payload: the NIC bytes of the plan), ``cts_payload_bytes``,
    ``header_bytes`` (all other frame bytes, including pad and ImmDt), ``record_bytes`` (pcap file
    and record headers), ``file_bytes``, plus ``estimate: True`` and ``format``.
    """
    from tokenpcap.records import CTS_BYTES

    c, g = s.cluster, s.generation
    ch, sl, pmtu = s.collectives.channels, s.collectives.slice_bytes, c.pmtu_bytes
    b = np.asarray(hop_bytes, dtype=np.int64)
    w = np.asarray(hop_counts, dtype=np.int64)
    e = np.ones_like(b) if hop_elem_bytes is None else np.asarray(hop_elem_bytes, np.int64)
    elems = b // e
    base, rem = elems // ch, elems % ch
    # channel parts (ring_chunk_bytes): rem of base+1 elements, ch-rem-1 of base, and the last
    # of base elements plus the bytes that fill no whole element
    parts = [((base + 1) * e, w * rem), (base * e, w * (ch - rem - 1)),
             (base * e + b - elems * e, w)]
    per = [(k, _per_part(size, sl, pmtu)) for size, k in parts]
    msgs, pkts, pad = (sum(int((k * x[i]).sum()) for k, x in per) for i in range(3))
    payload = int((w * b).sum())
    m_size = np.array([m for m, _ in messages], np.int64)
    m_count = np.array([k for _, k in messages], np.int64)
    m_pkts = np.maximum(1, -(-m_size // pmtu))         # a 0-byte message is one packet
    msgs += int(m_count.sum())
    pkts += int((m_count * m_pkts).sum())
    pad += int((m_count * ((-m_size) % 4)).sum())
    payload += int((m_count * m_size).sum())
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
        acks = sum(int((k * acks_of(size)).sum()) for size, k in parts)
        acks += int((m_count * -(-m_pkts // n)).sum())
    cts = msgs if g.clear_to_send else 0
    acks += cts                             # one CTS write is one packet: one ACK either way
    headers = (pkts * per_pkt + msgs * hb["reth"] + pad + acks * (per_pkt + hb["aeth"])
               + cts * (hb["immdt"] + per_pkt + hb["reth"] + (-CTS_BYTES) % 4))
    records = hb["pcap_file"] + (pkts + cts + acks) * per_record
    return {
        "estimate": True,
        "format": fmt,
        "messages": msgs,
        "data_packets": pkts,
        "cts_packets": cts,
        "ack_packets": acks,
        "payload_bytes": payload,
        "cts_payload_bytes": cts * CTS_BYTES,
        "header_bytes": headers,
        "record_bytes": records,
        "file_bytes": payload + cts * CTS_BYTES + headers + records,
    }
