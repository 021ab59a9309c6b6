"""Building one iteration's flat arrays (:func:`tokenpcap.schedule.flat.flatten`: the plan's calls,
every rank's program, every call's transfers, before the compiled engine times anything): this
checkout against another git revision, side by side in one run.

    python benchmarks/flat_build.py [--scenario NAME ...] [--scale K] [--against REV]

Each (tree, scenario) case runs in a fresh child process (cold caches, its own peak memory): the
plan is built first (not counted), then ``flatten(plan, 0, ...)`` is timed as the schedule calls
it (NVLink-only calls as one alpha-beta term above 2 M NVLink copies). The other revision's
``tokenpcap`` package is extracted with ``git archive`` into a temporary directory. Columns: CPU
seconds of the child (``time.process_time``; other jobs on the machine disturb it less than the
wall clock), wall seconds, the child's peak RSS (plan included), transfers and instructions made
(and, for a tree that keeps call-shape templates, the rows of its shape table), and the ratio of
CPU seconds. The two trees' arrays are not compared here (the tests compare the
fast build with the straightforward one).
"""
from __future__ import annotations

import argparse
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


def child(tree: str, name: str, scale: int) -> None:
    """Time ``flatten`` of iteration 0 of ``name`` with the package of ``tree``; print JSON."""
    sys.path.insert(0, tree)
    from fractions import Fraction

    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.model import shard_parameters
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.compute import stage_times
    from tokenpcap.schedule.flat import flatten
    from tokenpcap.schedule.runner import NVLINK_COPIES_PER_COPY, NVLINK_LATENCY_NS

    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    plan = build_plan(s, scale=scale)
    pp = s.parallelism.pp
    times = [stage_times(s, st, plan.scale) for st in range(pp)]
    shards = [shard_parameters(s.model, s.parallelism.tp, pp, st, s.parallelism.ep) for st in range(pp)]
    rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
    nvl = ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS)
    c0, w0 = time.process_time(), time.perf_counter()
    f = flatten(plan, 0, shards, times, nvl, NVLINK_COPIES_PER_COPY)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    templates = hasattr(f, "shapes")                # trees whose Flat keeps call-shape templates
    print(json.dumps({"cpu": cpu, "wall": wall, "rss": rss, "calls": f.n_calls,
                      "transfers": f.n_transfers if templates else int(f.tr_bytes.size),
                      "instructions": int(f.ins_kind.size),
                      "rows": int(f.shapes.tr_ptr[-1]) if templates else -1}))


def run_case(tree: Path, name: str, scale: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(tree), "--scenario", name,
                          "--scale", str(scale)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", action="append", help="bundled scenario (repeatable)")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--against", default="main",
                    help="git revision to compare with (default main; 'none': this tree alone)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    names = a.scenario or ["llama3-70b-64n", "gpt3-175b-megatron"]
    if a.child:
        child(a.child, names[0], a.scale)
        return
    alone = a.against == "none"
    rev = "" if alone else subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.against],
                                          capture_output=True, text=True, check=True).stdout.strip()
    here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    if subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "tokenpcap"],
                      capture_output=True, text=True, check=True).stdout.strip():
        here += "+changes"
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        if not alone:
            arc = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tokenpcap"],
                                 capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
        for name in names:
            print(f"{name} --scale {a.scale}: flatten of iteration 0")
            cases = [] if alone else [(f"{a.against} ({rev})", run_case(Path(tmp), name, a.scale))]
            cases.append((f"this tree ({here})", run_case(ROOT, name, a.scale)))
            for label, r in cases:
                print(f"  {label:<22} {r['cpu']:8.1f} s cpu {r['wall']:8.1f} s wall  peak "
                      f"{r['rss'] / 2**30:5.2f} GiB  {r['calls']:>10,} calls {r['transfers']:>12,} "
                      f"transfers {r['instructions']:>12,} instructions"
                      + (f" {r['rows']:>10,} canonical rows" if r.get("rows", -1) >= 0 else ""))
            if alone:
                continue
            before, after = cases[0][1], cases[1][1]
            same = all(before[k] == after[k] for k in ("calls", "transfers", "instructions"))
            print(f"  ratio {before['cpu'] / after['cpu']:.1f}x cpu"
                  f"{'' if same else '  (DIFFERENT array sizes)'}; load {loadavg()}")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
