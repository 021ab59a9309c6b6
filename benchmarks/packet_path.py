"""The packet path of ``tokenpcap generate`` (everything after the timing: selecting, lowering,
comments, building and writing the selected NICs' frames) apart from the timing, for this tree
and, side by side in the same run, another checkout (``--base``, e.g. a worktree of main).

    python benchmarks/packet_path.py [--scenario NAME] [--scale K] [--iterations N]
                                     [--nics 0-7] [--snaplen N] [--format pcap] [--jobs J]
                                     [--base PATH] [--repeat R] [--dir PATH]

Each tree runs in fresh processes (``cwd`` and ``sys.path`` at that tree, so each imports its own
``tokenpcap``), alternating tree by tree ``--repeat`` times, two measurements each:

1. **timing**: what ``generate`` does before its first packet, the same calls with the same
   arguments: ``tokenpcap.pipeline.prepare`` (plan, flat build, the engine's state; frames only
   for ``--nics``), ``tokenpcap.generate.size.predict_capture``, and ``Schedule.run()`` drained
   (every message of the job timed, the selected NICs' frames handed out and dropped).
2. **generate**: ``tokenpcap.generate.run.generate`` with the same options into ``--dir``.

CPU seconds are user + system of the process and of its writer processes
(``getrusage(RUSAGE_SELF)`` + ``RUSAGE_CHILDREN``). The packet path is **generate - timing**:
its CPU seconds and its packets per CPU-second (and per wall second of the difference). The
same path is also measured **directly** in the generate process, without a difference of two
processes (which moves by tenths of a second on a loaded machine): the main thread's CPU
(``time.thread_time``) inside ``route_chunk`` and the ``Dispatcher``'s start and close, plus the
CPU of every other thread of the process (queue feeders, writer threads), plus the writer
processes'; the best of the repeats is printed per tree. Its wall clock is measured directly
too (``path wall s``): from the start of the ``Dispatcher`` (the writer processes forked) to
the last file closed, less the wall clock the main thread spent inside ``Schedule.run``'s
``next`` meanwhile (the engine timing the job), so what is left is the wall the packet path
adds to the run, the writers working beside the parent on the machine's cores; only
meaningful on an otherwise idle machine. The best (lowest) of the repeats is printed per tree, with the load average, then a plain write of
the same number of bytes (the files ``generate`` wrote) into ``--dir``
(``common.plain_write``, until close; best of the repeats): the physical limit. numba compiles the
engine once per checkout (its cache lies beside the sources): run a tree once before measuring
it, or take ``--repeat 2``, since the first timing of a fresh checkout includes the compile.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import loadavg, machine, plain_write  # noqa: E402

#: What one measurement runs in a fresh process at the tree's root (argv: mode, JSON options).
_DRIVER = r'''
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, ".")
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.run import GenerateOptions, Selection, generate, parse_index_set

mode, a = sys.argv[1], json.loads(sys.argv[2])
s = load_scenario(a["scenario"])
n_nics = s.cluster.nodes * s.cluster.nics_per_node
nics = parse_index_set(a["nics"], "--nics", n_nics) if a["nics"] else None
sel = Selection(nics=nics)
opt = GenerateOptions(out_dir=Path(a["out"]), fmt=a["fmt"], snaplen=a["snaplen"],
                      scale=a["scale"], iterations=a["iterations"], selection=sel,
                      jobs=a["jobs"], force=True)


def cpu(who=None):
    if who is not None:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime
    return cpu(resource.RUSAGE_SELF) + cpu(resource.RUSAGE_CHILDREN)


c, t, ch = cpu(), time.perf_counter(), cpu(resource.RUSAGE_CHILDREN)
if mode == "timing":
    from tokenpcap.generate.size import predict_capture
    from tokenpcap.pipeline import prepare
    _, plan, sched = prepare(s, scale=opt.scale, iterations=a["iterations"], keep_nvlink=False,
                             keep_history=False, keep_messages=False, chunk_rows=1 << 16,
                             nics=sel.nics, ranks=sel.ranks, point=opt.point)
    predict_capture(sched, sel, opt.fmt, opt.snaplen, opt.split, opt.point)
    frames = sum(tx.size for tx in sched.run())
    packets = 0
    direct = path_wall = 0.0
else:
    # the path measured directly too: the main thread's CPU in route_chunk and in the
    # Dispatcher's start and close, plus every other thread's CPU (queue feeders, writer
    # threads); the writer processes are added below
    import tokenpcap.generate.run as run_mod
    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kw):
            t0 = time.thread_time()
            try:
                return fn(*args, **kw)
            finally:
                spent[0] += time.thread_time() - t0
        return wrapper

    run_mod.route_chunk = timed(run_mod.route_chunk)
    D = run_mod.Dispatcher
    D.__init__, D.close = timed(D.__init__), timed(D.close)
    # the path's wall clock: from the writers' start to the last file closed, less the wall
    # spent in the engine (inside Schedule.run's next) meanwhile
    from tokenpcap.schedule.runner import Schedule
    span, engine = [None, 0.0], [0.0]

    def ended(fn):
        def wrapper(*args, **kw):
            try:
                return fn(*args, **kw)
            finally:
                span[1] = time.perf_counter()
        return wrapper

    init0 = D.__init__

    def init(self, *args, **kw):
        span[0] = time.perf_counter()
        return init0(self, *args, **kw)

    D.__init__, D.close = init, ended(D.close)
    run0 = Schedule.run

    def run(self):
        it = run0(self)
        while True:
            t0 = time.perf_counter()
            try:
                tx = next(it)
            except StopIteration:
                engine[0] += time.perf_counter() - t0
                return
            engine[0] += time.perf_counter() - t0
            yield tx

    Schedule.run = run
    main0 = time.thread_time()
    res = generate(s, opt)
    others = (cpu(resource.RUSAGE_SELF) - c + ch) - (time.thread_time() - main0)
    direct = spent[0] + max(others, 0.0)
    path_wall = span[1] - span[0] - engine[0]
    frames, packets = 0, res.packets
print(json.dumps(dict(cpu=cpu() - c, wall=time.perf_counter() - t, frames=int(frames),
                      writers_cpu=cpu(resource.RUSAGE_CHILDREN) - ch,
                      parent_path_cpu=direct, path_wall=path_wall,
                      packets=int(packets),
                      rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)))
'''


def _measure(tree: Path, mode: str, args: dict) -> dict:
    out = Path(args["out"])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        proc = subprocess.run([sys.executable, "-c", _DRIVER, mode, json.dumps(args)], cwd=tree,
                              capture_output=True, text=True)
        nbytes = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tree} {mode} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), bytes=nbytes)


def _plain(directory: Path, nbytes: int) -> dict:
    """A plain write of ``nbytes`` to a new file in ``directory`` (common.plain_write), deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "plain.bin"
    try:
        wall, _, cpu = plain_write(path, nbytes)
    finally:
        path.unlink(missing_ok=True)
    return dict(wall=wall, cpu=cpu)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="dante", help="bundled scenario or a path")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--nics", default="", help="as generate --nics (indices); default every NIC")
    ap.add_argument("--snaplen", type=int, default=74)
    ap.add_argument("--format", dest="fmt", default="pcap")
    ap.add_argument("--jobs", type=int, default=2, help="writer processes (generate -j)")
    ap.add_argument("--base", type=Path, help="another checkout to measure beside this one")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "packet_path")
    a = ap.parse_args(argv)
    p = Path(a.scenario)
    scen = p.resolve() if p.suffix else ROOT / "profiles" / "scenarios" / f"{a.scenario}.yaml"
    args = dict(scenario=str(scen), scale=a.scale, iterations=a.iterations, nics=a.nics,
                snaplen=a.snaplen, fmt=a.fmt, jobs=a.jobs, out=str(a.dir / "out"))
    trees = [("this tree", ROOT)] + ([("base", a.base.resolve())] if a.base else [])
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    print(f"{scen.stem} --scale {a.scale} --iterations {a.iterations} --nics {a.nics or 'all'} "
          f"--snaplen {a.snaplen} --format {a.fmt} -j {a.jobs}")
    best: dict[str, dict] = {}
    for _ in range(max(1, a.repeat)):
        for name, tree in trees:
            tm, gen = _measure(tree, "timing", args), _measure(tree, "generate", args)
            if tm["frames"] != gen["packets"]:
                raise SystemExit(f"{name}: timing handed out {tm['frames']:,} frames, generate "
                                 f"wrote {gen['packets']:,} packets (expected equal: --nics only)")
            r = dict(timing_cpu=tm["cpu"], timing_wall=tm["wall"], gen_cpu=gen["cpu"],
                     gen_wall=gen["wall"], packets=gen["packets"], rss=gen["rss_gib"],
                     writers_cpu=gen["writers_cpu"],
                     path_cpu=gen["cpu"] - tm["cpu"], path_wall=gen["wall"] - tm["wall"],
                     direct_cpu=gen["parent_path_cpu"] + gen["writers_cpu"],
                     direct_parent=gen["parent_path_cpu"],
                     direct_wall=gen["path_wall"],
                     bytes=gen["bytes"])
            # a repeat whose timing compiled the engine (a fresh checkout) shows a negative path
            if name not in best or 0 < r["path_cpu"] < best[name]["path_cpu"] \
                    or best[name]["path_cpu"] <= 0:
                best[name] = dict(r, direct_cpu=best.get(name, r)["direct_cpu"],
                                  direct_parent=best.get(name, r)["direct_parent"],
                                  direct_wall=best.get(name, r)["direct_wall"])
            if r["direct_cpu"] < best[name]["direct_cpu"]:      # the direct measure's own best
                best[name].update(direct_cpu=r["direct_cpu"], direct_parent=r["direct_parent"])
            best[name]["direct_wall"] = min(best[name]["direct_wall"], r["direct_wall"])
        pl = _plain(a.dir, next(iter(best.values()))["bytes"])
        if "plain" not in best or pl["wall"] < best["plain"]["wall"]:
            best["plain"] = pl
    print(f"{'':10} {'timing cpu s':>12} {'generate cpu s':>14} {'wall s':>7} "
          f"{'packet path cpu s':>17} {'packets/cpu-s':>13} {'packets/wall-s':>14} "
          f"{'of it writers':>13} {'packets':>11} {'peak RSS GiB':>12} "
          f"{'direct: path cpu s':>18} {'parent':>6} {'packets/cpu-s':>13} "
          f"{'path wall s':>11} {'packets/wall-s':>14}")
    plain = best.pop("plain")
    for name, r in best.items():
        per_cpu = r["packets"] / r["path_cpu"] if r["path_cpu"] > 0 else float("nan")
        per_wall = r["packets"] / r["path_wall"] if r["path_wall"] > 0 else float("nan")
        print(f"{name:10} {r['timing_cpu']:12.1f} {r['gen_cpu']:14.1f} {r['gen_wall']:7.1f} "
              f"{r['path_cpu']:17.2f} {per_cpu:13,.0f} {per_wall:14,.0f} {r['writers_cpu']:13.2f} "
              f"{r['packets']:11,} "
              f"{r['rss']:12.2f} {r['direct_cpu']:18.2f} {r['direct_parent']:6.2f} "
              f"{r['packets'] / max(r['direct_cpu'], 1e-9):13,.0f} {r['direct_wall']:11.2f} "
              f"{r['packets'] / max(r['direct_wall'], 1e-9):14,.0f}")
    nbytes = next(iter(best.values()))["bytes"]
    print(f"plain write of the same {nbytes:,} bytes to {a.dir} (best of {max(1, a.repeat)}): "
          f"{plain['wall']:.2f} s wall, {plain['cpu']:.2f} s CPU, "
          f"{nbytes / max(plain['wall'], 1e-9) / 1e9:.2f} GB/s until close")
    print(f"load {loadavg()}")


if __name__ == "__main__":
    main()
