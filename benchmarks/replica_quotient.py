"""One data-parallel replica timed for all (``Schedule(replicas=True)``,
:mod:`tokenpcap.schedule.replicas`) against every rank timed, side by side in one process, on a
job whose replicas are translates of each other (``gpt2-all-cross`` by default).

Per case (alternating, ``--repeat`` rounds): the schedule's build (CPU s) and its run (CPU s of
this process, ``time.process_time``), the messages the engine timed and the frames of the
selected NICs it handed out; both ways must hand out the same number of frames (the capture's
bytes are compared in ``tests/schedule/test_replicaview.py``). With no ``--nics`` no frame is
made (the engine alone: what ``plan --time`` does); with ``--nics 0`` the frames of NIC 0 too
(what ``generate --nics 0`` times before lowering), which through the quotient also get their
real peers (``ScheduleResults._real_peers``). Both runs order an instant's launches canonically.

Run: ``python benchmarks/replica_quotient.py [--scenario NAME] [--scale K] [--iterations N]
[--nics LIST] [--repeat R]``
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import loadavg, machine  # noqa: E402

from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.plan.build import build_plan  # noqa: E402
from tokenpcap.schedule.runner import Schedule  # noqa: E402


def one(plan, iterations: int, nics: list[int], replicas: bool) -> tuple:
    c = time.process_time()
    s = Schedule(plan, iterations=iterations, nics=nics, keep_messages=False, keep_history=False,
                 keep_nvlink=False, replicas=replicas)
    build = time.process_time() - c
    c = time.process_time()
    frames = sum(x.size for x in s.run())
    return s, build, time.process_time() - c, frames


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="gpt2-all-cross")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--nics", default="", help="NICs whose frames are made, e.g. 0 (none: timing only)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    nics = [int(x) for x in a.nics.split(",") if x]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{a.scenario}.yaml"),
                      scale=a.scale)
    one(plan, 1, nics, True)                           # the engine compiled or loaded first
    print(f"{a.scenario} --scale {a.scale}, {a.iterations} iterations, frames of NICs "
          f"{nics or 'none'}")
    seen = set()
    for _ in range(a.repeat):
        for replicas in (True, False):
            s, build, run, frames = one(plan, a.iterations, nics, replicas)
            seen.add(frames)
            label = "one replica (quotient)" if s.replica_view is not None else "every rank"
            rate = s.n_messages / run if run > 0 else float("inf")
            print(f"  {label:<24} build {build:6.2f} s run {run:6.2f} s cpu {s.n_messages:>12,} "
                  f"msgs {rate:>11,.0f} msg/s {frames:>12,} frames  canonical "
                  f"{s.canonical_order}; load {loadavg()}")
    print("  both handed out the same frames" if len(seen) == 1 else
          f"  DIFFERENT frame counts: {sorted(seen)}")
    if len(seen) != 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
