"""The timing engine's memory per collective call (``tokenpcap.schedule.limits.CALL_STATE_BYTES``):
this checkout against another git revision, side by side in one run.

    python benchmarks/call_state.py [--scenario NAME] [--scale K] [--against REV|none]

Each (tree, iterations) case runs in a fresh child process: the plan is built first (its RSS is
the baseline), then ``Schedule(plan, iterations=k, nics=[0], keep_nvlink=False)`` is built (the
flat build of every iteration and the engine's arrays: what a run holds before it times
anything, and the peak of its making). For ``k = 1`` and ``k = 2`` the child reports its peak RSS
above the baseline and the RSS it still holds. The second iteration's share is the difference;
taking out its RDMA messages and NVLink copies at the limits' own per-message and per-copy
costs (``MESSAGE_STATE_BYTES``, ``COPY_STATE_BYTES`` of the tree measured) leaves what its
calls cost, divided by the calls of an iteration: bytes per call at the peak and held. A
scenario of many calls and few messages per call (the default, Llama-3 70B on 64 nodes at
``--scale 1000``: 883,145 calls, 565,982 messages per iteration) keeps that remainder large
against the message term. The other revision's ``tokenpcap`` is extracted with ``git archive``.
"""
from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import loadavg, machine  # noqa: E402


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(tree: str, name: str, scale: int, iterations: int) -> None:
    """Build the Schedule of ``iterations`` iterations of ``name`` with the package of ``tree``;
    print JSON."""
    sys.path.insert(0, tree)
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule import limits
    from tokenpcap.schedule.runner import Schedule

    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    plan = build_plan(s, scale=scale)
    work = limits.estimate_work(plan, iterations)
    gc.collect()
    base = _rss()
    c0 = time.process_time()
    sched = Schedule(plan, iterations=iterations, nics=[0], keep_nvlink=False)
    cpu = time.process_time() - c0
    gc.collect()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"cpu": cpu, "peak": peak - base, "held": _rss() - base,
                      "calls": sched.n_calls if hasattr(sched, "n_calls") else work.calls,
                      "messages": work.messages, "copies": work.nvlink_copies,
                      "message_bytes": limits.MESSAGE_STATE_BYTES,
                      "copy_bytes": limits.COPY_STATE_BYTES,
                      "call_bytes": limits.CALL_STATE_BYTES}))


def run_case(tree: Path, name: str, scale: int, iterations: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(tree), "--scenario", name,
                          "--scale", str(scale), "--iterations", str(iterations)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_call(one: dict, two: dict) -> tuple[float, float]:
    """Bytes per call of the second iteration (module docstring): at the peak and held."""
    calls = two["calls"] - one["calls"]
    others = ((two["messages"] - one["messages"]) * two["message_bytes"]
              + (two["copies"] - one["copies"]) * two["copy_bytes"])
    return ((two["peak"] - one["peak"] - others) / calls,
            (two["held"] - one["held"] - others) / calls)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="llama3-70b-64n")
    ap.add_argument("--scale", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--against", default="main",
                    help="git revision to compare with (default main; 'none': this tree alone)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.scenario, a.scale, a.iterations)
        return
    alone = a.against == "none"
    git = ["git", "-C", str(ROOT)]
    rev = "" if alone else subprocess.run(git + ["rev-parse", "--short", a.against],
                                          capture_output=True, text=True, check=True).stdout.strip()
    here = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    if subprocess.run(git + ["status", "--porcelain", "tokenpcap"], capture_output=True,
                      text=True, check=True).stdout.strip():
        here += "+changes"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    print(f"{a.scenario} --scale {a.scale}: Schedule of 1 and 2 iterations, every NIC timed")
    with tempfile.TemporaryDirectory() as tmp:
        trees = [] if alone else [(f"{a.against} ({rev})", Path(tmp))]
        if not alone:
            arc = subprocess.run(git + ["archive", rev, "tokenpcap"], capture_output=True,
                                 check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
        trees.append((f"this tree ({here})", ROOT))
        rows = []
        for label, tree in trees:
            one, two = (run_case(tree, a.scenario, a.scale, k) for k in (1, 2))
            peak, held = per_call(one, two)
            rows.append((peak, held))
            print(f"  {label:<24} build {one['cpu']:6.1f} / {two['cpu']:6.1f} s cpu (1 / 2 its)  "
                  f"peak +{one['peak'] / 2**20:6.0f} / +{two['peak'] / 2**20:6.0f} MiB  held "
                  f"+{one['held'] / 2**20:6.0f} / +{two['held'] / 2**20:6.0f} MiB  per call: "
                  f"{peak:5.0f} B peak, {held:5.0f} B held ({one['calls']:,} calls, "
                  f"{one['messages']:,} messages per iteration; CALL_STATE_BYTES "
                  f"{two['call_bytes']}); load {loadavg()}")
        if len(rows) == 2 and min(rows[1]) > 0:
            print(f"  ratio {rows[0][0] / rows[1][0]:.1f}x bytes per call at the peak, "
                  f"{rows[0][1] / rows[1][1]:.1f}x held")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
