"""Wall time, CPU time and peak RSS of ``tokenpcap plan SCENARIO --json --no-tokens`` (the plan
alone: no tokenizing, no timing), each in a fresh process, on this tree and, with ``--against``,
on another tree side by side; and whether the trees print the same JSON byte for byte (the
scenario's own paths, which name the tree, put back to one name first).

    python3 benchmarks/plan_memory.py --scenario llama3.1-405b-2048 [--against /path/to/tree]
        [--set parallelism.dp=32 --set training.global_batch_size=1024 --set cluster.nodes=512]
        [--repeat 2]

A production scenario's plan is a big process: run it under ``flock /tmp/bigmem.lock nice``.
Peak RSS is the child's own (``os.wait4``), so the runs do not mix.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plan_once(tree: Path, scenario: str, sets: list[str]) -> tuple[float, float, int, bytes]:
    """Run the plan command of ``tree`` once: wall s, user + system CPU s, peak RSS bytes and
    its stdout (the tree's path replaced by ``TREE``)."""
    args = [sys.executable, "-m", "tokenpcap", "plan",
            str(tree / "profiles" / "scenarios" / f"{scenario}.yaml"), "--json", "--no-tokens"]
    for kv in sets:
        args += ["--set", kv]
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, cwd=tree, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err = proc.stderr.read().decode() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: plan {scenario} exited {proc.returncode}: {err.strip()}")
        out.seek(0)
        text = out.read().replace(str(tree).encode(), b"TREE")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", action="append", required=True,
                    help="a bundled scenario's name (repeatable)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to every plan as --set (repeatable)")
    ap.add_argument("--against", type=Path, help="another tokenpcap tree, run side by side")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    trees = [("this", ROOT)] + ([("against", a.against.resolve())] if a.against else [])
    print(f"plan_memory.py: `tokenpcap plan SCENARIO --json --no-tokens"
          f"{''.join(' --set ' + kv for kv in a.sets)}`, a fresh process per run")
    print(f"{'scenario':34} {'tree':8} {'GPUs':>7} {'calls':>11} {'wall s':>8} {'CPU s':>8} "
          f"{'peak RSS GB':>12}")
    for name in a.scenario:
        outputs = {}
        for _ in range(a.repeat):
            for tag, tree in trees:
                wall, cpu, rss, text = plan_once(tree, name, a.sets)
                data = json.loads(text)
                outputs[tag] = text
                print(f"{name:34} {tag:8} {data['layout']['world_size']:>7,} "
                      f"{data['totals']['calls']:>11,} {wall:>8.1f} {cpu:>8.1f} {rss / 1e9:>12.2f}",
                      flush=True)
        if len(outputs) > 1:
            same = len(set(outputs.values())) == 1
            print(f"{name}: the trees' JSON is {'byte-identical' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
