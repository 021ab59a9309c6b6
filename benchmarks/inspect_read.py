"""Reading a large RoCEv2 capture and summarising it: tokenpcap inspect against tshark, capinfos,
dpkt, scapy and ``cat FILE > /dev/null`` (the physical limit), on the same files, in one run.

    python benchmarks/inspect_read.py [--frames 200000] [--headers 2000000] [--dir /tmp]
                                      [--against DIR] [--skip-slow]

Files: ``full.pcap`` (``--frames`` full-size 4170-byte RDMA WRITE frames with correct ICRCs,
8 QPs interleaved, nanosecond pcap) and ``headers.pcap`` (``--headers`` frames cut at snaplen
64). Every tool reads the whole file and produces a per-flow/opcode summary (tshark decodes the
RoCE fields; capinfos only counts; dpkt and scapy parse Ethernet/IP/UDP/BTH in Python). The page
cache is warmed first; each timing is the best of ``--repeat`` runs. scapy runs on the first
``--scapy-frames`` frames only and its rate is extrapolated (it would take minutes).

``--against DIR``: also ``inspect_capture(FILE, crc=False)`` from another checkout's directory
and from this tree, each in a fresh process after a warm-up call (start-up left out), the two
interleaved run by run; and ``python3 -m tokenpcap inspect --no-crc --json FILE`` as a user runs it
(a fresh process: start-up, imports and the compiled loops' load included) from another
checkout's directory and from this tree, the two interleaved run by run, on each file, and the
same without ``--no-crc`` (every ICRC checked that the frames' bytes allow); their JSON outputs
are compared byte for byte (sha256) and the line says whether they are the same.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.analysis.trace import write_long_trace, write_trace  # noqa: E402
from tokenpcap.analysis.inspect import inspect_capture  # noqa: E402


def _cpu() -> float:
    """CPU seconds (user + system) of this process and its finished children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def best(fn, repeat: int) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run): on a shared machine the CPU time is the
    steadier number."""
    runs = []
    for _ in range(repeat):
        c, t = _cpu(), time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t, _cpu() - c))
    return min(runs)


def sh(cmd: str) -> None:
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def dpkt_summary(path: Path, limit: int | None = None) -> Counter:
    import dpkt
    flows: Counter = Counter()
    with open(path, "rb") as f:
        for i, (_, buf) in enumerate(dpkt.pcap.Reader(f)):
            if limit is not None and i >= limit:
                break
            eth = dpkt.ethernet.Ethernet(buf)
            ip = eth.data
            if not isinstance(ip, dpkt.ip.IP) or not isinstance(ip.data, dpkt.udp.UDP):
                continue
            udp = ip.data
            if udp.dport != 4791:
                continue
            op, _, _, qp, psn = struct.unpack_from("!BBHII", udp.data)
            flows[(ip.src, ip.dst, qp & 0xFFFFFF)] += udp.ulen - 8 - 12 - 4
    return flows


def scapy_summary(path: Path, limit: int) -> Counter:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.utils import PcapReader
    flows: Counter = Counter()
    with PcapReader(str(path)) as r:
        for i, p in enumerate(r):
            if i >= limit:
                break
            if BTH in p:
                flows[(p[IP].src, p[IP].dst, p[BTH].dqpn)] += p[UDP].len - 8 - 12 - 4
    return flows


def cli_pair(path: Path, other: Path, repeat: int, flags: tuple[str, ...] = ("--no-crc",)
             ) -> list[tuple[str, tuple[float, float]]]:
    """``inspect FLAGS --json`` of ``path`` run from ``other`` and from this tree, fresh
    processes interleaved (best wall of ``repeat`` each, with its CPU), labelled with whether
    the two JSON outputs are byte-identical."""
    here = Path(__file__).resolve().parent.parent
    runs: dict[Path, list] = {other: [], here: []}
    digest: dict[Path, str] = {}
    for _ in range(repeat):
        for tree in (other, here):
            c, t = _cpu(), time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "tokenpcap", "inspect", *flags,
                                  "--json", str(path)], cwd=tree, check=True,
                                 capture_output=True).stdout
            runs[tree].append((time.perf_counter() - t, _cpu() - c))
            digest[tree] = hashlib.sha256(out).hexdigest()
    same = "same JSON" if digest[other] == digest[here] else "JSON DIFFERS"
    what = " ".join(flags) or "(ICRC)"
    return [(f"CLI {what}, {other.name} ({same})", min(runs[other])),
            (f"CLI {what}, this tree", min(runs[here]))]


_LIB_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from tokenpcap.analysis import decode_rows
from tokenpcap.analysis.inspect import inspect_capture
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
floor, decode_rows.COMPILED_MIN_RECORDS = decode_rows.COMPILED_MIN_RECORDS, 0
inspect_capture(sys.argv[3], max_records=1000, crc=False)   # imports, compiled loops loaded
decode_rows.COMPILED_MIN_RECORDS = floor
c, t = cpu(), time.perf_counter()
inspect_capture(sys.argv[2], crc=False)
print(json.dumps([time.perf_counter() - t, cpu() - c]))
"""


