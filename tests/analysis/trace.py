"""A synthetic RoCEv2 trace for the analysis tests and benchmarks/inspect_read.py.

Built with the vectorized :class:`tokenpcap.wire.builder.FrameBuilder` (frames with correct ICRCs)
and written with the pcap writers: ``qps`` queue pairs interleaved packet by packet, each sending
RDMA WRITEs of ``packets_per_msg`` full 4096-byte packets (FIRST, MIDDLE..., LAST), PSNs starting
just below the 24-bit wrap (case C6), 84 ns apart (a 4170-byte frame at 400 Gb/s, case C12).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.pcap import Interface, PcapngWriter, PcapWriter
from tokenpcap.wire.builder import FrameBuilder
from tokenpcap.wire.context import WireContext

T0 = 1_700_000_000 * 10**9
N_NICS = 8


def context(ip_version: int = 4) -> WireContext:
    g = np.arange(N_NICS)
    mac = np.zeros((N_NICS, 6), np.uint8)
    mac[:, 0], mac[:, 5] = 2, g
    ipv4 = np.stack([np.full(N_NICS, 198), np.full(N_NICS, 18), np.zeros(N_NICS), g + 1],
                    axis=1).astype(np.uint8)
    ipv6 = np.zeros((N_NICS, 16), np.uint8)
    ipv6[:, 0], ipv6[:, 1], ipv6[:, 3], ipv6[:, 15] = 0x20, 0x01, 0x02, g + 1
    return WireContext(ip_version=ip_version, mac=mac, ipv4=ipv4, ipv6=ipv6)


def packets(n: int, qps: int = 8, packets_per_msg: int = 128, step_ns: int = 84,
            start: int = 0) -> np.ndarray:
    """``PACKET_DTYPE`` (n,): the packet table of the trace (module docstring), from its packet
    ``start`` on (the rows of a longer trace)."""
    i = np.arange(start, start + n, dtype=np.int64)
    q, j = i % qps, i // qps
    k = j % packets_per_msg
    p = np.zeros(n, PACKET_DTYPE)
    p["time_ns"] = T0 + i * step_ns
    p["nic"], p["peer_nic"] = q % 4, q % 4 + 4
    p["opcode"] = np.where(k == 0, 6, np.where(k == packets_per_msg - 1, 8, 7))
    p["psn"] = (0xFFFF00 + 7 * q + j) & 0xFFFFFF
    p["dest_qp"], p["src_qp"] = 0x100 + q, 0x200 + q
    p["udp_sport"] = 0xC000 + q
    p["payload_bytes"] = 4096
    p["ack_req"] = k == packets_per_msg - 1
    p["reth_len"] = 4096 * packets_per_msg
    p["reth_va"] = 0x10000000 * (q + 1)
    p["reth_rkey"] = 0x1234
    p["payload_offset"] = k * 4096
    p["ip_id"] = j & 0xFFFF
    return p


def write_trace(path, n: int, *, snaplen: int = 262144, fmt: str = "pcap", qps: int = 8,
                comments=None, batch: int = 50_000, ip_version: int = 4, pkts=None) -> np.ndarray:
    """Write the trace (or ``pkts``) to ``path``; returns the packet table."""
    b = FrameBuilder(context(ip_version))
    p = packets(n, qps) if pkts is None else pkts
    if fmt == "pcap":
        w = PcapWriter(path, snaplen=snaplen)
    else:
        w = PcapngWriter(path, [Interface(name=f"node0/nic{g}", speed_bps=400 * 10**9)
                                for g in range(N_NICS)], snaplen=snaplen)
    with w:
        for a in range(0, len(p), batch):
            c = p[a:a + batch]
            kw = {"interface": c["nic"]} if fmt == "pcapng" else {}
            if comments is not None:
                kw["comments"] = comments[a:a + batch]
            w.write_batch(c["time_ns"], b.frame_bytes(c),
                          lambda out, off, cap, c=c: b.fill(c, out, off, cap), **kw)
    return p


def write_long_trace(path, n: int, *, snaplen: int = 262144, chunk: int = 1 << 20) -> None:
    """The pcap of :func:`write_trace` for n packets, built ``chunk`` packets at a time so that
    memory stays flat whatever n (benchmarks' multi-GB headers-only captures)."""
    b = FrameBuilder(context())
    with PcapWriter(path, snaplen=snaplen) as w:
        for a in range(0, n, chunk):
            p = packets(min(chunk, n - a), start=a)
            for c in (p[k:k + 50_000] for k in range(0, p.size, 50_000)):
                w.write_batch(c["time_ns"], b.frame_bytes(c),
                              lambda out, off, cap, c=c: b.fill(c, out, off, cap))


def write_phase_trace(directory, n: int = 4000):
    """A pcapng of ``n`` packets of the trace whose first half is commented as
    ``dp/backward/AllReduce`` and second half as ``tp/forward/AllReduce`` (the phase labels the
    pictures stack by). Returns ``(path, packet table)``."""
    labels = ["dp/backward/AllReduce step 0" if i < n // 2 else "tp/forward/AllReduce mb 1"
              for i in range(n)]
    path = directory / "t.pcapng"
    write_trace(path, n, fmt="pcapng", comments=labels)
    return path, packets(n)
