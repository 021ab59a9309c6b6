"""The first run: ``python3 -m tokenpcap run SCENARIO`` with numba's cache of the timing engine
empty (what a new machine, a fresh venv or an upgrade meets: the engine is compiled), then again
with it filled (every later run), in fresh processes, for this tree and, with ``--against``,
another tree (a git revision or a checkout's directory) side by side in one run.

Per run: wall clock, CPU seconds of the command and its children (the writer processes; from
``resource.getrusage(RUSAGE_CHILDREN)``), the stage lines it printed about the compile, and the
load average. numba keeps each tree's cache in a fresh ``NUMBA_CACHE_DIR`` (not beside the
sources, so no checkout's own cache is touched); the second run of a tree reuses it. A first run
that times its job uncompiled leaves the engine's compile to a helper in the background (its
lock file in the cache, :data:`LOCK_NAME`): the script waits for it before the second run and
prints when the cache was ready (that helper's CPU is not counted: it outlives the run). Every
run's output files are hashed (sha256) and must be the same in every run of every tree.

Usage: ``python benchmarks/first_run.py [--scenario PATH] [--scale K] [--against REV|DIR]
[--repeat N]``
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import loadavg, machine, tree_dir  # noqa: E402


def _digest(out: Path) -> str:
    """sha256 over the output directory's files, by name."""
    h = hashlib.sha256()
    for p in sorted(out.iterdir()):
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()


#: The file a compile of the engine in the background holds locked while it runs, in the
#: numba cache directory (``tokenpcap.schedule.engine.compile_aside.LOCK_NAME``; a tree that
#: has no such compile never makes it).
LOCK_NAME = "tokenpcap-engine-compile.lock"


def background_done(cache: Path) -> bool:
    """Wait for a compile of the engine in the background into ``cache`` to end (its lock
    file, :data:`LOCK_NAME`); True when there was one."""
    path = cache / LOCK_NAME
    if not path.exists():
        return False
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
    return True


def one_run(tree: Path, scenario: str, scale: int, cache: Path, out: Path) -> dict:
    """``python3 -m tokenpcap run`` of ``tree``'s package in a fresh process: wall, CPU (the
    process and its children), the compile's stage line, the outputs' digest."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = loadavg()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tokenpcap", "run", scenario, "-o", str(out),
                           "--scale", str(scale)], cwd=tree, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{tree}: tokenpcap run exited {proc.returncode}:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    said = [x for x in proc.stderr.splitlines() if "compil" in x]
    digest = _digest(out)
    for p in out.iterdir():
        p.unlink()
    return dict(wall=wall, cpu=cpu, said=said, digest=digest, load=load)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=str(ROOT / "profiles" / "scenarios" / "dante.yaml"),
                    help="scenario file (default: the bundled dante, what `tokenpcap run` runs)")
    ap.add_argument("--scale", type=int, default=1, help="its --scale")
    ap.add_argument("--against", help="another tree (git revision or checkout directory)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every tree")
    a = ap.parse_args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}; load {loadavg()}")
    print(f"tokenpcap run {Path(a.scenario).name} --scale {a.scale}: first run (numba's cache "
          "empty), then second (cache filled)")
    here = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    digests = set()
    with tempfile.TemporaryDirectory() as tmp:
        trees = [(f"this tree ({here})", ROOT)]
        if a.against:
            (Path(tmp) / "tree").mkdir()
            trees.insert(0, tree_dir(ROOT, a.against, str(Path(tmp) / "tree")))
        for rnd in range(a.repeat):
            for i, (label, tree) in enumerate(trees):
                cache = Path(tmp) / f"numba-cache-{rnd}-{i}"
                out = Path(tmp) / "out"
                for which in ("first", "second"):
                    t0 = time.perf_counter()
                    r = one_run(tree, a.scenario, a.scale, cache, out)
                    digests.add(r["digest"])
                    said = "; ".join(s.removeprefix("tokenpcap: ") for s in r["said"]) or "-"
                    print(f"  {label:<24} {which:<6} {r['wall']:7.1f} s wall {r['cpu']:7.1f} s cpu"
                          f"  load {r['load']}  said: {said}")
                    if which == "first" and background_done(cache):
                        print(f"  {label:<24} {which:<6} the engine compiled in the background: "
                              f"cached {time.perf_counter() - t0:.1f} s after the run started "
                              f"(load {loadavg()})")
    print("  every run wrote the same files (sha256)" if len(digests) == 1 else
          f"  DIFFERENT outputs: {len(digests)} digests")
    print(f"load after: {loadavg()}")
    if len(digests) != 1:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