def lib_pair(path: Path, small: Path, other: Path, repeat: int
             ) -> list[tuple[str, tuple[float, float]]]:
    """``inspect_capture(path, crc=False)`` of another checkout and of this tree, each in a
    fresh process after a warm-up call on the small file ``small`` (imports and the compiled
    loops' load left out), the two interleaved run by run: the best wall of ``repeat`` each,
    with its CPU seconds."""
    here = Path(__file__).resolve().parent.parent
    runs: dict[Path, list] = {other: [], here: []}
    for _ in range(repeat):
        for tree in (other, here):
            out = subprocess.run([sys.executable, "-c", _LIB_CHILD, str(tree), str(path),
                                  str(small)], cwd=tree, check=True, capture_output=True).stdout
            runs[tree].append(tuple(json.loads(out)))
    return [(f"inspect_capture(crc=False), {other.name}", min(runs[other])),
            ("inspect_capture(crc=False), this tree", min(runs[here]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--headers", type=int, default=2_000_000)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scapy-frames", type=int, default=3000)
    ap.add_argument("--skip-slow", action="store_true", help="only tokenpcap and cat")
    ap.add_argument("--against", default=None, help="another checkout's directory")
    a = ap.parse_args()
    d = Path(a.dir)
    # the frame count is in the name: a file kept from a run with other counts is not reused
    full = d / f"tokenpcap-bench-full-{a.frames}.pcap"
    heads = d / f"tokenpcap-bench-headers-{a.headers}.pcap"
    if not full.exists():
        write_trace(full, a.frames)
    if not heads.exists():
        write_long_trace(heads, a.headers, snaplen=64)      # flat memory for multi-GB files
    rows = []
    for name, path, n in (("full-size", full, a.frames), ("headers-only", heads, a.headers)):
        size = path.stat().st_size
        sh(f"cat {path} > /dev/null")
        cat = best(lambda: sh(f"cat {path} > /dev/null"), a.repeat)
        rep = inspect_capture(path)
        assert rep.packets == n and rep.roce["icrc_bad"] == 0 and rep.roce["psn_gaps"] == 0
        results = [("cat > /dev/null", cat),
                   ("tokenpcap inspect", best(lambda: inspect_capture(path), a.repeat)),
                   ("tokenpcap inspect --no-crc",
                    best(lambda: inspect_capture(path, crc=False), a.repeat))]
        if a.against:
            results += lib_pair(path, full, Path(a.against), a.repeat)
            results += cli_pair(path, Path(a.against), a.repeat)
            results += cli_pair(path, Path(a.against), a.repeat, ())
        if not a.skip_slow:
            if shutil.which("tshark"):
                results.append(("tshark -T fields (BTH)", best(lambda: sh(
                    f"tshark -r {path} -T fields -e infiniband.bth.destqp "
                    f"-e infiniband.bth.psn -e infiniband.bth.opcode > /dev/null"), 1)))
            if shutil.which("capinfos"):
                results.append(("capinfos", best(lambda: sh(f"capinfos {path}"), 1)))
            results.append(("dpkt (Python loop)", best(lambda: dpkt_summary(path), 1)))
            k = min(a.scapy_frames, n)
            t = best(lambda: scapy_summary(path, k), 1)
            results.append((f"scapy (first {k}, extrapolated)", (t[0] * n / k, t[1] * n / k)))
        for tool, (t, c) in results:
            rows.append((name, tool, t, c, n / t, size / t / 1e9, t / cat[0]))
    print(f"{'file':13} {'tool':44} {'wall s':>8} {'CPU s':>8} {'frames/s':>13} {'GB/s':>7} "
          f"{'x cat':>7}")
    for name, tool, t, c, fps, gbs, ratio in rows:
        print(f"{name:13} {tool:44} {t:8.3f} {c:8.3f} {fps:13,.0f} {gbs:7.2f} {ratio:7.1f}")
    print(f"(load average at the end: {os.getloadavg()[0]:.1f})")
    print(f"(machine: {os.cpu_count()} CPUs; files in {d}; tshark/capinfos/dpkt: one run each)")


if __name__ == "__main__":
    main()
