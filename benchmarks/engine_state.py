"""Memory of the compiled engine's state: ``Schedule(plan, iterations=N, nics=[0])`` constructed
(flat build and engine state; nothing timed), this checkout against another git revision, each in
a fresh child process; optionally the event loop too, on a job small enough for both.

    python benchmarks/engine_state.py [--scenario NAME] [--scale K] [--iterations N]
                                      [--against REV|none] [--run] [--predict]

The message table ``ms`` (one int64 row of 17 columns per RDMA message, data and clear-to-send:
7.7 GB for one iteration of GPT-3 175B) is not this benchmark's subject: the schedule is built
with the ring of messages in progress (``keep_messages=False``, what ``generate`` runs) where the
tree has it; in a tree without it, and without ``--run``, the table is allocated without being
written (``np.empty`` instead of ``np.full``, so its pages are never faulted in and stay out of
the peak RSS). Its bytes are reported apart. Everything else is
built as the schedule builds it. The other revision's ``tokenpcap`` is extracted with
``git archive``. Columns: CPU and wall seconds of the construction, the child's peak RSS
(``ru_maxrss``, plan included) and its RSS after the plan alone; the bytes of the engine's
arrays apart from ``ms``, of ``ms``, and of the per-transfer provenance kept for the message
rows; with ``--run``, the CPU seconds of timing every message with no NIC's frames made
(``nics=()``; the kernel is compiled on a small job first, not counted) and the message count
(the two trees must agree); with ``--predict``, the CPU seconds and the RSS growth of predicting
the whole capture's size (``generate.size.predict_capture``, every NIC, classic pcap, split per
NIC) after the construction, and the packets it predicts.
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


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _nbytes(obj) -> int:
    """Bytes of the numpy arrays held by ``obj`` (a dict, an object's attributes), not shared."""
    import numpy as np

    items = obj.values() if isinstance(obj, dict) else vars(obj).values()
    total = 0
    for v in items:
        if isinstance(v, np.ndarray) and v.base is None:
            total += v.nbytes
        elif hasattr(v, "__dataclass_fields__"):
            total += _nbytes(v)
    return total


def _cur_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def child(tree: str, name: str, scale: int, iterations: int, run: bool, predict: bool) -> None:
    sys.path.insert(0, tree)
    import numpy as np

    import inspect

    import tokenpcap.schedule.engine.state as state
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.runner import Schedule

    streams = "keep_messages" in inspect.signature(Schedule).parameters
    extra = {"keep_messages": False} if streams else {}
    if not run and not streams:
        class _Np:                                  # numpy, with the message table left unwritten
            def __getattr__(self, k):
                return getattr(np, k)

            @staticmethod
            def full(shape, fill, dtype=None):
                if isinstance(shape, tuple) and len(shape) == 2 and shape[1] == 17:
                    return np.empty(shape, dtype)
                return np.full(shape, fill, dtype)

        state.np = _Np()
    if run:                                         # compile the kernel first (not counted)
        warm = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
        for _ in Schedule(build_plan(warm, scale=64), iterations=1, nics=(), **extra).run():
            pass
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    plan = build_plan(s, scale=scale)
    after_plan = _rss()
    c0, w0 = time.process_time(), time.perf_counter()
    sched = Schedule(plan, iterations=iterations, nics=[0] if not run else (), keep_nvlink=not run,
                     keep_history=not run, **extra)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    eng = sched._eng
    S = eng.S
    ms = S.ms.nbytes
    arrays = sum(v.nbytes for v in S if isinstance(v, np.ndarray)) - ms
    prov = _nbytes(eng.tr)
    out = {"cpu": cpu, "wall": wall, "rss": _rss(), "plan_rss": after_plan, "arrays": arrays,
           "ms": ms, "prov": prov, "messages": int(S.ms.shape[0]), "ring": streams}
    if predict:
        from tokenpcap.generate.select import Selection
        from tokenpcap.generate.size import predict_capture

        before, c0 = _cur_rss(), time.process_time()
        size = predict_capture(sched, Selection(), "pcap", 262144, "nic")
        out["predict_cpu"] = time.process_time() - c0
        out["predict_growth"] = _rss() - max(before, out["rss"])
        out["packets"] = size.packets
    if run:
        c0 = time.process_time()
        for _ in sched.run():
            pass
        out["run_cpu"] = time.process_time() - c0
        out["messages"] = sched.n_messages
    print(json.dumps(out))


def run_case(tree: Path, a) -> dict:
    cmd = [sys.executable, __file__, "--child", str(tree), "--scenario", a.scenario, "--scale",
           str(a.scale), "--iterations", str(a.iterations)] + (["--run"] if a.run else []) \
        + (["--predict"] if a.predict else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="gpt3-175b-megatron")
    ap.add_argument("--scale", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--against", default="none", help="git revision to compare with ('none': alone)")
    ap.add_argument("--run", action="store_true", help="also time the event loop (nics=())")
    ap.add_argument("--predict", action="store_true", help="also predict the capture's size")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child, a.scenario, a.scale, a.iterations, a.run, a.predict)
        return
    here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    print(f"{a.scenario} --scale {a.scale}: Schedule(plan, iterations={a.iterations}, "
          f"nics={'()' if a.run else '[0]'})" + (" and its run" if a.run else "")
          + "; the message table a ring where the tree has one, else " + ("kept" if a.run else "untouched"))
    gib = 2 ** 30
    with tempfile.TemporaryDirectory() as tmp:
        cases = []
        if a.against != "none":
            rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", a.against],
                                 capture_output=True, text=True, check=True).stdout.strip()
            arc = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "tokenpcap"],
                                 capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
            cases.append((f"{a.against} ({rev})", Path(tmp)))
        cases.append((f"this tree ({here})", ROOT))
        for label, tree in cases:
            r = run_case(tree, a)
            line = (f"  {label:<20} build {r['cpu']:6.1f} s cpu {r['wall']:6.1f} s wall  peak "
                    f"{r['rss'] / gib:5.2f} GiB (plan {r['plan_rss'] / gib:4.2f})  arrays "
                    f"{r['arrays'] / gib:5.2f} GiB + ms {r['ms'] / gib:5.2f} GiB + provenance "
                    f"{r['prov'] / gib:5.2f} GiB" + (" (ring)" if r.get("ring") else ""))
            if a.predict:
                line += (f"  predict {r['predict_cpu']:6.1f} s cpu, peak +{r['predict_growth'] / gib:4.2f}"
                         f" GiB, {r['packets']:,} packets")
            if a.run:
                line += f"  run {r['run_cpu']:6.2f} s cpu {r['messages']:,} messages"
            print(line + f"; load {loadavg()}")
    print(f"load after: {loadavg()}")


if __name__ == "__main__":
    main()
