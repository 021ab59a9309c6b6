"""The timing engine's message table kept for the whole run against the ring of messages in
progress (``Schedule(keep_messages=True / False)``), side by side: peak memory and CPU of timing.

Per case (a scenario at a ``--scale``, ``--iterations`` iterations; every NIC timed, no frame made,
``Schedule(nics=())`` as ``engine_timing.py``'s "timing only", no timeline or NVLink copies kept),
each mode in a fresh process, one after the other:

* ``build``: the Schedule's construction (plan flattened into the engine's arrays; the kept table
  is allocated here, the ring starts at ``Schedule``'s default 65,536 rows);
* ``run``: the event loop, CPU seconds of the process (``time.process_time``) and wall;
* ``peak RSS``: the process's ``VmHWM`` (``/proc/self/status``) after the run, and ``VmRSS`` after
  the build; ``table``: rows and MiB of the message table at the end.

The compiled engine's first use in a fresh environment compiles it (cached on disk afterwards): each
process times a tiny scenario first, not counted. Both modes must time the same number of messages;
the script checks it.

Run: ``python benchmarks/message_ring.py [--scenario NAME --scale K --iterations I ...] [--ring-only]``
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))                 # this checkout's package, whatever is installed

from common import loadavg, machine  # noqa: E402


def _status(key: str) -> float:
    """GiB of a ``/proc/self/status`` line (``VmHWM``, ``VmRSS``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def child(name: str, scale: int, iterations: int, keep: bool) -> dict:
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.runner import Schedule

    def scenario(n):
        p = Path(n)
        return load_scenario(p if p.suffix else ROOT / "profiles" / "scenarios" / f"{n}.yaml")

    for _ in Schedule(build_plan(scenario("gpt2-all-cross"), scale=64), iterations=1,
                      keep_messages=keep).run():
        pass
    plan = build_plan(scenario(name), scale=scale)
    c = time.process_time()
    sched = Schedule(plan, iterations=iterations, nics=(), keep_history=False, keep_nvlink=False,
                     keep_messages=keep)
    build = time.process_time() - c
    rss_build = _status("VmRSS")
    c, w = time.process_time(), time.perf_counter()
    for _ in sched.run():
        pass
    run, wall = time.process_time() - c, time.perf_counter() - w
    ms = sched._eng.S.ms
    return dict(messages=sched.n_messages, build=build, run=run, wall=wall, rss_build=rss_build,
                peak=_status("VmHWM"), rows=int(ms.shape[0]), mib=ms.nbytes / 2**20)


def case(name: str, scale: int, iterations: int, ring_only: bool = False) -> None:
    print(f"{name} --scale {scale}, {iterations} iteration(s); load {loadavg()}")
    got = {}
    for keep in (False,) if ring_only else (True, False):
        out = subprocess.run([sys.executable, __file__, "--child", name, str(scale), str(iterations),
                              str(int(keep))], capture_output=True, text=True, check=True).stdout
        r = got[keep] = json.loads(out.strip().splitlines()[-1])
        label = "kept table" if keep else "ring (in progress)"
        print(f"  {label:<20} {r['messages']:>12,} msgs  build {r['build']:7.2f} s cpu  run "
              f"{r['run']:7.2f} s cpu {r['wall']:7.2f} s wall  {r['messages'] / max(r['run'], 1e-9):>10,.0f} "
              f"msg/s  RSS after build {r['rss_build']:6.2f} GiB  peak {r['peak']:6.2f} GiB  table "
              f"{r['rows']:>12,} rows {r['mib']:9.1f} MiB")
    if ring_only:
        return
    k, s = got[True], got[False]
    if k["messages"] != s["messages"]:
        raise SystemExit(f"  DIFFERENT message counts: {k['messages']} kept, {s['messages']} ring")
    print(f"  ring / kept: peak RSS {s['peak'] / k['peak']:.2f}x, table {s['mib'] / max(k['mib'], 1e-9):.4f}x, "
          f"run CPU {s['run'] / max(k['run'], 1e-9):.2f}x; load {loadavg()}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", help="scenario (repeatable)")
    ap.add_argument("--scale", action="append", type=int, help="its --scale (one per --scenario)")
    ap.add_argument("--iterations", action="append", type=int, help="its iterations (one per --scenario)")
    ap.add_argument("--ring-only", action="store_true",
                    help="only the ring (a job whose kept table would not fit beside the others)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        name, scale, iterations, keep = a.child
        print(json.dumps(child(name, int(scale), int(iterations), bool(int(keep)))))
        return
    names = a.scenario or ["mixtral-8x7b-ep"]
    scales = a.scale or [1000] * len(names)
    its = a.iterations or [1] * len(names)
    print(machine())
    for n, sc, it in zip(names, scales, its):
        case(n, sc, it, a.ring_only)


if __name__ == "__main__":
    main()
