"""The write_frames.py workload and the writers it compares: tokenpcap (writer, generate path),
a struct+zlib loop, dpkt and scapy. Each writer writes the same frames to one classic pcap file
(see write_frames.py for what each variant is and how it is timed). Benchmarks only.
"""
from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tokenpcap.generate.output import Dispatcher, FileSpec, WriterConfig  # noqa: E402
from tokenpcap.lower import wire_context  # noqa: E402
from tokenpcap.records import PACKET_DTYPE  # noqa: E402
from tokenpcap.pcap import PcapWriter  # noqa: E402
from tokenpcap.config.profiles import load_cluster  # noqa: E402
from tokenpcap.wire import FrameBuilder, rdma  # noqa: E402
from tokenpcap.wire.gather import BatchFill  # noqa: E402

__all__ = ["CLUSTER", "EPOCH_NS", "MESSAGE_BYTES", "PMTU", "N_QPS", "PKTS_PER_MSG", "FRAME_GAP_NS",
           "MAX_FRAME_BYTES", "setup", "make_packets", "py_rows", "run_tokenpcap", "run_generate_path",
           "run_struct_zlib", "run_dpkt", "run_scapy"]

CLUSTER = ROOT / "profiles" / "clusters" / "h100-rocev2-400g.yaml"
EPOCH_NS = 1_704_067_200 * 1_000_000_000        # 2024-01-01T00:00:00Z, as tokenpcap generate
MESSAGE_BYTES = 1 << 20
PMTU = 4096
N_QPS = 8
PKTS_PER_MSG = MESSAGE_BYTES // PMTU             # 256: FIRST, 254 MIDDLE, LAST
FRAME_GAP_NS = 84                                # layer-1 time of a 4170-byte frame at 400 Gb/s
PEERS = (8, 16, 24)                              # NIC 0's rail peers on nodes 1..3
MAX_FRAME_BYTES = 4170


def setup():
    """(cluster profile, WireContext, FrameBuilder) of the bundled 400G RoCEv2 cluster."""
    cluster = load_cluster(CLUSTER)
    ctx = wire_context(cluster, payload_seed=0)
    return cluster, ctx, FrameBuilder(ctx)


def make_packets(builder: FrameBuilder, start: int, count: int) -> np.ndarray:
    """PACKET_DTYPE rows of frames ``start .. start+count-1`` (module docstring), so a long
    stream can be made batch by batch with flat memory."""
    i = np.arange(start, start + count, dtype=np.int64)
    qp = i % N_QPS
    k = i // N_QPS                                   # packet number on its QP
    j = k % PKTS_PER_MSG                             # packet number in its message
    msg = k // PKTS_PER_MSG
    p = np.zeros(count, PACKET_DTYPE)
    p["time_ns"] = EPOCH_NS + i * FRAME_GAP_NS
    p["nic"] = 0
    p["peer_nic"] = np.asarray(PEERS)[qp % len(PEERS)]
    p["msg"] = msg * N_QPS + qp
    p["opcode"] = np.where(j == 0, rdma.WRITE_FIRST, np.where(j == PKTS_PER_MSG - 1, rdma.WRITE_LAST,
                                                               rdma.WRITE_MIDDLE))
    p["psn"] = (0x12345 * (qp + 1) + k) & 0xFFFFFF
    p["dest_qp"] = 0x400 + 2 * qp
    p["src_qp"] = 0x401 + 2 * qp
    p["udp_sport"] = rdma.rocev2_udp_sport(p["src_qp"], p["dest_qp"])
    p["payload_bytes"] = PMTU
    p["ack_req"] = j == PKTS_PER_MSG - 1
    p["reth_va"] = 0x7F00_0000_0000 + (msg * N_QPS + qp) * MESSAGE_BYTES
    p["reth_rkey"] = 0x1000 + qp
    p["reth_len"] = MESSAGE_BYTES
    p["payload_offset"] = j * PMTU
    p["ip_id"] = i & 0xFFFF
    p["frame_bytes"] = builder.frame_bytes(p)
    return p


