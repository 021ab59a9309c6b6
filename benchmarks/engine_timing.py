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

With ``--against TREE`` (a git revision, or the directory of another checkout, e.g. a
``git worktree`` of ``main``), each ``--big`` case is timed in a fresh child process per tree,
the other tree first, then this one, and printed side by side: RDMA messages per CPU second of
``run`` (timing only), the heap's pushes and pops per message (``sc[SEQ]`` counts every push;
every pushed event is popped by the end) and, where the tree counts them
(``Schedule.event_counts``), the events popped per message by kind, the wakes that found their
port's wake moved (stale) or committed no stop slot (empty). Both trees must time the same
messages; the script says so.

A run whose data-parallel replicas are translates of each other (``gpt2-all-cross``) orders the
launches of an instant canonically (:mod:`tokenpcap.schedule.replicas`); the line says so, and
``--big-iterations`` makes such a run long enough to time the order against a tree without it.

Run: ``python benchmarks/engine_timing.py [--scenario NAME --scale K ...] [--big NAME
[--big-scale K] [--big-iterations N] [--big-set KEY=VALUE,...] ...] [--against REV|DIR]
[--repeat N]``
"""
from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# the package of this checkout, or of the tree a child process times (--child TREE)
TREE = sys.argv[sys.argv.index("--child") + 1] if "--child" in sys.argv[:-1] else str(ROOT)
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, TREE)                      # that package, whatever is installed

from common import loadavg, machine, tree_dir  # noqa: E402

from tokenpcap.config.overrides import parse_set  # noqa: E402
from tokenpcap.config.profiles import load_scenario  # noqa: E402
from tokenpcap.lower import Lowering  # noqa: E402
from tokenpcap.plan.build import build_plan  # noqa: E402
from tokenpcap.schedule.engine.events import SEQ  # noqa: E402
from tokenpcap.schedule.reference import ReferenceSchedule  # noqa: E402
from tokenpcap.schedule.runner import Schedule  # noqa: E402


def _sets(text: str) -> dict:
    """``KEY=VALUE,KEY=VALUE`` (``--big-set``; "" none) as ``load_scenario``'s overrides, each
    read as the CLI's ``--set`` reads it (:func:`tokenpcap.config.overrides.parse_set`)."""
    return dict(parse_set(item) for item in filter(None, text.split(",")))


def _scenario(name: str, sets: str = ""):
    path = Path(name)                     # a file, or a bundled name (llama3.1-405b-2048 has a dot)
    bundled = path.suffix not in (".yaml", ".yml")
    return load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml" if bundled else path,
                         _sets(sets))


def _clock():
    return time.process_time(), time.perf_counter()


def _since(c):
    return time.process_time() - c[0], time.perf_counter() - c[1]


def run_new(plan, nics, lower: bool, iterations: int = 1):
    c = _clock()
    # timing only holds the messages in progress, as generate does; all frames keeps every
    # message row (compared with the reference's)
    # every rank timed (a tree with the data-parallel quotient would time one replica of a
    # run that allows it: tokenpcap.schedule.replicas): the engine's rate, not the quotient's
    whole = {"replicas": False} if "replicas" in inspect.signature(Schedule).parameters else {}
    sched = Schedule(plan, iterations=iterations, nics=nics, keep_history=False, keep_nvlink=False,
                     keep_messages=lower, **whole)
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


def run_old(plan, canonical: bool = False):
    c = _clock()
    # the compiled run's order of an instant's launches (canonical when its replicas are
    # translates of each other: tokenpcap.schedule.replicas)
    sched = ReferenceSchedule(plan, iterations=1, canonical=canonical)
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
    old, b3, r3, f3, parts_old = run_old(plan, getattr(new_a, "canonical_order", False))
    n = new_t.n_messages
    ref = row("reference (all frames)", len(old.messages), b3, r3, f3)
    row("compiled, timing only", n, b1, r1, f1, ref)
    row("compiled, all frames", n, b2, r2, f2, ref)
    same = (new_a.messages.tobytes() == old.messages.tobytes()
            and np.concatenate(parts_new).tobytes() == np.concatenate(parts_old).tobytes())
    print(f"  agreement with the reference: {'identical messages and frames' if same else 'DIFFERENT'}")
    if not same:
        raise SystemExit(1)


def big(name: str, scale: int, iterations: int = 1, sets: str = "") -> None:
    s = _scenario(name, sets)
    c = _clock()
    plan = build_plan(s, scale=scale)
    p = _since(c)
    print(f"{s.name} --scale {scale}: {plan.calls_per_iteration:,} calls per iteration (plan {p[0]:.1f} s cpu)")
    sched, b, r, f, _ = run_new(plan, (), lower=False, iterations=iterations)
    row("compiled, timing only", sched.n_messages, b, r, f)


def _warm() -> None:
    warm = build_plan(_scenario("gpt2-all-cross"), scale=64)
    for _ in Schedule(warm, iterations=1).run():
        pass


