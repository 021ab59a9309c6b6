"""Peak memory of each run kind against its estimate (``tokenpcap.schedule.memory``): every kind
run as a user runs it, ``python3 -m tokenpcap ...`` in a fresh process, its peak RSS beside the
estimate the guard checks.

    python benchmarks/run_memory.py [--run SCENARIO:SCALE ...] [--kinds K,K,...] [--dir DIR]

For each ``SCENARIO:SCALE`` (a file stem of ``profiles/scenarios``; default ``dante:1``) and
each run kind (default all of ``RUN_KINDS`` the script knows how to start: ``generate`` (NIC 0,
headers only, one writer), ``plot``, ``trace`` (the Inferno's first line), ``export --to F`` for
every format that runs the schedule; ``compare`` needs a simulator's output of the same run and
is not started), the command runs in a child process with ``--quiet``; its peak RSS is
``ru_maxrss`` of the child from ``os.wait4`` (Linux: the largest of the child and the processes it
waited for, as ``/usr/bin/time -v``'s "Maximum resident set size"; not their sum). The estimate is
``estimate_work(plan, 1, run=run_kind(K)).memory_bytes`` of the plan at that scale, made in this
process after the child ended, without the NVLink copies (as the guard, ``check_work``, counts
it). Per row: RDMA messages, the engine's state estimate, the peak, the estimate, peak /
estimate, the bytes per message the peak holds beyond the engine's state and the kind's base,
``(peak - engine - base) / messages`` (what ``message_bytes`` must cover), and ``plan GB``: the
peak of a fresh process that only builds the plan, which comes before the guard (the guard
reads the plan) and is not in the estimate. A row whose peak passes both its estimate and the
planning's peak is marked ``OVER``. Outputs are written into
``--dir`` (a temporary directory by default) and removed after each run.

Run it with each child's expected peak in mind: a child above 3 GB should run alone (the
production rows of docs/generate.md ran under ``flock /tmp/bigmem.lock``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import loadavg, machine  # noqa: E402

TRACE_TEXT = "Nel mezzo del cammin di nostra vita"


def command(kind: str, scenario: Path, scale: int, out: Path) -> list[str] | None:
    """The ``tokenpcap`` arguments of run kind ``kind`` on ``scenario`` (None: not started)."""
    common = ["--scale", str(scale), "--quiet"]
    if kind == "generate":
        return ["generate", str(scenario), "-o", str(out / "gen"), "--nics", "0",
                "--snaplen", "74", "--format", "pcap", "--jobs", "1", *common]
    if kind == "plot":
        return ["plot", str(scenario), "-o", str(out / "pics"), *common]
    if kind == "trace":
        return ["trace", str(scenario), TRACE_TEXT, *common]
    if kind.startswith("export --to "):
        fmt = kind.split()[-1]
        return ["export", str(scenario), "--to", fmt, "-o", str(out / "x" / f"{fmt}out"),
                *common]
    return None


def run_child(argv: list[str], log: Path) -> tuple[int, int, float]:
    """Run ``python3 -m tokenpcap argv``; ``(exit status, peak RSS bytes, wall seconds)``."""
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "tokenpcap", *argv], cwd=ROOT, stdout=f,
                             stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, ru.ru_maxrss * 1024, time.perf_counter() - t0


def plan_peak(scenario: Path, scale: int, log: Path) -> int:
    """Peak RSS (bytes) of a fresh process that imports the commands, loads ``scenario`` and
    builds its plan at ``scale``: the part of a run's peak that comes before the guard (which
    reads the plan)."""
    code = ("import sys, importlib; import tokenpcap.cli as c; "   # every command's imports
            "[importlib.import_module(f'tokenpcap.cli.{m}') for m in c.COMMANDS.values()]; "
            "from tokenpcap.config.profiles import load_scenario; "
            "from tokenpcap.plan.build import build_plan; "
            "build_plan(load_scenario(sys.argv[1]), scale=int(sys.argv[2]))")
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, "-c", code, str(scenario), str(scale)], cwd=ROOT,
                             stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"planning {scenario.name} failed: {log.read_text(errors='replace')}")
    return ru.ru_maxrss * 1024


def estimate(scenario: Path, scale: int, kind: str):  # type: ignore[no-untyped-def]
    """The guard's :class:`~tokenpcap.schedule.limits.Work` of one iteration of ``scenario``
    at ``scale`` as run kind ``kind``."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work
    from tokenpcap.schedule.memory import run_kind

    plan = build_plan(load_scenario(scenario), scale=scale)
    return estimate_work(plan, 1, nvlink=False, run=run_kind(kind))


def main() -> None:
    from tokenpcap.schedule.memory import RUN_KINDS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", default=None, metavar="SCENARIO:SCALE",
                    help="a scenario of profiles/scenarios and its --scale (repeatable)")
    ap.add_argument("--kinds", default=None,
                    help="comma-separated run kinds (default: every one that can be started)")
    ap.add_argument("--dir", default=None, help="where outputs are written (then removed)")
    a = ap.parse_args()
    runs = a.run or ["dante:1"]
    kinds = (a.kinds.split(",") if a.kinds else
             [k for k in RUN_KINDS if command(k, Path("x"), 1, Path("x")) is not None])
    bad = [k for k in kinds if k not in RUN_KINDS]
    if bad:
        sys.exit(f"--kinds: got {bad[0]!r}, expected one of {', '.join(RUN_KINDS)}")
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="run_memory."))
    base.mkdir(parents=True, exist_ok=True)
    print(f"# {machine()}; load {loadavg()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'scenario':<22} {'scale':>7} {'run kind':<20} {'messages':>12} {'engine GB':>9} "
          f"{'peak GB':>8} {'estimate GB':>11} {'peak/est':>8} {'B/msg over':>10} {'wall s':>7} "
          f"{'plan GB':>7}")
    over = 0
    try:
        for spec in runs:
            name, _, sc = spec.partition(":")
            scale = int(sc or 1)
            scen = ROOT / "profiles" / "scenarios" / f"{name}.yaml"
            planned = plan_peak(scen, scale, base / "plan.log")
            for kind in kinds:
                out = base / "out"
                argv = command(kind, scen, scale, out)
                if argv is None:
                    print(f"{name:<22} {scale:>7} {kind:<20} not started (needs a simulator's "
                          "output)")
                    continue
                log = base / "child.log"
                rc, peak, wall = run_child(argv, log)
                shutil.rmtree(out, ignore_errors=True)
                if rc != 0:
                    tail = log.read_text(errors="replace").strip().splitlines()[-1:]
                    print(f"{name:<22} {scale:>7} {kind:<20} exit {rc}: {' '.join(tail)}")
                    continue
                w = estimate(scen, scale, kind)
                k = RUN_KINDS[kind]
                excess = (peak - w.engine_bytes - k.base_bytes) / max(1, w.messages)
                flag = "" if peak <= max(w.memory_bytes, planned) else "  OVER"
                over += bool(flag)
                print(f"{name:<22} {scale:>7} {kind:<20} {w.messages:>12,} "
                      f"{w.engine_bytes / 1e9:>9.3f} {peak / 1e9:>8.3f} "
                      f"{w.memory_bytes / 1e9:>11.3f} {peak / w.memory_bytes:>8.2f} "
                      f"{excess:>10.0f} {wall:>7.1f} {planned / 1e9:>7.3f}{flag}", flush=True)
    finally:
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)
    print(f"runs whose peak passed the estimate: {over}")


if __name__ == "__main__":
    main()
