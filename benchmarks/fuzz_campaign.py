"""A long fuzz campaign: mutated captures through the capture reader, readdress, plot's
capture series and pictures and inspect's report, mutated YAML through the profile loaders and
readdress's mapping loader (tests/fuzzing.py: seeds, mutations,
targets and what counts as a crash); and the surfaces of tests/fuzz_surfaces.py: simulator
result files, extreme numeric profile values, output paths, signals at random moments, captures
of many sections or flows (each with its own time limit).

    nice python3 benchmarks/fuzz_campaign.py --cases 1000000 --workers 2 --out /tmp/fuzz

Case ``i`` is deterministic in ``(--seed, i)``: target, seed input, splice partner and
mutations, so a crash is reproduced with ``--replay I`` (``--targets`` runs only some targets'
cases, keeping their numbers). Prints cases, clean errors (one-line TokenpcapError), long ones
(a surface's job past the case's budget by the engine's own estimates, not run to the end:
:mod:`tests.fuzz_surfaces`), crashes (anything else, or a wrong output; grouped by exception and place, first inputs saved
under ``--out``), hangs (a case over its limit: CPU seconds of the worker, or wall seconds for a
case that waits on a process it started, with a wall backstop; stopped by a timer signal and
run again at once: over it twice is a hang, once a stall of the shared machine, counted apart;
a worker silent for ``--silent`` seconds is killed and counted too), and memory per case: each
case's own peak resident set (the worker's ``VmHWM`` reset before it, proc(5)
``clear_refs``; it includes what the worker holds between cases, reported beside it) and the
peak of a process it started (``wait4``'s rusage), the largest of each with its case.
Benchmarks only: not part of the package.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz_signals import child_peak_kb  # noqa: E402
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


#: Outcomes of a case: accepted, refused in one clean line, long (a surface's job past the
#: case's budget by the engine's own estimates: not run to the end), a crash, a hang (over
#: its limit twice in a row), a stall (over its limit once, within it when run again at once:
#: the shared machine stopped the worker, not the case; counted and named apart).
OUTCOMES = ("ok", "error", "long", "crash", "hang", "stall")
#: Wall seconds a case that runs in the worker may take per CPU second of its limit (the
#: machine is shared: a niced worker gets a fraction of a core).
WALL_PER_CPU_S = 5.0


class Hang(BaseException):
    """A case ran past its time limit."""


def _alarm(signum, frame):  # type: ignore[no-untyped-def]
    raise Hang()


def case_input(i: int, seed: int, caps: dict, profs: dict, work: Path,
               only: frozenset | None = None) -> tuple[str, str, bytes] | None:
    """Target, seed name and mutated bytes of case ``i``; None if its target is not in
    ``only`` (the case numbers stay those of the whole campaign, so ``--replay`` finds it)."""
    rng = random.Random(seed * 1_000_003 + i)
    target = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    if only is not None and target not in only:
        return None
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


def _status_kb(field: str) -> int:
    """A ``/proc/self/status`` line in KiB (``VmHWM``: the peak resident set since the last
    reset; ``VmRSS``: the resident set now)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(field.encode() + b":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> None:
    """Start a new ``VmHWM`` from the resident set now (proc(5), ``clear_refs`` value 5), so
    the peak read after a case is that case's own peak."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class Peaks:
    """The largest per-case peak resident set of the worker and of a process a case started,
    each with its case: ``(MB, case, target)``; and the worker's resident set between cases
    (its first and its largest: growth there is state kept across cases)."""

    def __init__(self) -> None:
        self.case = (0.0, -1, "")
        self.child = (0.0, -1, "")
        self.between = [0.0, 0.0]
        self.rss_mb = 0.0

    def before(self) -> None:
        self.rss_mb = _status_kb("VmRSS") / 1024
        self.between = [self.between[0] or self.rss_mb, max(self.between[1], self.rss_mb)]
        _reset_peak()

    def after(self, i: int, target: str, child_kb: int) -> None:
        self.case = max(self.case, (_status_kb("VmHWM") / 1024, i, target))
        self.child = max(self.child, (child_kb / 1024, i, target))

    def as_tuple(self) -> tuple:
        return (self.case, self.child, tuple(self.between))


def _arm(limit_s: float, wall: bool) -> None:
    """Raise :class:`Hang` after ``limit_s`` seconds: wall seconds if ``wall`` (a case that
    waits on a process it started), else CPU seconds of this process (the engine's estimates
    are CPU seconds; a niced worker on a shared machine gets a fraction of a core), with
    :data:`WALL_PER_CPU_S` times as many wall seconds for a case blocked without using the
    CPU. ``limit_s`` 0 disarms both timers."""
    signal.setitimer(signal.ITIMER_REAL, limit_s if wall else limit_s * WALL_PER_CPU_S)
    signal.setitimer(signal.ITIMER_PROF, 0 if wall else limit_s)


def _warm(work: Path) -> None:
    """Compile (or load from numba's cache) the timing engine on both fabric models before
    the cases: a one-off cost of the worker, not of the case that happens to come first."""
    for base in ("ideal", "queued"):
        run_surface("numeric", json.dumps({"base": base, "sets": []}).encode(), work)


def _attempt(target: str, data: bytes, args, work: Path) -> tuple[str, BaseException | None]:
    """Run one case within its limits (:func:`_arm`): its outcome and, for a crash, the
    error."""
    surface = SURFACES.get(target)
    _arm(surface.timeout_s if surface else args.timeout, surface is not None and surface.wall)
    try:
        return (run_surface(target, data, work / target) if surface else
                run_target(target, data, work)), None
    except Hang:
        return "hang", None
    except (Exception, WrongOutput) as err:     # noqa: BLE001 - a crash is data here
        return "crash", err
    finally:
        _arm(0, False)


def worker(wid: int, cases: range, args, results) -> None:
    work = Path(args.out) / f"w{wid}"
    work.mkdir(parents=True, exist_ok=True)
    caps = capture_seeds(work / "seeds")
    profs = profile_seeds()
    only = frozenset(args.targets.split(",")) if args.targets else None
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    log = open(Path(args.out) / f"w{wid}.log", "w", buffering=1) if args.log else None
    counts: Counter = Counter()
    crashes: dict[str, tuple[int, str]] = {}
    peaks = Peaks()
    warm = False
    last = time.monotonic()
    for i in cases:
        drawn = case_input(i, args.seed, caps, profs, work, only)
        if drawn is None:
            continue
        target, name, data = drawn
        if target in ("numeric", "path", "many") and not warm:
            _warm(work / "warm")
            warm = True
        peaks.before()
        t_wall, t_cpu = time.monotonic(), time.process_time()
        outcome, err = _attempt(target, data, args, work)
        if outcome == "hang":       # once more: a hang that does not repeat was a stall
            outcome, err = _attempt(target, data, args, work)
            if outcome in ("ok", "error", "long"):
                outcome = "stall"
                crashes.setdefault(f"stall in {target}", (i, name))
        if outcome == "hang":
            crashes.setdefault(f"hang in {target}", (i, name))
        elif outcome == "crash":
            sig = f"{target}: {_signature(err)}: {str(err)[:120]}"
            if sig not in crashes:
                crashes[sig] = (i, name)
                (Path(args.out) / "crashes").mkdir(exist_ok=True)
                (Path(args.out) / "crashes" / f"{target}-{i}-{name}").write_bytes(data)
        child_kb = child_peak_kb()
        peaks.after(i, target, child_kb)
        counts[(target, outcome)] += 1
        if log is not None:
            log.write(f"{i} {target} {outcome} {time.process_time() - t_cpu:.2f} "
                      f"{time.monotonic() - t_wall:.2f} {peaks.rss_mb:.0f} "
                      f"{_status_kb('VmHWM') / 1024:.0f} {child_kb / 1024:.0f}\n")
        if time.monotonic() - last > 5:
            results.put(("progress", wid, dict(counts), crashes, peaks.as_tuple()))
            last = time.monotonic()
    results.put(("done", wid, dict(counts), crashes, peaks.as_tuple()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=10.0,
                    help="CPU seconds per case of the capture and YAML targets (a surface "
                         "has its own limit)")
    ap.add_argument("--silent", type=float, default=None,
                    help="seconds without news before a worker is killed as hung [default: "
                         "60 more than twice the longest wall limit of a case: it is run "
                         "again after its first time out]")
    ap.add_argument("--log", action="store_true",
                    help="one line per case in OUT/wN.log: case, target, outcome, CPU s, "
                         "wall s, worker RSS before it (MB), its peak RSS (MB), peak RSS of "
                         "a process it started (MB)")
    ap.add_argument("--out", default="/tmp/tokenpcap-fuzz")
    ap.add_argument("--replay", type=int, default=None, help="run case I alone, with traceback")
    ap.add_argument("--targets", default=None,
                    help="comma-separated targets: run only the cases drawn for these (the "
                         "case numbers stay the whole campaign's)")
    args = ap.parse_args()
    if args.silent is None:
        args.silent = 60 + 2 * max(s.timeout_s * (1 if s.wall else WALL_PER_CPU_S)
                                   for s in SURFACES.values())
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.replay is not None:
        work = Path(args.out) / "replay"
        work.mkdir(exist_ok=True)
        t, name, data = case_input(args.replay, args.seed, capture_seeds(work / "seeds"),
                                   profile_seeds(), work)
        (work / "input.bin").write_bytes(data)
        print(f"case {args.replay}: {t} on a mutation of {name} ({len(data)} bytes, "
              f"{work / 'input.bin'})")
        _reset_peak()
        print(run_surface(t, data, work / t) if t in SURFACES else run_target(t, data, work))
        print(f"peak RSS of the case: {_status_kb('VmHWM') / 1024:,.0f} MB; of a process it "
              f"started: {child_peak_kb() / 1024:,.0f} MB")
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
                  + ", ".join(f"{o} {tot.get(o, 0):,}" for o in OUTCOMES), flush=True)
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
    by = {o: sum(v for (t, oo), v in total.items() if oo == o) for o in OUTCOMES}
    print(f"fuzz campaign: seed {args.seed}, {args.workers} worker(s), timeout {args.timeout} s "
          f"per case, {seconds:,.0f} s wall, load {os.getloadavg()[0]:.2f}")
    print(f"cases {cases:,}: accepted {by['ok']:,}, clean errors {by['error']:,}, long "
          f"(announced) {by['long']:,}, crashes {by['crash']:,}, hangs {by['hang']:,}, "
          f"workers killed silent {len(killed)}, stalls {by['stall']:,} (over the limit once, "
          f"within it when run again)")
    for t in ALL_TARGETS:
        row = {o: total.get((t, o), 0) for o in OUTCOMES}
        print(f"  {t:10s} " + ", ".join(f"{k} {v:,}" for k, v in row.items()))
    case = max((s[2][0] for s in state.values()), default=(0.0, -1, ""))
    child = max((s[2][1] for s in state.values()), default=(0.0, -1, ""))
    between = max((s[2][2] for s in state.values()), default=(0.0, 0.0), key=lambda b: b[1])
    print(f"per-case peak RSS: max {case[0]:,.0f} MB (case {case[1]}, {case[2]}); of a "
          f"process a case started: max {child[0]:,.0f} MB (case {child[1]}, {child[2]}); "
          f"worker between cases: {between[0]:,.0f} MB first, {between[1]:,.0f} MB largest")
    for sig, (i, name) in sorted(crashes.items()):
        print(f"  crash/hang/stall: {sig} (first: case {i}, seed {name}; --replay {i})")


if __name__ == "__main__":
    main()
