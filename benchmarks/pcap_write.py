"""Capture-writing throughput against the physical limit (one plain write of the same bytes).

For each case the writer gets batches of records with a fill that writes constant bytes (so the
numbers measure the writer, not a frame builder), and the baseline writes the same total number
of bytes with one ``os.write`` of a prepared buffer to a new file in the same directory.

    python benchmarks/pcap_write.py [--dir /dev/shm] [--dir /work/tmp] [--gbytes 1]

Prints one line per case: records/s, GB/s, ratio to the plain write, peak RSS.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tokenpcap.pcap import Comments, ErfWriter, Interface, PcapngWriter, PcapWriter  # noqa: E402


def constant_fill(out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
    """Write 0xAB into every frame range, one numpy assignment per distinct caplen."""
    for size in np.unique(caplen):
        if size == 0:
            continue
        sel = offsets[caplen == size]
        view = np.ndarray((out.size - size + 1,), f"V{size}", buffer=out, strides=(1,))
        view[sel] = np.frombuffer(b"\xab" * int(size), f"V{size}")[0]


def plain_write(path: Path, nbytes: int) -> float:
    buf = np.full(nbytes, 0xAB, np.uint8)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    view = memoryview(buf)
    while view.nbytes:
        view = view[os.write(fd, view):]
    os.close(fd)
    dt = time.perf_counter() - t0
    path.unlink()
    return dt


def run(make, path: Path, n: int, batch: int, frame: np.ndarray, comments: bool) -> tuple[float, int]:
    t_ns = 1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 90
    labels = ("dp/backward/AllReduce", "tp/forward/AllReduce", "pp/forward/SendRecv")
    t0 = time.perf_counter()
    with make(path) as w:
        for i in range(0, n, batch):
            t = t_ns[i:i + batch]
            fb = frame[i % frame.size:i % frame.size + t.size] if frame.size > 1 else \
                np.full(t.size, frame[0], np.int64)
            c = Comments(labels, np.arange(t.size) // 64 % 3) if comments else None
            w.write_batch(t, fb, constant_fill, 0, c)
    dt = time.perf_counter() - t0
    size = path.stat().st_size
    path.unlink()
    return dt, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", action="append", default=None)
    ap.add_argument("--gbytes", type=float, default=1.0)
    ap.add_argument("--threaded", type=int, default=1)
    args = ap.parse_args()
    dirs = [Path(d) for d in (args.dir or ["/dev/shm", "/work/tmp"])]
    thr = bool(args.threaded)
    mixed = np.tile(np.array([4170] * 30 + [62] * 2 + [1866], np.int64), 1 << 16)
    cases = [
        ("pcap 4170 B frames", lambda p: PcapWriter(p, threaded=thr), 4186, np.array([4170]), 4096, False),
        ("pcap snaplen 64", lambda p: PcapWriter(p, snaplen=64, threaded=thr), 80, np.array([4170]), 1 << 18, False),
        ("pcap mixed 4170/62/1866", lambda p: PcapWriter(p, threaded=thr), 3880, mixed, 8192, False),
        ("pcapng 4170 B + comment", lambda p: PcapngWriter(p, [Interface("nic0", speed_bps=400 * 10**9)],
                                                       threaded=thr), 4236, np.array([4170]), 4096, True),
        ("pcapng snaplen 64 + comment", lambda p: PcapngWriter(p, [Interface("nic0")], snaplen=64,
                                                           threaded=thr), 124, np.array([4170]), 1 << 18, True),
        ("pcap ERF/IB 4170 B", lambda p: PcapWriter(p, link="infiniband", threaded=thr), 4202,
         np.array([4170]), 4096, False),
        ("erf snaplen 64", lambda p: ErfWriter(p, snaplen=64, threaded=thr), 80, np.array([4170]), 1 << 18, False),
    ]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        print(f"== {d} ({'threaded' if thr else 'single thread'})")
        for name, make, approx, frame, batch, com in cases:
            n = int(args.gbytes * 1e9 // approx)
            dt, size = run(make, d / "bench.pcap", n, batch, frame, com)
            base = min(plain_write(d / "plain.bin", size) for _ in range(2))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{name:30s} {n / dt / 1e6:7.2f} M rec/s {size / dt / 1e9:6.2f} GB/s  "
                  f"plain {size / base / 1e9:5.2f} GB/s  ratio {base / dt:4.2f}  "
                  f"({size / 1e9:.2f} GB, peak RSS {rss:.0f} MiB)")


if __name__ == "__main__":
    main()