def py_rows(p: np.ndarray) -> list[tuple]:
    """The fields the Python loops need, as Python ints (made before the clock starts)."""
    names = ("time_ns", "opcode", "psn", "dest_qp", "ack_req", "udp_sport", "ip_id", "reth_va",
             "reth_rkey", "reth_len", "nic", "peer_nic")
    return list(zip(*(p[n].tolist() for n in names)))


def _addresses(ctx):
    return ([m.tobytes() for m in ctx.mac], [a.tobytes() for a in ctx.ipv4])


# ---------------------------------------------------------------------------- the writers
def run_tokenpcap(path: Path, packets: np.ndarray, builder: FrameBuilder, snaplen: int,
                  batch: int) -> None:
    """The production building block: the batch's ``BatchFill`` (``FrameBuilder.fill`` into
    PcapWriter's batch buffer, full payloads gathered from the pattern by ``writev``), as the
    generate path uses it."""
    with PcapWriter(path, snaplen=snaplen) as w:
        for a in range(0, len(packets), batch):
            pk = packets[a:a + batch]
            w.write_batch(pk["time_ns"], pk["frame_bytes"].astype(np.int64), BatchFill(builder, pk))


def run_generate_path(path: Path, packets: np.ndarray, cluster, snaplen: int, chunk_rows: int) -> None:
    """What ``tokenpcap generate --format pcap --split none`` does after lowering: one
    Dispatcher (in-process), rows sent chunk by chunk; its Sink builds and writes batches."""
    cfg = WriterConfig(cluster=cluster, fmt="pcap", snaplen=snaplen, payload_seed=0)
    disp = Dispatcher([FileSpec(path, (0,))], cfg, jobs=1)
    try:
        for a in range(0, len(packets), chunk_rows):
            disp.send(0, packets[a:a + chunk_rows], None, None)
        disp.close()
    except BaseException:
        disp.abort()
        raise


_FF8 = b"\xff" * 8


