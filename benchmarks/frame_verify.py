"""Reading back and checking the files write_frames.py writes: tokenpcap's against the scalar
reference builder, the reference CRCs and scapy; every other variant's against tokenpcap's, record
by record. Raises AssertionError naming the file and record. Benchmarks only.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

import numpy as np

from frame_writers import MAX_FRAME_BYTES, N_QPS, PKTS_PER_MSG
from tokenpcap.wire import crc
from tokenpcap.wire.frame import build_frame

__all__ = ["iter_records", "scapy_recheck", "verify_reference", "verify_same"]


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
