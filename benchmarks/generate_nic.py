"""Full-size frames of one NIC of a big job against a plain write of the same bytes to the same
disk, with the timing of the whole job done first.

    python benchmarks/generate_nic.py [--scenario NAME] [--scale K] [--nic N] [--dir PATH]
                                      [--snaplen N] [--without-drop-behind]

Three phases, each timed on its own (CPU seconds of this process and wall seconds):

1. **timing**: plan, flat build and the compiled engine over every message of the job, frames
   made only for NIC ``--nic`` (``tokenpcap.pipeline.prepare`` with ``nics={N}``, as ``generate
   --nics N`` does, the same work limits), and those frames lowered to packet rows
   (``tokenpcap.lower.Lowering``, times moved to ``generate``'s epoch). The rows are kept in memory.
2. **frames**: the rows sent chunk by chunk to the sink ``generate`` writes through
   (``generate.output.Dispatcher`` with one classic pcap file: one file has its writer in this
   process, as in ``generate``): frames built (headers, ICRC) and written; timed until the file
   is closed and until ``os.fsync`` returned. With ``--without-drop-behind``, the frames are
   written a second time with the writers' drop-behind turned off (``tokenpcap.pcap.dropbehind``:
   the writer as it was before it), right after the first: the writer before and after side by
   side, the one without on the warmer page cache.
3. **plain write**: the same number of bytes from one prepared buffer (``common.plain_write``) to
   the same directory, timed the same way;
4. **plain write, drop-behind**: the same, with the page-cache discipline the capture writers use
   for a file past 1 GiB (``tokenpcap.pcap.dropbehind``: each 64 MiB region written back and
   released as the file grows), so that the frames can be compared with both.

The frames are written first, on a page cache the timing phase left, and the plain writes after
them: of a process's big writes the first pays most for fresh page-cache pages (on a virtual
machine whose free memory goes back to its host, most of all), so this order favours the plain
writes.

Printed: each phase (CPU split into user and system), the file's records and bytes (checked
against the rows: 24-byte header plus 16 bytes and the kept frame bytes per record), and the
ratios frames / plain write for both plain writes. Files are
removed when measured. Peak RSS of the process at the end.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import drop_file, fs_info, fsync_path, loadavg, machine, plain_write  # noqa: E402

from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.generate.output import Dispatcher, FileSpec, WriterConfig  # noqa: E402
from tokenpcap.generate.run import EPOCH_NS  # noqa: E402
from tokenpcap.lower import Lowering  # noqa: E402
from tokenpcap.pcap import dropbehind  # noqa: E402
from tokenpcap.pipeline import prepare  # noqa: E402

_PCAP_HEADER_BYTES, _RECORD_HEADER_BYTES = 24, 16


def _user_sys() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _split(before: tuple[float, float]) -> str:
    u, s = _user_sys()
    return f"(user {u - before[0]:.1f}, sys {s - before[1]:.1f})"


def _clock():
    return time.process_time(), time.perf_counter()


def _since(c):
    return time.process_time() - c[0], time.perf_counter() - c[1]


def timing(s, scale: int, nic: int) -> tuple[list[np.ndarray], tuple[float, float], int]:
    """Phase 1: the packet rows of ``nic`` (list of PACKET_DTYPE chunks), (cpu, wall) s, messages."""
    c = _clock()
    _, _, sched = prepare(s, scale=scale, iterations=1, nics={nic}, keep_nvlink=False,
                          keep_history=False, keep_messages=False, chunk_rows=1 << 16)   # as generate
    lower = Lowering(s.cluster, s.generation.seed, s.generation.ack_every_packets)
    rows = []
    for tx in sched.run():
        keep = tx[tx["nic"] == nic]
        if keep.size:
            pk = lower(keep, sched.message_index)
            pk["time_ns"] += EPOCH_NS
            rows.append(pk)
    return rows, _since(c), sched.n_messages


def write_frames(path: Path, rows: list[np.ndarray], s, snaplen: int, drop_behind: bool = True
                 ) -> tuple[int, int, float, float, float]:
    """Phase 2: ``(records, bytes, s until close, s until fsync, cpu s)``; ``drop_behind=False``
    turns the writers' drop-behind off for this file (the writer is in this process)."""
    available, dropbehind.AVAILABLE = dropbehind.AVAILABLE, dropbehind.AVAILABLE and drop_behind
    try:
        return _write_frames(path, rows, s, snaplen)
    finally:
        dropbehind.AVAILABLE = available


