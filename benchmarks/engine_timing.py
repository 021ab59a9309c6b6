"""The timing engine: messages per second of the compiled engine against the Python reference,
side by side in one run on a scenario both can do, and of the compiled engine alone on the
production jobs only it can do.

Per case (one iteration):

* ``build``: flattening the plan's calls, programs and transfers into the engine's arrays
  (Python, vectorized per call shape), and for the reference its programs;
* ``timing only``: the compiled engine with no NIC materialized (``Schedule(nics=(),
  keep_messages=False)``: every message of every NIC timed, no frame made, only the messages in
  progress held, as ``generate`` does);
* ``all frames``: every NIC's frames made too, and lowered to packet rows (``tokenpcap.lower``):
  what ``generate`` does before building and writing bytes;
* ``reference``: the discrete-event Python engine (``tokenpcap.schedule.reference``), which always
  makes every frame, plus the same lowering.

Columns: CPU seconds of this process (``time.process_time``; other jobs on the machine disturb it
less than the wall clock), wall seconds, RDMA messages (data and clear-to-send) per CPU second,
and the ratio to the reference. The compiled engine's first use in a fresh environment compiles it
(cached on disk afterwards): a warm-up run on a tiny scenario comes first and is not counted. The
compiled and the reference runs must agree exactly (message table and frames); the script checks
it and says so.

Run: ``python benchmarks/engine_timing.py [--scenario NAME --scale K ...] [--big NAME ...]``
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))                 # this checkout's package, whatever is installed

from common import loadavg, machine  # noqa: E402

from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.lower import Lowering  # noqa: E402
from tokenpcap.plan.build import build_plan  # noqa: E402
from tokenpcap.schedule.reference import ReferenceSchedule  # noqa: E402
from tokenpcap.schedule.runner import Schedule  # noqa: E402


def _scenario(name: str):
    path = Path(name)                     # a file, or a bundled name (llama3.1-405b-2048 has a dot)
    bundled = path.suffix not in (".yaml", ".yml")
    return load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml" if bundled else path)


def _clock():
    return time.process_time(), time.perf_counter()


def _since(c):
    return time.process_time() - c[0], time.perf_counter() - c[1]


def run_new(plan, nics, lower: bool):
    c = _clock()
    # timing only holds the messages in progress, as generate does; all frames keeps every
    # message row (compared with the reference's)
    sched = Schedule(plan, iterations=1, nics=nics, keep_history=False, keep_nvlink=False,
                     keep_messages=lower)
    build = _since(c)
    c = _clock()
    frames = 0
    low = Lowering(plan.scenario.cluster, 0, plan.scenario.generation.ack_every_packets) if lower else None
    parts = []
    for tx in sched.run():
        frames += tx.size
        if low is not None:
            low(tx, sched.message_index)
            parts.append(tx)
    run = _since(c)
    return sched, build, run, frames, parts


def run_old(plan):
    c = _clock()
    sched = ReferenceSchedule(plan, iterations=1)
    build = _since(c)
    c = _clock()
    low = Lowering(plan.scenario.cluster, 0, plan.scenario.generation.ack_every_packets)
    frames, parts = 0, []
    for tx in sched.run():
        frames += tx.size
        low(tx, sched.messages)
        parts.append(tx)
    run = _since(c)
    return sched, build, run, frames, parts


def row(label, msgs, build, run, frames, ref_rate=None):
    rate = msgs / run[0] if run[0] > 0 else float("inf")
    ratio = f"{rate / ref_rate:8.1f}x" if ref_rate else "       -"
    print(f"  {label:<28} build {build[0]:7.2f} s cpu  run {run[0]:8.2f} s cpu {run[1]:8.2f} s wall  "
          f"{msgs:>12,} msgs {frames:>13,} frames  {rate:>12,.0f} msg/s {ratio}")
    return rate


def compare(name: str, scale: int) -> None:
    s = _scenario(name)
    plan = build_plan(s, scale=scale)
    print(f"{s.name} --scale {scale}: {plan.calls_per_iteration:,} calls per iteration")
    new_t, b1, r1, f1, _ = run_new(plan, (), lower=False)
    new_a, b2, r2, f2, parts_new = run_new(plan, None, lower=True)
    old, b3, r3, f3, parts_old = run_old(plan)
    n = new_t.n_messages
    ref = row("reference (all frames)", len(old.messages), b3, r3, f3)
    row("compiled, timing only", n, b1, r1, f1, ref)
    row("compiled, all frames", n, b2, r2, f2, ref)
    same = (new_a.messages.tobytes() == old.messages.tobytes()
            and np.concatenate(parts_new).tobytes() == np.concatenate(parts_old).tobytes())
    print(f"  agreement with the reference: {'identical messages and frames' if same else 'DIFFERENT'}")
    if not same:
        raise SystemExit(1)


def big(name: str, scale: int) -> None:
    s = _scenario(name)
    c = _clock()
    plan = build_plan(s, scale=scale)
    p = _since(c)
    print(f"{s.name} --scale {scale}: {plan.calls_per_iteration:,} calls per iteration (plan {p[0]:.1f} s cpu)")
    sched, b, r, f, _ = run_new(plan, (), lower=False)
    row("compiled, timing only", sched.n_messages, b, r, f)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", help="scenario both engines run (repeatable)")
    ap.add_argument("--scale", action="append", type=int, help="its --scale (one per --scenario)")
    ap.add_argument("--big", action="append", default=[], help="scenario only the compiled engine runs")
    ap.add_argument("--big-scale", action="append", type=int, help="its --scale (one per --big)")
    a = ap.parse_args(argv)
    cases = list(zip(a.scenario or ["mixtral-8x7b-ep"], a.scale or [1000]))
    bigs = list(zip(a.big, a.big_scale or [1] * len(a.big)))
    print(f"{machine()}; load {loadavg()}")
    warm = build_plan(_scenario("gpt2-all-cross"), scale=64)
    for _ in Schedule(warm, iterations=1).run():
        pass
    for name, scale in cases:
        compare(name, scale)
    for name, scale in bigs:
        big(name, scale)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