def child(name: str, scale: int, iterations: int = 1, sets: str = "") -> None:
    """Time one case in this process (the package of ``TREE``): one JSON line on stdout."""
    _warm()
    s = _scenario(name, sets)
    c = _clock()
    plan = build_plan(s, scale=scale)
    p = _since(c)
    sched, b, r, _, _ = run_new(plan, (), lower=False, iterations=iterations)
    counts = getattr(sched, "event_counts", None)
    print(json.dumps({"messages": sched.n_messages, "plan_cpu": p[0], "build_cpu": b[0],
                      "run_cpu": r[0], "run_wall": r[1], "pushed": int(sched._eng.sc[SEQ]),
                      "counts": counts,
                      "canonical": bool(getattr(sched, "canonical_order", False))}))


def _per_message(r: dict) -> str:
    n = max(1, r["messages"])
    heap = 2 * r["pushed"] / n
    text = f"heap push+pop {heap:4.2f}/msg"
    c = r.get("counts")
    if c:
        kinds = ", ".join(f"{k} {c[k] / n:.2f}" for k in ("ack", "arrive", "timer", "wake", "inline")
                          if c.get(k))
        text = (f"heap push+pop {(c['pushed'] + sum(c[k] for k in ('ready', 'ack', 'arrive', 'timer', 'wake', 'hop', 'free', 'pfc'))) / n:4.2f}/msg"
                f" (popped per msg: {kinds}; stale wakes {c['stale_wakes'] / n:.2f}, empty wakes "
                f"{c['empty_wakes'] / n:.2f}, stop slots {c['stops'] / n:.2f})")
    return text


def against(rev: str, bigs, repeat: int) -> None:
    """The ``--big`` cases timed by the other tree and this one, in fresh child processes."""
    here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        trees = [tree_dir(ROOT, rev, tmp), (f"this tree ({here})", ROOT)]
        for name, scale, iters, sets in bigs:
            over = f", {iters} iterations" if iters > 1 else ""
            over += "".join(f" --set {kv}" for kv in filter(None, sets.split(",")))
            print(f"{name} --scale {scale}{over}: timing only, every NIC timed, no frame made")
            seen = set()
            for _ in range(repeat):
                for label, tree in trees:
                    out = subprocess.run([sys.executable, __file__, "--big", name, "--big-scale",
                                          str(scale), "--big-iterations", str(iters),
                                          "--big-set", sets,
                                          "--child", str(tree)],
                                         capture_output=True, text=True, check=True)
                    r = json.loads(out.stdout.strip().splitlines()[-1])
                    seen.add(r["messages"])
                    rate = r["messages"] / r["run_cpu"] if r["run_cpu"] > 0 else float("inf")
                    print(f"  {label:<24} plan {r['plan_cpu']:6.1f} s build {r['build_cpu']:6.1f} s "
                          f"run {r['run_cpu']:7.2f} s cpu {r['run_wall']:7.2f} s wall "
                          f"{r['messages']:>12,} msgs {rate:>11,.0f} msg/s  {_per_message(r)}; "
                          f"{'canonical order; ' if r.get('canonical') else ''}"
                          f"load {loadavg()}")
            print("  both trees timed the same messages" if len(seen) == 1 else
                  f"  DIFFERENT message counts: {sorted(seen)}")
            if len(seen) != 1:
                raise SystemExit(1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", help="scenario both engines run (repeatable)")
    ap.add_argument("--scale", action="append", type=int, help="its --scale (one per --scenario)")
    ap.add_argument("--big", action="append", default=[], help="scenario only the compiled engine runs")
    ap.add_argument("--big-scale", action="append", type=int, help="its --scale (one per --big)")
    ap.add_argument("--big-iterations", action="append", type=int,
                    help="its iterations (one per --big; default 1)")
    ap.add_argument("--big-set", action="append",
                    help="its --set KEY=VALUE,KEY=VALUE ('' none; one per --big, the first ones)")
    ap.add_argument("--against", help="another tree (git revision or checkout directory): the "
                    "--big cases side by side, each in a fresh process")
    ap.add_argument("--repeat", type=int, default=1, help="with --against: rounds of both trees")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    sets = (a.big_set or []) + [""] * len(a.big)
    bigs = list(zip(a.big, a.big_scale or [1] * len(a.big), a.big_iterations or [1] * len(a.big),
                    sets))
    if a.child:
        child(*bigs[0])
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    if a.against:
        against(a.against, bigs, a.repeat)
        if not a.scenario:
            print(f"load after: {loadavg()}")
            return
        bigs = []
    cases = list(zip(a.scenario or ["mixtral-8x7b-ep"], a.scale or [1000]))
    _warm()
    for name, scale in cases:
        compare(name, scale)
    for name, scale, iters, sets in bigs:
        big(name, scale, iters, sets)
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
