"""Building and writing full-size RoCEv2 RDMA WRITE frames to a pcap file: tokenpcap against dpkt,
scapy, a plain struct-and-zlib loop and a plain write of the same bytes, side by side in one run.

    python benchmarks/write_frames.py [--frames N] [--dir PATH ...] [--quick]

The workload: 1 MiB RDMA WRITE messages at PMTU 4096 on 8 QPs of NIC 0 of the bundled cluster
``h100-rocev2-400g`` (IPv4, DSCP 26/ECT(0), its addresses), interleaved packet by packet, so
every frame carries 4096 payload bytes: WRITE FIRST (with RETH, 4170-byte frame), 254 x MIDDLE
(4154) and LAST (4154, AckReq) per message; timestamps 84 ns apart (the layer-1 time of a 4170-byte
frame at 400 Gb/s). Every variant writes the same frames with a correct IPv4 header checksum and
ICRC, to a classic pcap file:

* ``tokenpcap writer``: ``FrameBuilder.fill`` into ``PcapWriter.write_batch`` (``--batch`` rows per
  batch; the writer's background write thread, as shipped);
* ``tokenpcap generate path``: the sink ``tokenpcap generate`` writes through
  (``generate_output.Dispatcher`` with one file, fed ``--chunk-rows`` rows per call, the way the
  engine hands chunks to it);
* ``dpkt``: dpkt Ethernet/IP/UDP objects (IPv4 checksum by dpkt) + BTH/RETH bytes, ICRC by zlib per
  frame, ``dpkt.pcap.Writer`` (float seconds, microsecond magic: its defaults);
* ``scapy``: ``Ether/IP/UDP/BTH`` of ``scapy.contrib.roce`` (ICRC by ``BTH.compute_icrc``),
  ``scapy.utils.PcapWriter(nano=True)`` (fewer frames: it is slow; rates are comparable);
* ``struct+zlib loop``: ``struct.pack`` headers, IPv4 checksum and ICRC (zlib over the masked
  headers, then the payload) in Python, one buffered ``write`` per record;
* ``plain write``: the same number of bytes from one prepared buffer, 8 MiB per ``os.write``.

Inputs (the packet table, and for the Python loops the same rows as Python tuples) are prepared
before the clock starts. Each run is timed twice: until the file is closed (page cache) and until
``os.fsync`` of the file returned (on the device); ratios are to the plain write timed the same
way. ``--snaplen 64`` cases keep 64 bytes of each frame (the ICRC is still computed over the whole
frame). Every variant's output is verified once (``verify``): record count, and every record equal
to tokenpcap's (lengths, bytes, time), tokenpcap's frames checked against the scalar reference
builder, the reference ICRC and scapy's ICRC and IPv4 checksum on a sample.

Peak memory: a subprocess writes a 2 GB and a 200 MB file through each tokenpcap path with the
packet table made batch by batch (as the engine streams it) and reports its peak RSS (VmHWM).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import Timing, drop_file, fs_info, fsync_path, loadavg, machine, plain_write  # noqa: E402

from tokenpcap.generate_output import Dispatcher, FileSpec, WriterConfig  # noqa: E402
from tokenpcap.lower import wire_context  # noqa: E402
from tokenpcap.messages import PACKET_DTYPE  # noqa: E402
from tokenpcap.pcap import PcapWriter  # noqa: E402
from tokenpcap.profiles import load_cluster  # noqa: E402
from tokenpcap.wire import FrameBuilder, crc, rdma  # noqa: E402
from tokenpcap.wire.frame import build_frame  # noqa: E402

CLUSTER = ROOT / "profiles" / "clusters" / "h100-rocev2-400g.yaml"
EPOCH_NS = 1_704_067_200 * 1_000_000_000        # 2024-01-01T00:00:00Z, as tokenpcap generate
MESSAGE_BYTES = 1 << 20
PMTU = 4096
N_QPS = 8
PKTS_PER_MSG = MESSAGE_BYTES // PMTU             # 256: FIRST, 254 MIDDLE, LAST
FRAME_GAP_NS = 84                                # layer-1 time of a 4170-byte frame at 400 Gb/s
PEERS = (8, 16, 24)                              # NIC 0's rail peers on nodes 1..3
MAX_FRAME_BYTES = 4170


# ---------------------------------------------------------------------------- the workload
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
    """The production building block: FrameBuilder.fill straight into PcapWriter's batch buffer."""
    with PcapWriter(path, snaplen=snaplen) as w:
        for a in range(0, len(packets), batch):
            pk = packets[a:a + batch]

            def fill(out, offsets, caplen, pk=pk):
                builder.fill(pk, out, offsets, caplen)

            w.write_batch(pk["time_ns"], pk["frame_bytes"].astype(np.int64), fill)


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
_TOS = None     # set from the context in main (DSCP << 2 | ECN)


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