def _write_frames(path: Path, rows: list[np.ndarray], s, snaplen: int
                  ) -> tuple[int, int, float, float, float]:
    cfg = WriterConfig(cluster=s.cluster, fmt="pcap", snaplen=snaplen, payload_seed=s.generation.seed)
    c0, t0 = time.process_time(), time.perf_counter()
    disp = Dispatcher([FileSpec(path, (int(rows[0]["nic"][0]),))], cfg, jobs=1)
    try:
        for pk in rows:
            disp.send(0, pk, None, None)
        (records, nbytes), = disp.close()
    except BaseException:
        disp.abort()
        raise
    t1 = time.perf_counter()
    fsync_path(path)
    return records, nbytes, t1 - t0, time.perf_counter() - t0, time.process_time() - c0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="llama3-70b-64n", help="bundled scenario or a path")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--nic", type=int, default=0)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "generate_nic")
    ap.add_argument("--snaplen", type=int, default=262144, help="262144 keeps every frame whole")
    ap.add_argument("--without-drop-behind", action="store_true",
                    help="also write the frames with the writers' drop-behind off (before/after)")
    a = ap.parse_args(argv)
    p = Path(a.scenario)
    s = load_scenario(p if p.suffix else ROOT / "profiles" / "scenarios" / f"{a.scenario}.yaml")
    a.dir.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    print(f"{s.name} --scale {a.scale}: NIC {a.nic}, snaplen {a.snaplen}, into {a.dir} "
          f"({fs_info(a.dir)})")
    rows, (cpu, wall), msgs = timing(s, a.scale, a.nic)
    n = sum(r.size for r in rows)
    if not n:
        raise SystemExit(f"NIC {a.nic} sends no frame in {s.name}")
    held = sum(r.nbytes for r in rows)
    print(f"  timing (plan, build, every message, NIC {a.nic} lowered) {cpu:8.1f} s cpu {wall:8.1f} s "
          f"wall  {msgs:,} messages, {n:,} frames of NIC {a.nic} ({held / 2**20:,.0f} MiB of rows)")
    path = a.dir / f"{s.name}_nic{a.nic}.pcap"
    try:
        us = _user_sys()
        records, nbytes, w_close, w_sync, w_cpu = write_frames(path, rows, s, a.snaplen)
        kept = np.minimum(np.concatenate([r["frame_bytes"] for r in rows]).astype(np.int64), a.snaplen)
        want = _PCAP_HEADER_BYTES + n * _RECORD_HEADER_BYTES + int(kept.sum())
        ok = records == n and nbytes == want == path.stat().st_size
        print(f"  frames (build + write)   {w_cpu:8.1f} s cpu {w_close:8.1f} s to close {w_sync:8.1f} s to "
              f"fsync  {records:,} records, {nbytes:,} bytes "
              f"({'as the rows say' if ok else f'EXPECTED {n:,} records, {want:,} bytes'}) "
              f"{_split(us)}; load {loadavg()}")
        if a.without_drop_behind:
            drop_file(path, sync=True)
            us = _user_sys()
            _, _, o_close, o_sync, o_cpu = write_frames(path, rows, s, a.snaplen, drop_behind=False)
            print(f"  frames, no drop-behind   {o_cpu:8.1f} s cpu {o_close:8.1f} s to close {o_sync:8.1f} s to "
                  f"fsync  {path.stat().st_size:,} bytes {_split(us)}; load {loadavg()}")
        for name, behind in (("plain write (same bytes)", False), ("plain write, drop-behind", True)):
            drop_file(path, sync=True)
            us = _user_sys()
            p_close, p_sync, p_cpu = plain_write(path, nbytes, drop_behind=behind)
            print(f"  {name} {p_cpu:8.1f} s cpu {p_close:8.1f} s to close {p_sync:8.1f} s to "
                  f"fsync  {nbytes / p_sync / 1e6:,.0f} MB/s on the device {_split(us)}")
            print(f"  ratio frames / {name.split(' (')[0]}: {w_close / p_close:.2f}x to close, "
                  f"{w_sync / p_sync:.2f}x to fsync ({nbytes / w_sync / 1e6:,.0f} MB/s of frames); "
                  f"load {loadavg()}")
            if a.without_drop_behind:
                print(f"  ratio frames without drop-behind / {name.split(' (')[0]}: "
                      f"{o_close / p_close:.2f}x to close, {o_sync / p_sync:.2f}x to fsync")
        if not ok:
            raise SystemExit(1)
    finally:
        drop_file(path, sync=False)
    print(f"  peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")


if __name__ == "__main__":
    main()
