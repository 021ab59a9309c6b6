"""The fuzz surfaces beyond captures and YAML (tests/fuzzing.py): simulator result files, extreme
numeric profile values, output paths the file system refuses, signals at random moments, and
captures of many sections or many flows. Shared by tests/test_fuzz_surfaces.py (a seeded CI
slice) and benchmarks/fuzz_campaign.py (the long campaign).

Each :class:`Surface` makes a case's input from a seeded ``random.Random`` (bytes: a mutated
file, or a JSON description of a command line) and runs it, returning ``"ok"`` or ``"error"``
(or ``"long"``: below); anything else it raises is a crash. The rules a result must keep, per
surface:

* ``simai`` / ``fct`` / ``pfc``: a mutated SimAI ``EndToEnd.csv``, HPCC ``fct.txt`` or
  ``pfc.txt`` (the fixtures of tests/cases) is read or refused in one line, and every time read
  fits int64 ns (SimAI's ``uint64`` µs, ns-3's ``%lu`` ns: nothing larger is theirs);
* ``numeric``: ``plan --time --json`` with one or two ``--set`` of a numeric key (every key of
  :data:`tokenpcap.config.spectable.KEYS` with a unit) to an extreme value, on the ideal or the
  queued DCQCN fabric: exit 0 with an iteration whose parts are non-negative int64 ns that add
  up to it and an MFU in [0, 1], or one error line and exit 1/2; or ``"long"``: a job past
  the case's time or memory budget by the engine's own estimates (:func:`_run_numeric`);
* ``path``: a command's output named with a component at or past ``NAME_MAX``, a path past
  ``PATH_MAX``, bytes that are not UTF-8 or control characters: exit 0 with its output, or
  one error line, exit 1/2 and nothing left in the output directory;
* ``signal`` (tests/fuzz_signals.py): ``python -m tokenpcap CMD`` sent SIGINT or SIGTERM at
  a random moment, from start-up (imports, once CPython runs tokenpcap's first lines) to the
  end, sometimes with an empty numba cache (the first compile): exit 0 with the files a run
  without a signal leaves, or 130/143 with ``error: stopped (...)`` as the last line, no
  traceback, and either nothing left or (stopped after its commit) the whole set, never a
  part or a temporary file;
* ``many``: a pcapng of up to 6,000 one-packet sections with mixed ``if_tsresol`` (and a
  provenance comment naming huge rank ranges), or a pcap of up to 400,000 one-packet flows:
  ``inspect`` counts every packet, its JSON stays proportional to the file, and ``plot``'s
  series hold every byte (memory is the campaign's per-worker peak).
"""
from __future__ import annotations

import io
import json
import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.fuzz_files import INT64, make_pfc, mutate_cells, run_fct, run_pfc, run_simai, seed_file
from tests.fuzz_signals import make_signal, run_signal
from tests.fuzzing import ROOT, WrongOutput

CASES = ROOT / "tests" / "cases"
SCENARIOS = ROOT / "profiles" / "scenarios"


@dataclass(frozen=True)
class Surface:
    """``make(rng, work) -> bytes`` a case's input; ``run(data, work) -> "ok" | "error" |
    "long"``; ``timeout_s``: how long a case may take before it counts as a hang (CPU seconds
    of the process running it; wall seconds for a case that waits on a process it started)."""

    make: Callable[[random.Random, Path], bytes]
    run: Callable[[bytes, Path], str]
    timeout_s: float
    wall: bool = False              # the case waits on a process it started: wall seconds


# -- extreme numeric profile values -------------------------------------------------------------

def _numeric_keys() -> list[str]:
    from tokenpcap.config.spectable import KEYS

    keys = [k for k, (unit, _) in KEYS.items() if unit and not k.startswith("workload.")]
    return [k.removeprefix("scenario.") for k in keys]