# ---------------------------------------------------------------------------- verification
def iter_records(path: Path):
    """Records of a little-endian classic pcap, lazily (mmap): ``(nanosecond magic?, iterator of
    (ts_sec, ts_frac, caplen, orig_len, frame bytes))``; the iterator raises ValueError on a
    truncated last record."""
    f = open(path, "rb")
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    magic, = struct.unpack_from("<I", data, 0)
    if magic not in (0xA1B23C4D, 0xA1B2C3D4):
        raise ValueError(f"{path}: magic 0x{magic:08x}, expected a little-endian pcap")

    def gen():
        try:
            at, end = 24, len(data)
            while at < end:
                s, fr, cl, ol = struct.unpack_from("<IIII", data, at)
                if at + 16 + cl > end:
                    raise ValueError(f"{path}: record at byte {at} runs past the end of the file")
                yield s, fr, cl, ol, data[at + 16:at + 16 + cl]
                at += 16 + cl
        finally:
            data.close()
            f.close()
    return magic == 0xA1B23C4D, gen()


def scapy_recheck(frame: bytes) -> bool:
    """scapy recomputes the IPv4 header checksum and the ICRC (BTH.compute_icrc) of ``frame``."""
    from scapy.compat import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    p = Ether(frame)
    if BTH not in p:
        return False
    p[IP].chksum = None
    p[BTH].icrc = None
    return raw(p) == frame


def verify_reference(path: Path, packets: np.ndarray, ctx, snaplen: int, n_scapy: int = 40) -> str:
    """Check tokenpcap's file against the scalar reference builder, the reference CRCs and scapy."""
    n = len(packets)
    rng = np.random.default_rng(7)
    idx = sorted(set(range(min(n, 2 * N_QPS + 2))) | set(range(max(0, n - 3), n)) |
                 set(rng.integers(0, n, min(n, 300)).tolist()) |
                 {x for x in (PKTS_PER_MSG * N_QPS - 1, PKTS_PER_MSG * N_QPS) if x < n})
    nsec, it = iter_records(path)
    count, recs = 0, {}
    wanted = set(idx)
    for i, rec in enumerate(it):
        count += 1
        if i in wanted:
            recs[i] = rec
    if count != n:
        raise AssertionError(f"{path}: {count} records, expected {n}")
    n_scapy_done = 0
    for i in idx:
        s, fr, cl, ol, b = recs[i]
        ref = build_frame(packets[i], ctx)
        t = int(packets["time_ns"][i])
        if not nsec or (s, fr) != divmod(t, 1_000_000_000):
            raise AssertionError(f"{path}: record {i}: time {s}.{fr:09d}, expected {t} ns")
        if ol != len(ref) or cl != min(len(ref), snaplen) or b != ref[:cl]:
            raise AssertionError(f"{path}: record {i} differs from tokenpcap.wire.frame.build_frame")
        if crc.ipv4_checksum(b[14:24] + b"\0\0" + b[26:34]) != int.from_bytes(b[24:26], "big"):
            raise AssertionError(f"{path}: record {i}: IPv4 header checksum wrong")
        if cl == ol:
            if not crc.check_ethernet_frame(b).ok:
                raise AssertionError(f"{path}: record {i}: ICRC wrong (tokenpcap.wire.crc)")
            if n_scapy_done < n_scapy:
                if not scapy_recheck(b):
                    raise AssertionError(f"{path}: record {i}: scapy recomputes another ICRC/checksum")
                n_scapy_done += 1
    return (f"{count} records; {len(idx)} sampled frames equal to the scalar build_frame"
            + (f", reference ICRC ok, scapy ICRC+IPv4 checksum ok on {n_scapy_done}"
               if snaplen >= MAX_FRAME_BYTES else ", IPv4 checksum ok (ICRC not in a 64-byte record)"))


