"""Capture-reading throughput against the physical limit (``cat FILE > /dev/null``, warm cache).

Writes two files with tokenpcap's writer (full-size 4170-byte RoCE WRITE frames with a few ACKs,
and a headers-only ``--snaplen 64`` capture of data frames and 62-byte ACKs), then times, warm:

* ``cat FILE > /dev/null`` (reads every byte once: the physical limit);
* tokenpcap's reader: every record's header into RECORD_DTYPE batches (times, lengths, offsets);
* optionally (``--dpkt``) dpkt's pcap reader on the same file, for orientation.

    python benchmarks/pcap_read.py [--dir /work/tmp] [--full 200000] [--small 10000000] [--dpkt]
"""
from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tokenpcap.pcap import Comments, Interface, PcapngWriter, PcapWriter  # noqa: E402
from tokenpcap.pcap.reader import open_capture  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pcap_write import constant_fill  # noqa: E402


def make(path: Path, n: int, snaplen: int, fmt: str) -> None:
    rng = np.random.default_rng(0)
    batch = 1 << 16
    labels = ("dp/backward/AllReduce", "tp/forward/AllReduce")
    w = PcapWriter(path, snaplen=snaplen) if fmt == "pcap" else \
        PcapngWriter(path, [Interface("nic0"), Interface("nic1")], snaplen=snaplen)
    with w:
        for i in range(0, n, batch):
            m = min(batch, n - i)
            t = 1_700_000_000_000_000_000 + (i + np.arange(m, dtype=np.int64)) * 90
            fb = np.where(rng.random(m) < 0.05, 62, 4170)
            w.write_batch(t, fb, constant_fill, rng.integers(0, 2, m) if fmt == "pcapng" else 0,
                          Comments(labels, np.arange(m) // 100 % 2) if fmt == "pcapng" else None)


def best(fn, reps: int = 3) -> tuple[float, float]:
    """(best wall s, best CPU s of this process and its children)."""
    out, cpu = [], []
    for _ in range(reps):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(time.process_time() - c0 + (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return min(out), min(cpu)


def ours(path: Path) -> tuple[int, int]:
    with open_capture(path) as cap:
        n = total = 0
        for rec in cap.batches():
            n += rec.size
            total += int(rec["caplen"].sum(dtype=np.int64))
    return n, total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/work/tmp")
    ap.add_argument("--full", type=int, default=200_000)
    ap.add_argument("--small", type=int, default=10_000_000)
    ap.add_argument("--dpkt", action="store_true")
    args = ap.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    cases = [("full-size pcap", "full.pcap", args.full, 262144, "pcap"),
             ("full-size pcapng+comments", "full.pcapng", args.full, 262144, "pcapng"),
             ("snaplen 64 pcap", "small.pcap", args.small, 64, "pcap"),
             ("snaplen 64 pcapng+comments", "small.pcapng", args.small // 2, 64, "pcapng")]
    for name, fname, n, snap, fmt in cases:
        path = d / fname
        make(path, n, snap, fmt)
        size = path.stat().st_size
        t_cat, c_cat = best(lambda: subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL,
                                                   check=True))
        t_ours, c_ours = best(lambda: ours(path))
        got, _ = ours(path)
        assert got == n
        line = (f"{name:28s} {n:>9d} rec {size / 1e9:5.2f} GB | cat {t_cat:6.3f} s (CPU {c_cat:5.3f})"
                f" | tokenpcap {t_ours:6.3f} s (CPU {c_ours:5.3f}) = {n / t_ours / 1e6:6.2f} M rec/s,"
                f" {t_ours / t_cat:4.2f}x cat")
        if args.dpkt and fmt == "pcap":
            import dpkt

            def run_dpkt():
                with open(path, "rb") as f:
                    for _ in dpkt.pcap.Reader(f):
                        pass
            t, _ = best(run_dpkt, 1)
            line += f" | dpkt {n / t / 1e6:5.2f} M rec/s"
        print(line, flush=True)
        path.unlink()


if __name__ == "__main__":
    main()