def _extreme(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(("0", "-1", "1", "2", "1e-300", "1e300", "1.2e-17", "1e-9", "1e-10",
                           "5e-324", ".nan", ".inf", "-.inf", "true", "0.5", "1.5", "4095",
                           "4096", "65536", str(INT64), str(INT64 - 1), str(1 << 31),
                           str(1 << 32), str(1 << 53), "1e18", "1e19", "null", "'7'", "[1]"))
    if pick < 0.8:
        return str(rng.choice((1, -1)) * (1 << rng.randrange(70)) + rng.choice((-1, 0, 1)))
    return f"{10 ** rng.uniform(-30, 30):.6g}"


_BASES = {"ideal": (), "queued": ("cluster.fabric.model=queued", "cluster.fabric.cc=dcqcn")}


def _make_numeric(rng: random.Random, work: Path) -> bytes:
    keys = _numeric_keys()
    sets = [f"{rng.choice(keys)}={_extreme(rng)}" for _ in range(rng.choice((1, 1, 1, 2)))]
    return json.dumps({"base": rng.choice(sorted(_BASES)), "sets": sets}).encode()


def _scenario_file(work: Path) -> Path:
    from tests.fuzzing import profile_seeds

    (work / "corpus.txt").write_text("nel mezzo del cammin di nostra vita " * 40,
                                     encoding="utf-8")
    p = work / "scenario.yaml"
    p.write_bytes(profile_seeds()["scenario.yaml"])
    return p


def _invoke(args: list[str]):
    from click.testing import CliRunner

    from tokenpcap.cli import main

    r = CliRunner().invoke(main, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def _one_error_line(r, what: str) -> str:
    lines = [x for x in r.stderr.splitlines() if not x.startswith("tokenpcap: ")]
    if r.exit_code == 2 and any(x.startswith("Error: ") for x in lines):
        return "error"                              # click's usage error
    if r.exit_code != 1 or len(lines) != 1 or not lines[0].startswith("error: "):
        raise WrongOutput(f"{what}: exit {r.exit_code}, stderr {r.stderr[-300:]!r}")
    return "error"


#: CPU seconds a numeric case may take before it counts as hung
NUMERIC_LIMIT_S = 120.0
#: Engine state a numeric case may build, by the engine's own estimate
#: (:attr:`tokenpcap.schedule.limits.Work.memory_bytes`, fitted to bound the measured peak of
#: a run from above), so that with the ~250 MB a campaign worker holds a case stays under
#: 1 GB. A job beyond it is a job that big (the product refuses past
#: :data:`~tokenpcap.schedule.limits.MAX_STATE_BYTES`), not a fault: counted long, not run.
#: The estimate leaves out the queued fabric's own arrays (global_batch_size 512 of the fuzz
#: scenario on it: 133 MB estimated, a 517 MB peak with the worker's; benchmarks/README.md);
#: there the announced time holds the job back first (1024: about 77 s, past half the limit).
NUMERIC_STATE_BYTES = 700_000_000


class LongAnnounced(BaseException):
    """A step of a case announced (:mod:`tokenpcap.stages`) an estimate past half the case's
    limit: the run is stopped there and counted as long, not hung."""


def _stop_if_long(line: str) -> None:
    """Stage-line sink: a line with an estimate (every line but those of steps without one,
    which end with ``...``) reaches it only at or past the listener's threshold."""
    if not line.endswith("..."):
        raise LongAnnounced(line)


def _estimated_state_bytes(scenario: Path, sets: list[str]) -> int:
    """The engine's estimate of the state ``plan --time`` builds for ``scenario`` with
    ``sets`` (:func:`tokenpcap.schedule.limits.estimate_work`, keeping only the messages in
    progress as ``plan --time`` does); 0 when the scenario does not load or plan: the
    command's own run then says why."""
    from tokenpcap.config import overrides as ov
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work

    try:
        with ov.using(dict(ov.parse_set(t) for t in sets)):
            plan = build_plan(load_scenario(scenario))
        return estimate_work(plan, 1, nvlink=False, keep_messages=False).memory_bytes
    except Exception:           # noqa: BLE001 - the command's run below reports it
        return 0


def _run_numeric(data: bytes, work: Path) -> str:
    """``"ok"``, ``"error"``, or ``"long"``: a job past the case's budget by the engine's own
    estimates, not run to the end: its engine state past :data:`NUMERIC_STATE_BYTES`, or the
    time it announced past half :data:`NUMERIC_LIMIT_S` (the estimate is "about": within 2x
    of the run, tests/schedule/test_limits.py; the user was told the run is long), stopped at
    the announcement instead of timed out as a hang."""
    from tokenpcap.stages import listening

    case = json.loads(data)
    scenario = _scenario_file(work)
    sets = [*_BASES[case["base"]], *case["sets"]]
    if _estimated_state_bytes(scenario, sets) > NUMERIC_STATE_BYTES:
        return "long"
    args = ["plan", str(scenario), "--time", "--json", "--quiet"]
    for s in sets:
        args += ["--set", s]
    try:
        with listening(_stop_if_long, after_s=NUMERIC_LIMIT_S / 2):
            r = _invoke(args)
    except LongAnnounced:
        return "long"
    if r.exit_code != 0:
        return _one_error_line(r, f"plan {case}")
    it = json.loads(r.stdout)["iteration"]
    parts = list(it["parts_ns"].values())
    if not (isinstance(it["iteration_ns"], int) and 0 <= it["iteration_ns"] < INT64
            and all(isinstance(v, int) and 0 <= v for v in parts)
            and sum(parts) == it["iteration_ns"] and 0 <= it["mfu"] <= 1):
        raise WrongOutput(f"plan {case}: iteration {it}")
    return "ok"


# -- output paths -------------------------------------------------------------------------------

#: name -> argv after the command name (``{out}``: the output; ``{scen}``, ``{cap}``: inputs)
_PATH_COMMANDS = {
    "generate": ["generate", "{scen}", "--scale", "64", "--nics", "0", "--snaplen", "64",
                 "-o", "{out}"],
    "readdress": ["readdress", "{cap}", "--dscp", "26", "-o", "{out}"],
    "plot": ["plot", "{cap}", "-o", "{out}"],
    "export-csv": ["export", "{scen}", "--to", "csv", "-o", "{out}"],
    "export-hpcc": ["export", "{scen}", "--to", "hpcc", "-o", "{out}"],
    "export-simai": ["export", "{scen}", "--to", "simai", "-o", "{out}"],
    "export-chakra": ["export", "{scen}", "--to", "chakra", "-o", "{out}"],
    "compare-plot": ["compare", str(SCENARIOS / "incast-8x1m-hpcc-ns3.yaml"), "--hpcc-fct",
                     str(CASES / "hpcc" / "incast8x1m-pfc-fct.txt"), "--plot", "{out}"],
}
_NAME_PIECES = (b"a", b"\xc3\xa9", b"\xf0\x9f\x98\x80", b"\xff", b"\xfe\x80", b"\n", b"\t",
                b" ", b"-", b".", b"%s", b"\\", b"\x1b[31m")


def _make_path(rng: random.Random, work: Path) -> bytes:
    nm = os.pathconf(work, "PC_NAME_MAX")
    size = rng.choice((1, 8, nm - 30, nm - 24, nm - 23, nm - 22, nm - 14, nm - 13, nm - 1, nm,
                       nm + 1, nm + 2, 300, 1000))
    piece = rng.choice(_NAME_PIECES)
    name = (piece * (max(1, size) // len(piece) + 1))[:max(1, size)]
    if rng.random() < 0.5:
        name += rng.choice((b".pcap", b".pcapng", b".csv", b".txt", b""))
    depth = rng.choice((0, 0, 0, 1, 3, 25))         # 25 x 200 bytes: past PATH_MAX (4096)
    return json.dumps({"cmd": rng.choice(sorted(_PATH_COMMANDS)), "name": name.hex(),
                       "depth": depth}).encode()


def _small_capture(work: Path) -> Path:
    from tests.analysis.trace import write_trace

    p = work / "small.pcapng"
    if not p.exists():
        write_trace(p, 64, qps=2, fmt="pcapng")
    return p


def _run_path(data: bytes, work: Path) -> str:
    case = json.loads(data)
    outdir = work / "out"
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir()
    out = os.fsencode(outdir) + b"".join(b"/" + b"d" * 200 for _ in range(case["depth"]))
    out += b"/" + bytes.fromhex(case["name"])
    fill = {"out": os.fsdecode(out), "scen": str(_scenario_file(work)),
            "cap": str(_small_capture(work))}
    r = _invoke([a.format(**fill) for a in _PATH_COMMANDS[case["cmd"]]])
    left = os.listdir(os.fsencode(outdir))
    shutil.rmtree(outdir, ignore_errors=True)
    if r.exit_code == 0:
        if not left:
            raise WrongOutput(f"{case['cmd']} exited 0 and wrote nothing")
        return "ok"
    _one_error_line(r, f"{case['cmd']} -o {out[-40:]!r}")
    if left:
        raise WrongOutput(f"{case['cmd']} failed and left {left[:3]}")
    return "error"


# -- many sections, many flows ------------------------------------------------------------------

def _make_many(rng: random.Random, work: Path) -> bytes:
    kind = rng.choice(("sections", "flows"))
    n = rng.choice((1, 2, 100, 1000, 6000)) if kind == "sections" else rng.choice(
        (1, 1000, 100_000, 262_144, 262_145, 400_000))
    return json.dumps({"kind": kind, "n": n, "seed": rng.randrange(1 << 30),
                       "huge_provenance": rng.random() < 0.3}).encode()


def _sections_file(path: Path, n: int, seed: int, huge: bool) -> int:
    """``n`` sections of one SHB (a provenance comment naming huge ranges if ``huge``), one IDB
    of a random ``if_tsresol`` and one EPB 1 µs after the last; returns the file's bytes."""
    from tests.fuzzing import _frames
    from tests.pcap.helpers import epb, idb, option, shb
    from tokenpcap.records.provenance import MAX_INDEX, provenance_comment

    rng = random.Random(seed)
    frame = _frames(path.parent)[0]
    comment = b""
    if huge:
        text = provenance_comment(scenario="fuzz", scale=1, iterations=(0, 1), split="none",
                                  snaplen=262144, seed=0, clear_to_send=True)
        text = text.replace("nics=all", f"nics=0-{MAX_INDEX}").replace(
            "ranks=all", f"ranks=0-{MAX_INDEX},{MAX_INDEX - 1}")
        comment = option("<", 1, text.encode()) + struct.pack("<HH", 0, 0)
    with open(path, "wb") as f:
        for i in range(n):
            res = rng.choice((6, 9, 3, 0x80 | 20))
            per_s = 10 ** res if res < 0x80 else 1 << (res & 0x7F)
            ticks = (1_700_000_000 + i) * per_s + i * per_s // 1_000_000
            f.write(shb("<", comment if i == 0 else b"") + idb("<", 1, 0, tsresol=res) +
                    epb("<", 0, ticks, frame))
    return path.stat().st_size


def _run_many(data: bytes, work: Path) -> str:
    from tests.analysis.trace import write_trace
    from tokenpcap.analysis.inspect import inspect_captures
    from tokenpcap.analysis.plot_series import capture_series
    from tokenpcap.analysis.report import render_text
    from tokenpcap.cli.inspect_cmd import write_json

    case = json.loads(data)
    n = case["n"]
    if case["kind"] == "sections":
        path = work / "many.pcapng"
        size = _sections_file(path, n, case["seed"], case["huge_provenance"])
    else:
        path = work / "many.pcap"
        write_trace(path, n, qps=n, snaplen=64)
        size = path.stat().st_size
    rep = inspect_captures([path])
    if rep.packets != n:
        raise WrongOutput(f"inspect counted {rep.packets} of {n} packets ({case})")
    render_text(rep)
    out = io.StringIO()
    write_json(rep.to_json(lazy_flows=True), out)
    if len(out.getvalue()) > 64 * size + (1 << 16):
        raise WrongOutput(f"inspect --json wrote {len(out.getvalue()):,} bytes for a file of "
                          f"{size:,} ({case})")
    s = capture_series(path, bins=16)
    got = sum(int(v.sum()) for v in s["throughput"].values())
    path.unlink()
    if got <= 0:
        raise WrongOutput(f"plot's series hold {got} bytes of {n} packets ({case})")
    return "ok"


SURFACES: dict[str, Surface] = {
    "simai": Surface(lambda rng, w: mutate_cells(seed_file(rng, "simai/*.csv"), rng, ","),
                     run_simai, 10.0),
    "fct": Surface(lambda rng, w: mutate_cells(seed_file(rng, "hpcc/*-fct.txt"), rng, None),
                   run_fct, 10.0),
    "pfc": Surface(make_pfc, run_pfc, 10.0),
    "numeric": Surface(_make_numeric, _run_numeric, NUMERIC_LIMIT_S),
    "path": Surface(_make_path, _run_path, 120.0),
    "signal": Surface(make_signal, run_signal, 180.0, wall=True),
    "many": Surface(_make_many, _run_many, 300.0),
}


def run_surface(target: str, data: bytes, work: Path) -> str:
    """Run a case of surface ``target`` (module docstring): ``"ok"``, ``"error"`` or
    ``"long"``; a :class:`~tokenpcap.errors.TokenpcapError` of more than one line, or any
    other exception, escapes as a crash."""
    from tokenpcap.errors import TokenpcapError

    work.mkdir(parents=True, exist_ok=True)
    try:
        return SURFACES[target].run(data, work)
    except TokenpcapError as err:
        text = str(err)
        if "\n" in text or not text:
            raise WrongOutput(f"error message of {len(text.splitlines())} lines: {text[:200]!r}")
        return "error"
