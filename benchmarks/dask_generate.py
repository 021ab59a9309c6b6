"""generate on a Dask LocalCluster against ``--jobs 1``, side by side in one run, and what the
measured per-shard cost projects for a whole production iteration on a real cluster.

Cases (one scenario, ``--iterations`` iterations, every NIC's file, pcapng):

* ``jobs 1``: :func:`tokenpcap.generate.run.generate` in this process, one writer. Every case
  starts and ends with ``os.sync()`` (timed: until the files are on disk).
* ``dask local:N``: :func:`tokenpcap.generate.distributed.generate_on_cluster` on a LocalCluster
  of N worker processes (one thread each), one shard per worker; the cluster's start is timed
  apart. The two sets of files are compared byte for byte.
* ``overhead``: what a shard costs besides writing its files: the scheduler's round trip of an
  empty task (``--noops`` of them), and the re-timing every shard repeats (plan, build and
  timing of every message without frames, ``prepare(nics=())``).
* ``ship the timing instead``: the timed message table (every message with its times) saved
  with ``numpy.save`` and loaded back, the cost a shard would pay to read a timing computed once.
* ``projection``: ``--project`` (default GPT-3 175B, 1,024 GPUs) on ``--workers-projected``
  workers: the capture's bytes from the plan's size estimate (:mod:`tokenpcap.plan.sizing`) split
  over the workers, at the write rate one worker reached here, plus each shard's re-timing of
  that job at the rate (messages per CPU second, plan and build included) measured on
  ``--rate-scenario``.

Run: ``python benchmarks/dask_generate.py [--scenario gpt2-all-cross --iterations 2 --workers 2
--out /work/tmp/NAME]``; it deletes what it writes.
"""
from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import loadavg, machine
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.distributed import generate_on_cluster
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.pipeline import prepare
from tokenpcap.plan.build import build_plan


