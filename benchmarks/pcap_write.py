"""Capture-writing throughput against the physical limit (one plain write of the same bytes).

For each case the writer gets batches of records with a fill that writes constant bytes (so the
numbers measure the writer, not a frame builder), and the baseline writes the same total number
of bytes with one ``os.write`` of a prepared buffer to a new file in the same directory. Each
case and each baseline runs in its own process (peak RSS is the writer's own), three times,
interleaved; the best time of each is kept. The writer is timed from its third batch on (steady
state: its two batch buffers have been touched once; in this VM a first page touch costs ~10 µs).

    python benchmarks/pcap_write.py [--dir /dev/shm] [--dir /work/tmp] [--gbytes 1] [--reps 3]
                                    [--case NAME ...] [--against DIR]

Prints one line per case: records/s, GB/s, plain-write GB/s, ratio (plain time / our time),
CPU seconds of both (ours counts the writer thread too: building + the same kernel copy), peak
RSS of the writer. On a shared machine the wall-clock ratio follows the load; the CPU columns
show how much work the writer adds to the copy itself. ``--against DIR``: the writers of
another checkout (its ``tokenpcap`` package) run in the same rounds, interleaved with this
tree's and the plain write, one more line per case marked with the directory.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if "--tree" in sys.argv:       # a child timing another checkout's writers
    sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])
else:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tokenpcap.pcap import Comments, ErfWriter, Interface, PcapngWriter, PcapWriter  # noqa: E402

LABELS = ("dp/backward/AllReduce", "tp/forward/AllReduce", "pp/forward/SendRecv")
MIXED = np.array([4170] * 30 + [62] * 2 + [1866], np.int64)


def constant_fill(out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
    """Write 0xAB into every frame range: one strided assignment when the frames are evenly
    spaced and equally long, else one scatter per distinct caplen."""
    n = offsets.size
    if n > 1 and caplen[0] == caplen[-1] and (caplen == caplen[0]).all():
        step = int(offsets[1] - offsets[0])
        if int(offsets[-1] - offsets[0]) == step * (n - 1):
            size = int(caplen[0])
            np.ndarray((n, size), np.uint8, buffer=out, offset=int(offsets[0]),
                       strides=(step, 1))[...] = 0xAB
            return
    sizes = caplen[:1] if n and (caplen == caplen[0]).all() else \
        np.flatnonzero(np.bincount(caplen))          # (no sort)
    for size in sizes:
        if size == 0:
            continue
        sel = offsets if sizes.size == 1 else offsets[caplen == size]
        view = np.ndarray((out.size - size + 1,), f"V{size}", buffer=out, strides=(1,))
        view[sel] = np.frombuffer(b"\xab" * int(size), f"V{size}")[0]


CASES = {
    "pcap 4170 B frames": (lambda p: PcapWriter(p), 4186, "full", 4096, False),
    "pcap snaplen 64": (lambda p: PcapWriter(p, snaplen=64), 80, "full", 1 << 17, False),
    "pcap snaplen 74": (lambda p: PcapWriter(p, snaplen=74), 90, "full", 1 << 17, False),
    "pcap snaplen 64, 6% ACKs": (lambda p: PcapWriter(p, snaplen=64), 80, "mixed", 1 << 17, False),
    "pcap mixed 4170/62/1866": (lambda p: PcapWriter(p), 3880, "mixed", 8192, False),
    "pcapng 4170 B + comment": (lambda p: PcapngWriter(p, [Interface("nic0", speed_bps=400 * 10**9)]),
                                4236, "full", 4096, True),
    "pcapng snaplen 64": (lambda p: PcapngWriter(p, [Interface("nic0")], snaplen=64), 96,
                          "full", 1 << 17, False),
    "pcapng snaplen 64 + comment": (lambda p: PcapngWriter(p, [Interface("nic0")], snaplen=64), 124,
                                    "full", 1 << 17, True),
    "pcapng snaplen 74 + comment": (lambda p: PcapngWriter(p, [Interface("nic0")], snaplen=74), 136,
                                    "full", 1 << 17, True),
    "pcap ERF/IB 4170 B": (lambda p: PcapWriter(p, link="infiniband"), 4202, "full", 4096, False),
    "erf snaplen 64": (lambda p: ErfWriter(p, snaplen=64), 80, "full", 1 << 17, False),
}


def run_case(name: str, path: Path, gbytes: float) -> dict:
    make, approx, frames, batch, comments = CASES[name]
    n = int(gbytes * 1e9 // approx)
    # runs of fewer than three batches are timed whole (smoke runs at tiny sizes)
    c0, t0, skip_bytes, skip_n = time.process_time(), time.perf_counter(), 0, 0
    # the inputs, made once: every batch's frame lengths and comments are a view of them and
    # its times one in-place add, so the timing holds the writer's work, not the harness's
    ramp = np.arange(batch, dtype=np.int64) * 90
    times = np.empty(batch, np.int64)
    lengths = np.full(batch, 4170, np.int64) if frames == "full" else \
        MIXED[np.arange(batch + MIXED.size) % MIXED.size]
    notes = Comments(LABELS, np.arange(batch) // 64 % 3) if comments else None
    with make(path) as w:
        for k, i in enumerate(range(0, n, batch)):
            if k == 2:    # steady state: both scratch buffers exist (first touches excluded)
                c0, t0 = time.process_time(), time.perf_counter()
                skip_bytes, skip_n = w.bytes_written, i
            m = min(batch, n - i)
            t = np.add(ramp[:m], 1_700_000_000_000_000_000 + i * 90, out=times[:m])
            fb = lengths[:m] if frames == "full" else \
                lengths[i % MIXED.size:i % MIXED.size + m]
            c = None if notes is None else notes if m == batch else \
                Comments(LABELS, notes.codes[:m])
            w.write_batch(t, fb, constant_fill, 0, c)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    size = path.stat().st_size - skip_bytes
    path.unlink()
    return {"n": n - skip_n, "dt": dt, "cpu": cpu, "size": size,
            "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_plain(path: Path, nbytes: int) -> dict:
    buf = np.full(nbytes, 0xAB, np.uint8)
    c0 = time.process_time()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    view = memoryview(buf)
    while view.nbytes:
        view = view[os.write(fd, view):]
    os.close(fd)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    path.unlink()
    return {"dt": dt, "cpu": cpu}


def child(args: list[str], tree: str | None = None) -> dict:
    extra = ["--tree", tree] if tree else []
    out = subprocess.run([sys.executable, __file__, *extra, "--child", *args],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def line(name: str, runs: list[dict], plain: list[dict]) -> str:
    o = min(runs, key=lambda r: r["dt"])
    b = min(r["dt"] for r in plain)
    oc = min(r["cpu"] for r in runs)
    bc = min(r["cpu"] for r in plain)
    return (f"{name:28s} {o['n'] / o['dt'] / 1e6:6.2f} M rec/s {o['size'] / o['dt'] / 1e9:5.2f} GB/s"
            f" | plain write {o['size'] / b / 1e9:5.2f} GB/s | ratio {b / o['dt']:4.2f}"
            f" | CPU s: ours {oc:5.2f} plain {bc:5.2f}"
            f" | {o['size'] / 1e9:.2f} GB, writer peak RSS {o['rss_mib']:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", action="append", default=None)
    ap.add_argument("--gbytes", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--case", action="append", default=None)
    ap.add_argument("--child", nargs="+", default=None)
    ap.add_argument("--against", default=None, help="another checkout's directory")
    ap.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, path, value = args.child[0], Path(args.child[1]), args.child[2]
        res = run_plain(path, int(value)) if kind == "plain" else \
            run_case(kind, path, float(args.child[3]))
        print(json.dumps(res))
        return
    for d in [Path(x) for x in (args.dir or ["/dev/shm", "/work/tmp"])]:
        d.mkdir(parents=True, exist_ok=True)
        print(f"== {d}", flush=True)
        for name in args.case or CASES:
            ours, base, plain = [], [], []
            for _ in range(args.reps):
                ours.append(child([name, str(d / "bench.cap"), "x", str(args.gbytes)]))
                if args.against:
                    base.append(child([name, str(d / "bench.cap"), "x", str(args.gbytes)],
                                      args.against))
                plain.append(child(["plain", str(d / "plain.bin"), str(ours[-1]["size"])]))
            if args.against:
                print(line(name, base, plain) + f" | {args.against}", flush=True)
            print(line(name, ours, plain) + (" | this tree" if args.against else ""), flush=True)


if __name__ == "__main__":
    main()