def run_struct_zlib(path: Path, rows: list[tuple], ctx, snaplen: int) -> None:
    """A careful plain-Python builder: struct.pack, RFC 1071 sum, zlib ICRC over masked headers."""
    macs, ips = _addresses(ctx)
    pay = ctx.pattern[:PMTU].tobytes()
    tos, ttl, pkey = (ctx.dscp << 2) | ctx.ecn, ctx.ttl, ctx.p_key
    bth1 = ctx.mig_req << 6
    pack, crc32, unpack = struct.pack, zlib.crc32, struct.unpack
    first = rdma.WRITE_FIRST
    with open(path, "wb", buffering=1 << 20) as f:
        f.write(pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, snaplen, 1))
        for t, op, psn, dqp, ack, sport, ipid, va, rkey, rlen, nic, peer in rows:
            ext = pack("!QII", va, rkey, rlen) if op == first else b""
            udp_len = 8 + 12 + len(ext) + PMTU + 4
            src, dst = ips[nic], ips[peer]
            ip = pack("!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, ipid, 0x4000, ttl, 17, 0, src, dst)
            s = sum(unpack("!10H", ip))
            s = (s & 0xFFFF) + (s >> 16)
            s = (s & 0xFFFF) + (s >> 16)
            ip = ip[:10] + pack("!H", ~s & 0xFFFF) + ip[12:]
            udp = pack("!HHHH", sport, 4791, udp_len, 0)
            bth_a = pack("!BBH", op, bth1, pkey)
            bth_b = pack("!II", dqp, (ack << 31) | psn)
            masked = (_FF8 + pack("!BBHHHBBH4s4s", 0x45, 0xFF, 20 + udp_len, ipid, 0x4000, 0xFF, 17,
                                  0xFFFF, src, dst)
                      + pack("!HHHH", sport, 4791, udp_len, 0xFFFF) + bth_a + b"\xff" + bth_b[1:] + ext)
            icrc = crc32(pay, crc32(masked))
            frame = b"".join((macs[peer], macs[nic], b"\x08\x00", ip, udp, bth_a, bth_b, ext, pay,
                              pack("<I", icrc)))
            n = len(frame)
            c = min(n, snaplen)
            sec, ns = divmod(t, 1_000_000_000)
            f.write(pack("<IIII", sec, ns, c, n))
            f.write(frame if c == n else frame[:c])


def run_dpkt(path: Path, rows: list[tuple], ctx, snaplen: int) -> None:
    """dpkt objects for Ethernet/IPv4/UDP, BTH/RETH bytes, ICRC by zlib, dpkt.pcap.Writer."""
    import dpkt
    macs, ips = _addresses(ctx)
    pay = ctx.pattern[:PMTU].tobytes()
    tos, ttl = (ctx.dscp << 2) | ctx.ecn, ctx.ttl
    bth1 = ctx.mig_req << 6
    first = rdma.WRITE_FIRST
    with open(path, "wb", buffering=1 << 20) as f:
        w = dpkt.pcap.Writer(f, snaplen=snaplen, linktype=dpkt.pcap.DLT_EN10MB)
        for t, op, psn, dqp, ack, sport, ipid, va, rkey, rlen, nic, peer in rows:
            ext = struct.pack("!QII", va, rkey, rlen) if op == first else b""
            bth = struct.pack("!BBHII", op, bth1, ctx.p_key, dqp, (ack << 31) | psn)
            body = bth + ext + pay + b"\0\0\0\0"
            udp = dpkt.udp.UDP(sport=sport, dport=4791, ulen=8 + len(body), sum=0, data=body)
            ip = dpkt.ip.IP(tos=tos, id=ipid, df=1, ttl=ttl, p=17, src=ips[nic],
                            dst=ips[peer], data=bytes(udp))   # bytes: dpkt leaves the UDP sum 0
            eth = dpkt.ethernet.Ethernet(dst=macs[peer], src=macs[nic], type=0x0800, data=ip)
            frame = bytes(eth)
            m = bytearray(frame[14:-4])                       # IP..payload, variant fields all ones
            m[1] = m[8] = 0xFF
            m[10:12] = m[26:28] = b"\xff\xff"
            m[32] = 0xFF
            frame = frame[:-4] + struct.pack("<I", zlib.crc32(m, zlib.crc32(_FF8)))
            ts = t / 1e9                                      # dpkt takes float seconds
            if len(frame) <= snaplen:
                w.writepkt(frame, ts)
            else:   # dpkt's Writer never truncates: pack its record header with caplen < len
                sec = int(ts)
                usec = int(round(ts % 1 * 1e6))
                f.write(w._pack_hdr(sec, usec, snaplen, len(frame)) + frame[:snaplen])


def run_scapy(path: Path, rows: list[tuple], ctx, snaplen: int) -> None:
    """scapy layers with scapy.contrib.roce's BTH (ICRC in its post_build), PcapWriter(nano)."""
    from scapy.compat import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    from scapy.utils import PcapWriter as ScapyPcapWriter
    macs, ips = _addresses(ctx)
    mac_s = [":".join(f"{b:02x}" for b in m) for m in macs]
    ip_s = [".".join(str(b) for b in a) for a in ips]
    pay = ctx.pattern[:PMTU].tobytes()
    tos, ttl = (ctx.dscp << 2) | ctx.ecn, ctx.ttl
    first = rdma.WRITE_FIRST
    w = ScapyPcapWriter(str(path), linktype=1, nano=True, snaplen=snaplen)
    try:
        for t, op, psn, dqp, ack, sport, ipid, va, rkey, rlen, nic, peer in rows:
            ext = struct.pack("!QII", va, rkey, rlen) if op == first else b""
            pkt = (Ether(dst=mac_s[peer], src=mac_s[nic])
                   / IP(tos=tos, id=ipid, flags="DF", ttl=ttl, src=ip_s[nic], dst=ip_s[peer])
                   / UDP(sport=sport, dport=4791, chksum=0)
                   / BTH(opcode=op, migreq=ctx.mig_req, pkey=ctx.p_key, dqpn=dqp, ackreq=ack, psn=psn)
                   / Raw(ext + pay))
            frame = raw(pkt)
            if not w.header_present:
                w.write_header(frame)
            sec, ns = divmod(t, 1_000_000_000)
            w.write_packet(frame[:snaplen], sec=sec, usec=ns, wirelen=len(frame))
    finally:
        w.close()