def verify_same(path: Path, ref_path: Path, n: int, snaplen: int) -> str:
    """Every record of ``path`` equal to the first ``n`` of tokenpcap's file (time to the
    resolution of ``path``'s magic); a scapy recheck of a few frames of ``path`` itself."""
    nsec, recs = iter_records(path)
    _, ref = iter_records(ref_path)
    count, sample = 0, []
    for i, ((s, fr, cl, ol, b), (rs, rfr, rcl, rol, rb)) in enumerate(zip(recs, ref)):
        count += 1
        if (cl, ol) != (rcl, rol) or b != rb:
            raise AssertionError(f"{path}: record {i}: frame differs from tokenpcap's")
        t_ref = rs * 1_000_000_000 + rfr
        t = s * 1_000_000_000 + fr * (1 if nsec else 1000)
        if abs(t - t_ref) > (0 if nsec else 1000):   # dpkt: float seconds, microseconds
            raise AssertionError(f"{path}: record {i}: time {t} ns, tokenpcap's {t_ref} ns")
        if i % max(1, n // 10) == 0 and cl == ol:
            sample.append((i, b))
    count += sum(1 for _ in recs)      # records of path beyond tokenpcap's first n (should be none)
    if count != n:
        raise AssertionError(f"{path}: {count} records, expected {n}")
    checked = 0
    for i, b in sample:
        if not scapy_recheck(b):
            raise AssertionError(f"{path}: record {i}: scapy recomputes another ICRC/checksum")
        checked += 1
    return (f"{n} records byte-equal to tokenpcap's"
            + ("" if nsec else " (times within the 1 us of dpkt's microsecond records)")
            + (f"; scapy ICRC ok on {checked}" if checked else ""))


# ---------------------------------------------------------------------------- memory
def peak_rss_kib() -> int:
    """VmHWM of this process (KiB): its peak resident set. Not ``ru_maxrss``, which Linux carries
    across ``execve`` from the forked parent (a 3 GB parent makes every child report 3 GB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_child(kind: str, nbytes: int, path: Path, batch: int, chunk_rows: int) -> None:
    """Write about ``nbytes`` of full frames through one tokenpcap path, making the packet rows
    chunk by chunk; print JSON with the peak RSS before and after writing (KiB)."""
    cluster, ctx, builder = setup()
    rows = chunk_rows if kind == "generate" else batch
    warm = make_packets(builder, 0, min(rows, 1024))    # imports and tables loaded
    del warm
    base = peak_rss_kib()
    n = max(1, nbytes // (MAX_FRAME_BYTES - 16 + 16))
    t0 = time.perf_counter()
    if kind == "generate":
        cfg = WriterConfig(cluster=cluster, fmt="pcap", snaplen=262144, payload_seed=0)
        disp = Dispatcher([FileSpec(path, (0,))], cfg, jobs=1)
        for a in range(0, n, rows):
            disp.send(0, make_packets(builder, a, min(rows, n - a)), None, None)
        disp.close()
    else:
        with PcapWriter(path, snaplen=262144) as w:
            for a in range(0, n, rows):
                pk = make_packets(builder, a, min(rows, n - a))
                w.write_batch(pk["time_ns"], pk["frame_bytes"].astype(np.int64),
                              lambda out, o, c, pk=pk: builder.fill(pk, out, o, c))
    dt = time.perf_counter() - t0
    size = path.stat().st_size
    path.unlink()
    print(json.dumps({"kind": kind, "frames": n, "bytes": size, "seconds": dt, "rows": rows,
                      "base_kib": base,
                      "maxrss_kib": peak_rss_kib()}))


def memory_report(d: Path, sizes: list[int], batch: int, chunk_rows: int) -> list[str]:
    lines = [f"Peak memory (VmHWM of a fresh subprocess; packet rows made chunk by chunk), "
             f"files in {d} ({fs_info(d)}):",
             f"  {'path':44} {'file':>8} {'frames':>10} {'base RSS':>9} {'peak RSS':>9} {'MB/s':>7}"]
    cases = [("direct", batch), ("generate", chunk_rows), ("generate", 1 << 18)]
    for kind, rows in cases:
        for nbytes in sizes:
            cmd = [sys.executable, __file__, "--memory-child", kind, str(nbytes), str(d / "mem.pcap"),
                   "--batch", str(rows), "--chunk-rows", str(rows)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            name = (f"PcapWriter+FrameBuilder, {rows} rows/batch" if kind == "direct"
                    else f"generate Dispatcher, {rows} rows/chunk")
            lines.append(f"  {name:44} {r['bytes'] / 1e9:6.2f}GB {r['frames']:10,d} "
                         f"{r['base_kib'] / 1024:7.0f}MB {r['maxrss_kib'] / 1024:7.0f}MB "
                         f"{r['bytes'] / r['seconds'] / 1e6:7.0f}")
    return lines


def code_version() -> str:
    """``git describe --always --dirty`` of the tree and the modified files the numbers depend on."""
    try:
        desc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "tokenpcap/wire",
                                "tokenpcap/pcap", "tokenpcap/generate_output.py"],
                               capture_output=True, text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    changed = [ln[3:] for ln in dirty if ln.strip()]
    return desc + (f" (uncommitted: {', '.join(changed)})" if changed else "")


# ---------------------------------------------------------------------------- timing
def timed(fn, path: Path, disk: bool) -> tuple[float, float, float]:
    """(seconds until closed, seconds until fsync returned, CPU seconds of this process)."""
    drop_file(path, sync=disk)
    c0 = time.process_time()
    t0 = time.perf_counter()
    fn(path)
    t1 = time.perf_counter()
    fsync_path(path)
    return t1 - t0, time.perf_counter() - t0, time.process_time() - c0


def bench_dir(d: Path, args, cluster, ctx, builder, packets, rows, verify: bool) -> list[str]:
    disk = fs_info(d) != "tmpfs"
    out = []
    for snaplen, n, label in ((262144, args.frames, "full frames"), (64, args.header_frames, "snaplen 64")):
        pk = packets[:n]
        n_slow = min(n, args.slow_frames)
        n_scapy = min(n, args.scapy_frames)
        cases = [
            ("plain write (same bytes)", n, None),
            ("tokenpcap writer", n, lambda p: run_tokenpcap(p, pk, builder, snaplen, args.batch)),
            ("tokenpcap generate path", n, lambda p: run_generate_path(p, pk, cluster, snaplen,
                                                                       args.chunk_rows)),
            ("struct+zlib loop", n_slow, lambda p: run_struct_zlib(p, rows[:n_slow], ctx, snaplen)),
            ("dpkt", n_slow, lambda p: run_dpkt(p, rows[:n_slow], ctx, snaplen)),
            ("scapy", n_scapy, lambda p: run_scapy(p, rows[:n_scapy], ctx, snaplen)),
        ]
        ref = d / "ref.pcap"
        notes = {}
        if verify:        # once per mode: tokenpcap's file against the references, others against it
            run_tokenpcap(ref, pk, builder, snaplen, args.batch)
            notes["tokenpcap writer"] = verify_reference(ref, pk, ctx, snaplen)
            for name, m, fn in cases[2:]:
                fn(d / "v.pcap")
                notes[name] = verify_same(d / "v.pcap", ref, m, snaplen)
            (d / "v.pcap").unlink()
        ref.unlink(missing_ok=True)
        times = {name: Timing() for name, _, _ in cases}
        sizes = {}
        load0 = loadavg()
        for rep in range(args.repeat):
            for name, m, fn in cases:
                if fn is None:
                    continue
                if name in ("dpkt", "scapy", "struct+zlib loop") and rep >= args.slow_repeat:
                    continue
                p = d / "bench.pcap"
                times[name].add(*timed(fn, p, disk))
                sizes[name] = p.stat().st_size
            size = sizes["tokenpcap writer"]
            p = d / "plain.bin"
            drop_file(p, sync=disk)
            times["plain write (same bytes)"].add(*plain_write(p, size))
            sizes["plain write (same bytes)"] = size
            drop_file(p, sync=disk)
        drop_file(d / "bench.pcap", sync=False)
        pw = times["plain write (same bytes)"]
        base_c = size / min(pw.write_s)
        base_f = size / min(pw.fsync_s)
        base_cpu = size / min(pw.cpu_s)
        out.append("")
        out.append(f"== {d} ({fs_info(d)}), {label}: {n:,} frames, {size / 1e6:,.0f} MB file; "
                   f"load {load0} -> {loadavg()}; best of {args.repeat} "
                   f"(Python loops: {min(args.repeat, args.slow_repeat)})")
        out.append(f"  {'variant':26} {'frames':>9} {'frames/s':>12} {'GB/s close':>10} {'x plain':>7} "
                   f"{'GB/s +fsync':>11} {'x plain':>7} {'spread':>7} {'CPU GB/s':>8} {'x plain':>7}")
        for name, m, _ in cases:
            t = times[name]
            if not t.write_s:
                continue
            sz = sizes[name]
            bc, bf = sz / min(t.write_s), sz / min(t.fsync_s)
            out.append(f"  {name:26} {m:9,d} {m / min(t.fsync_s):12,.0f} {bc / 1e9:10.3f} "
                       f"{bc / base_c:7.2f} {bf / 1e9:11.3f} {bf / base_f:7.2f} "
                       f"{Timing.spread(t.fsync_s) * 100:6.0f}% {sz / min(t.cpu_s) / 1e9:8.3f} "
                       f"{sz / min(t.cpu_s) / base_cpu:7.2f}")
        if notes:
            out.append("  verified:")
            for name, note in notes.items():
                out.append(f"    {name}: {note}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200_000, help="full frames for the fast variants")
    ap.add_argument("--header-frames", type=int, default=None,
                    help="frames of the --snaplen 64 cases (default 10 x --frames)")
    ap.add_argument("--slow-frames", type=int, default=20_000, help="frames for dpkt and struct+zlib")
    ap.add_argument("--scapy-frames", type=int, default=1_000)
    ap.add_argument("--dir", action="append", default=None,
                    help="output directory (repeatable; default /dev/shm and /work/tmp)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--slow-repeat", type=int, default=2, help="runs of the Python-loop variants")
    ap.add_argument("--batch", type=int, default=8192, help="rows per PcapWriter.write_batch")
    ap.add_argument("--chunk-rows", type=int, default=8192, help="rows per Dispatcher.send")
    ap.add_argument("--memory", default="2e9,2e8", help="file sizes (bytes) of the memory runs; '' skips")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--quick", action="store_true", help="small sizes, 2 runs, 20 MB memory runs")
    ap.add_argument("--memory-child", nargs=3, metavar=("KIND", "BYTES", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.memory_child:
        kind, nbytes, path = a.memory_child
        memory_child(kind, int(float(nbytes)), Path(path), a.batch, a.chunk_rows)
        return
    if a.quick:
        a.frames = min(a.frames, 20_000)
        a.slow_frames = min(a.slow_frames, 2_000)
        a.scapy_frames = min(a.scapy_frames, 100)
        a.repeat = min(a.repeat, 2)
        a.slow_repeat = 1
        a.memory = "2e8,2e7" if a.memory == "2e9,2e8" else a.memory
    if a.header_frames is None:
        a.header_frames = 10 * a.frames
    dirs = [Path(d) for d in (a.dir or ["/dev/shm", "/work/tmp"])]
    cluster, ctx, builder = setup()
    packets = make_packets(builder, 0, max(a.frames, a.header_frames))
    rows = py_rows(packets[:max(a.slow_frames, a.scapy_frames)])
    print(f"write_frames: {time.strftime('%Y-%m-%d %H:%M %Z')}; {machine()}; load {loadavg()}")
    print(f"code: {code_version()}")
    print(f"frames: 1 MiB RDMA WRITEs on {N_QPS} QPs, PMTU {PMTU} (FIRST 4170 B with RETH, MIDDLE/LAST "
          f"4154 B), correct IPv4 checksums and ICRCs; pcap records of 16 + caplen bytes")
    print("columns: frames/s and the second GB/s include os.fsync of the file (on the device); "
          "'GB/s close' is until close (page cache); 'x plain' = GB/s / plain write's GB/s timed "
          "the same way; spread = (slowest - fastest) / fastest of the +fsync times; CPU GB/s = file "
          "bytes / CPU seconds of this process (all threads, user+system; what a loaded machine "
          "leaves less room to disturb)")
    print("dpkt writes float seconds into microsecond records (its defaults); the others write "
          "nanosecond pcap")
    for k, d in enumerate(dirs):
        d.mkdir(parents=True, exist_ok=True)
        lines = bench_dir(d, a, cluster, ctx, builder, packets, rows, verify=k == 0 and not a.no_verify)
        print("\n".join(lines), flush=True)
    if a.memory:
        sizes = [int(float(x)) for x in a.memory.split(",") if x]
        disk = next((d for d in dirs if fs_info(d) != "tmpfs"), dirs[0])
        print()
        print("\n".join(memory_report(disk, sizes, a.batch, a.chunk_rows)))
    print(f"\nload at the end: {loadavg()}")


if __name__ == "__main__":
    main()