def _noop(i: int) -> int:
    return i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="gpt2-all-cross")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--noops", type=int, default=200)
    ap.add_argument("--rate-scenario", default="mixtral-8x7b-ep-64",
                    help="scenario whose re-timing (plan, build, timing) gives the messages/s of "
                         "the projection")
    ap.add_argument("--project", default="gpt3-175b-megatron")
    ap.add_argument("--workers-projected", type=int, default=64)
    ap.add_argument("--out", default=None, help="scratch directory (default: a temporary one)")
    a = ap.parse_args()
    from distributed import Client, LocalCluster

    print(f"machine: {machine()}; load {loadavg()}")
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{a.scenario}.yaml")
    base = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="dask-bench-"))
    one, many = base / "jobs1", base / "dask"
    for d in (one, many):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    try:
        os.sync()                          # each case starts with no dirty page and ends
        t = time.perf_counter()            # when its files are on disk (os.sync included)
        r1 = generate(s, GenerateOptions(out_dir=one, scale=a.scale, iterations=a.iterations, jobs=1))
        os.sync()
        t_one = time.perf_counter() - t
        print(f"{a.scenario} --scale {a.scale} --iterations {a.iterations}: "
              f"{len(r1.files)} files, {r1.packets:,} packets, {r1.file_bytes / 1e9:.2f} GB; "
              f"load {loadavg()}")
        print(f"  jobs 1            {t_one:8.1f} s wall  {r1.file_bytes / t_one / 1e6:7.1f} MB/s")
        t = time.perf_counter()
        with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            t_start = time.perf_counter() - t
            t = time.perf_counter()       # first use on each worker: imports, compiled engine
            warm = many / "warm-up"
            warm.mkdir()
            generate_on_cluster(s, GenerateOptions(out_dir=warm, scale=1 << 20), client)
            shutil.rmtree(warm)
            t_warm = time.perf_counter() - t
            os.sync()
            t = time.perf_counter()
            rd = generate_on_cluster(s, GenerateOptions(out_dir=many, scale=a.scale,
                                                        iterations=a.iterations), client)
            os.sync()
            t_dask = time.perf_counter() - t
            t = time.perf_counter()
            client.gather(client.map(_noop, range(a.noops), pure=False))
            t_noop = (time.perf_counter() - t) / a.noops
        same = [p.name for p, _, _ in r1.files] == [p.name for p, _, _ in rd.files] and all(
            filecmp.cmp(p, many / p.name, shallow=False) for p, _, _ in r1.files)
        print(f"  dask local:{a.workers}      {t_dask:8.1f} s wall  "
              f"{rd.file_bytes / t_dask / 1e6:7.1f} MB/s  speed-up {t_one / t_dask:.2f}x "
              f"(cluster start {t_start:.1f} s and warm-up {t_warm:.1f} s apart); files identical: {same}; load {loadavg()}")
    finally:
        shutil.rmtree(one, ignore_errors=True)
        shutil.rmtree(many, ignore_errors=True)

    # --- what a shard pays besides its own files: re-timing, or reading a shipped timing ---
    def retime(sc, scale):
        """Plan, build and time every message: (prepared, wall s, CPU s of this process)."""
        t, c = time.perf_counter(), time.process_time()
        p = prepare(sc, scale=scale, iterations=a.iterations, nics=())
        for _ in p.schedule.run():
            pass
        return p, time.perf_counter() - t, time.process_time() - c

    p, t_retime, _ = retime(s, a.scale)
    msgs = p.schedule.messages
    path = base / "timing.npy"
    t = time.perf_counter()
    np.save(path, msgs)
    t_save = time.perf_counter() - t
    t = time.perf_counter()
    back = np.load(path)
    t_load = time.perf_counter() - t
    assert (back == msgs).all()
    path.unlink()
    rs = load_scenario(ROOT / "profiles" / "scenarios" / f"{a.rate_scenario}.yaml")
    pr, t_rate, c_rate = retime(rs, 1000)
    n_rate = pr.schedule.n_messages
    rate = n_rate / c_rate        # per CPU second: what a dedicated worker gets
    del pr
    print(f"  per shard: scheduler round trip {t_noop * 1e3:.1f} ms; re-timing the job "
          f"{t_retime:.2f} s ({len(msgs):,} messages); {a.rate_scenario}: "
          f"{rate:,.0f} messages per CPU second incl. plan and build "
          f"({n_rate:,} messages, {c_rate:.1f} s CPU, {t_rate:.1f} s wall)")
    print(f"  ship the timing instead: {msgs.nbytes / 1e6:.1f} MB of timed messages, "
          f"save {t_save:.2f} s once + load {t_load:.2f} s per shard "
          f"(and the frames must still be replayed through the link model); re-timing is "
          f"{t_retime / max(t_dask, 1e-9) * a.workers:.0%} of a shard's wall here")
    if base.exists() and not a.out:
        shutil.rmtree(base, ignore_errors=True)

    # --- projection -------------------------------------------------------------------------
    g = load_scenario(ROOT / "profiles" / "scenarios" / f"{a.project}.yaml")
    t = time.perf_counter()
    plan = build_plan(g, None)
    t_plan = time.perf_counter() - t
    est = plan.pcap
    w = a.workers_projected
    write_rate = rd.file_bytes / a.workers / max(t_dask - t_retime, 1e-9)   # bytes/s per worker
    retime = int(est["messages"]) / rate
    per_worker = int(est["file_bytes"]) / w / write_rate
    print(f"projection: {a.project} one iteration, {est['file_bytes'] / 1e12:.1f} TB, "
          f"{est['messages']:,} messages (plan estimate, built in {t_plan:.1f} s), on {w} workers: "
          f"re-timing {retime / 60:.1f} min per shard + {per_worker / 3600:.2f} h writing "
          f"{est['file_bytes'] / w / 1e9:,.0f} GB per worker at {write_rate / 1e6:.0f} MB/s "
          f"(one worker's rate here) = {(retime + per_worker) / 3600:.2f} h wall, given a "
          f"file system that takes {w * write_rate / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
