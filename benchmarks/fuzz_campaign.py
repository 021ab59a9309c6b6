"""A long fuzz campaign: mutated captures through the capture reader, readdress, plot's
capture series and pictures and inspect's report, mutated YAML through the profile loaders and
readdress's mapping loader (tests/fuzzing.py: seeds, mutations,
targets and what counts as a crash); and the surfaces of tests/fuzz_surfaces.py: simulator
result files, extreme numeric profile values, output paths, signals at random moments, captures
of many sections or flows (each with its own time limit).

    nice python3 benchmarks/fuzz_campaign.py --cases 1000000 --workers 2 --out /tmp/fuzz

Case ``i`` is deterministic in ``(--seed, i)``: target, seed input, splice partner and
mutations, so a crash is reproduced with ``--replay I``. Prints cases, clean errors (one-line
TokenpcapError), crashes (anything else, or a wrong output; grouped by exception and place,
first inputs saved under ``--out``), hangs (a case over ``--timeout`` seconds, stopped by a
timer signal; a worker silent for ``--silent`` seconds is killed and counted too) and the peak
resident memory of the workers. Benchmarks only: not part of the package.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import random
import resource
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz_surfaces import SURFACES, run_surface  # noqa: E402
from tests.fuzzing import (TARGETS, WrongOutput, capture_seeds,  # noqa: E402
                           mapping_seeds, mutate, mutate_text, profile_seeds, run_target)

#: Share of the cases per target (the reader is the cheapest and the most exposed; drawing the
#: PNGs costs about a second a case; of the surfaces, a signal case starts a process, 1-5 s, and
#: a many-flows case takes 5-15 s).
WEIGHTS = {"read": 0.37, "readdress": 0.13, "plot": 0.13, "views": 0.02, "inspect": 0.09,
           "draw": 0.003, "profile": 0.11, "mapping": 0.06, "simai": 0.03, "fct": 0.03,
           "pfc": 0.02, "numeric": 0.008, "path": 0.003, "signal": 0.0003, "many": 0.00008}
ALL_TARGETS = TARGETS + tuple(SURFACES)


class Hang(BaseException):
    """A case ran past its time limit."""


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise Hang()


def case_input(i: int, seed: int, caps: dict, profs: dict,
               work: Path) -> tuple[str, str, bytes]:
    """Target, seed name and mutated bytes of case ``i``."""
    rng = random.Random(seed * 1_000_003 + i)
    target = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    if target in SURFACES:
        return target, target, SURFACES[target].make(rng, work)
    if target in ("profile", "mapping"):
        texts = profs if target == "profile" else mapping_seeds()
        name = rng.choice(sorted(texts))
        return target, name, mutate_text(texts[name], rng)
    names = sorted(caps)
    name = rng.choice(names)
    other = caps[rng.choice(names)]
    return target, name, mutate(caps[name], rng, other)


def _signature(err: BaseException) -> str:
    tb = traceback.extract_tb(err.__traceback__)
    ours = [f for f in tb if "tokenpcap" in f.filename] or tb[-1:]
    at = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(err).__name__} at {at}"


def worker(wid: int, cases: range, args, results) -> None:
    work = Path(args.out) / f"w{wid}"
    work.mkdir(parents=True, exist_ok=True)
    caps = capture_seeds(work / "seeds")
    profs = profile_seeds()
    signal.signal(signal.SIGALRM, _alarm)
    counts: Counter = Counter()
    crashes: dict[str, tuple[int, str]] = {}
    last = time.monotonic()
    for i in cases:
        target, name, data = case_input(i, args.seed, caps, profs, work)
        surface = SURFACES.get(target)
        signal.setitimer(signal.ITIMER_REAL, surface.timeout_s if surface else args.timeout)
        try:
            outcome = (run_surface(target, data, work / target) if surface else
                       run_target(target, data, work))
        except Hang:
            outcome = "hang"
            crashes.setdefault(f"hang in {target}", (i, name))
        except (Exception, WrongOutput) as err:     # noqa: BLE001 - a crash is data here
            outcome = "crash"
            sig = f"{target}: {_signature(err)}: {str(err)[:120]}"
            if sig not in crashes:
                crashes[sig] = (i, name)
                (Path(args.out) / "crashes").mkdir(exist_ok=True)
                (Path(args.out) / "crashes" / f"{target}-{i}-{name}").write_bytes(data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        counts[(target, outcome)] += 1
        if time.monotonic() - last > 5:
            results.put(("progress", wid, dict(counts), crashes, _rss_mb()))
            last = time.monotonic()
    results.put(("done", wid, dict(counts), crashes, _rss_mb()))


def _rss_mb() -> tuple[float, float]:
    """Peak resident MB of this worker and of the largest process it started (signal cases)."""
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--silent", type=float, default=300.0,
                    help="seconds without news before a worker is killed as hung")
    ap.add_argument("--out", default="/tmp/tokenpcap-fuzz")
    ap.add_argument("--replay", type=int, default=None, help="run case I alone, with traceback")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.replay is not None:
        work = Path(args.out) / "replay"
        work.mkdir(exist_ok=True)
        t, name, data = case_input(args.replay, args.seed, capture_seeds(work / "seeds"),
                                   profile_seeds(), work)
        (work / "input.bin").write_bytes(data)
        print(f"case {args.replay}: {t} on a mutation of {name} ({len(data)} bytes, "
              f"{work / 'input.bin'})")
        print(run_surface(t, data, work / t) if t in SURFACES else run_target(t, data, work))
        return
    t0 = time.monotonic()
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    per = -(-args.cases // args.workers)
    procs = {}
    for w in range(args.workers):
        r = range(w * per, min(args.cases, (w + 1) * per))
        procs[w] = ctx.Process(target=worker, args=(w, r, args, results), daemon=True)
        procs[w].start()
    state: dict[int, tuple] = {}
    heard = {w: time.monotonic() for w in procs}
    done: set[int] = set()
    killed: list[int] = []
    next_print = time.monotonic() + 60
    stop = []
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    while len(done) + len(killed) < len(procs) and not stop:
        try:
            kind, w, counts, crashes, rss = results.get(timeout=5)
            state[w] = (counts, crashes, rss)
            heard[w] = time.monotonic()
            if kind == "done":
                done.add(w)
        except queue.Empty:
            pass
        for w, p in procs.items():
            if w not in done and w not in killed and (
                    time.monotonic() - heard[w] > args.silent or not p.is_alive()):
                p.kill()
                killed.append(w)
        if time.monotonic() > next_print:
            tot: Counter = Counter()
            for st in state.values():
                for (_, o), v in st[0].items():
                    tot[o] += v
            print(f"{time.monotonic() - t0:7.0f} s  {sum(tot.values()):,} cases: "
                  + ", ".join(f"{o} {tot.get(o, 0):,}" for o in ("ok", "error", "crash", "hang")),
                  flush=True)
            next_print += 60
    if stop:                                # interrupted: report what the workers said so far
        print("interrupted: the numbers below are the cases done until the last report")
        for p in procs.values():
            p.kill()
    report(state, killed, time.monotonic() - t0, args)


def report(state: dict, killed: list[int], seconds: float, args) -> None:
    total: Counter = Counter()
    crashes: dict = {}
    for counts, cr, _ in state.values():
        total.update(counts)
        crashes.update(cr)
    cases = sum(total.values())
    by = {o: sum(v for (t, oo), v in total.items() if oo == o) for o in
          ("ok", "error", "crash", "hang")}
    print(f"fuzz campaign: seed {args.seed}, {args.workers} worker(s), timeout {args.timeout} s "
          f"per case, {seconds:,.0f} s wall, load {os.getloadavg()[0]:.2f}")
    print(f"cases {cases:,}: accepted {by['ok']:,}, clean errors {by['error']:,}, crashes "
          f"{by['crash']:,}, hangs {by['hang']:,}, workers killed silent {len(killed)}")
    for t in ALL_TARGETS:
        row = {o: total.get((t, o), 0) for o in ("ok", "error", "crash", "hang")}
        print(f"  {t:10s} " + ", ".join(f"{k} {v:,}" for k, v in row.items()))
    print(f"peak resident memory per worker: "
          f"{max((s[2][0] for s in state.values()), default=0):,.0f} MB; of a process a "
          f"signal case started: {max((s[2][1] for s in state.values()), default=0):,.0f} MB")
    for sig, (i, name) in sorted(crashes.items()):
        print(f"  crash/hang: {sig} (first: case {i}, seed {name}; --replay {i})")


if __name__ == "__main__":
    main()
