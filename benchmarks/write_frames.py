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

The workload and the writers are in ``frame_writers.py``, the checks in ``frame_verify.py``.

Peak memory: a subprocess writes a 2 GB and a 200 MB file through each tokenpcap path with the
packet table made batch by batch (as the engine streams it) and reports its peak RSS (VmHWM).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import Timing, drop_file, fs_info, fsync_path, loadavg, machine, plain_write  # noqa: E402
from frame_verify import verify_reference, verify_same  # noqa: E402
from frame_writers import (MAX_FRAME_BYTES, N_QPS, PMTU, make_packets, py_rows, run_dpkt,  # noqa: E402
                           run_generate_path, run_scapy, run_struct_zlib, run_tokenpcap, setup)

from tokenpcap.generate.output import Dispatcher, FileSpec, WriterConfig  # noqa: E402
from tokenpcap.pcap import PcapWriter  # noqa: E402
from tokenpcap.wire.gather import BatchFill  # noqa: E402


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
                w.write_batch(pk["time_ns"], pk["frame_bytes"].astype(np.int64), BatchFill(builder, pk))
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
                                "tokenpcap/pcap", "tokenpcap/generate/output.py"],
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
