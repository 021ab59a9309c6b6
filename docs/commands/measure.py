"""Re-make every number the command pages and the README quote, and rewrite their marked blocks.

A page marks what a command printed, or a number taken from it, between two HTML comments::

    <!-- measured:NAME -->
    ...text made by the block NAME below...
    <!-- /measured:NAME -->

(inline too: ``<!-- measured:NAME -->1.39 GB<!-- /measured:NAME -->``). Two kinds of block:

- **output** blocks hold what a command prints on the bundled Dante sample and small scenarios:
  counts of frames, bytes, messages and files, tables, filters. They are deterministic (same
  inputs and seed, same output) and cheap; ``--check`` re-makes them and fails on any difference,
  and ``tests/test_doc_numbers.py`` runs that check in CI.
- **timed** blocks hold wall time and peak RSS, and the counts of production runs too long for a
  test. They are re-made only by ``--timed`` and carry the date, the machine's cores and the load
  average (``/proc/loadavg``, as ``uptime`` prints it) before and after.

Every command runs as a user types it, from a scratch directory that links ``profiles``,
``samples`` and ``tests`` of this tree (so the pages show the same relative paths), stdout only,
with ``--quiet`` where the command has it; output blocks run in this process through click's
``CliRunner``, timed blocks in a fresh ``python3 -m tokenpcap`` process under ``/usr/bin/time``
(peak RSS: the largest of the process and its forked writers). Two things a run prints that do
not repeat are replaced by ``…``: the wall time of ``generate``/``run``'s summary and the free
disk bytes of its first line.

Usage (from the repository root)::

    python3 docs/commands/measure.py                 # rewrite the output blocks
    python3 docs/commands/measure.py --check         # exit 1 naming each block that differs
    nice python3 docs/commands/measure.py --timed    # also re-measure the timed blocks (minutes)
    nice python3 docs/commands/measure.py --timed --only generate-production

Raises (``--check``): nothing; prints a unified diff per differing block and exits 1.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runner import (BLOCKS, PAGES_DIR, ROOT, Timing, Workspace, block, check,  # noqa: E402,F401
                    excerpt, fence, made, page_blocks, pages, pcapng_comments, rewrite)

DANTE = "profiles/scenarios/dante.yaml"
VERSE = "Nel mezzo del cammin di nostra vita"


# ---- run ------------------------------------------------------------------------------------

def _run_tables(ws: Workspace) -> str:
    return ws.cli("run", "--quiet")


@block("run-size")
def _run_size(ws: Workspace) -> str:
    out = _run_tables(ws)
    m = re.search(r"packets ([\d,]+), file bytes ([\d,]+)", out)
    return f"{int(m.group(2).replace(',', '')) / 1e9:.2f} GB, {m.group(1)} frames"


@block("run-output")
def _run_output(ws: Workspace) -> str:
    out = _run_tables(ws)
    lines = out.splitlines()
    files = [i for i, l in enumerate(lines) if "dante_node" in l]
    keep = set(files[:2]) | set(files[-1:])
    return fence(["tokenpcap run"], excerpt(
        out, lambda i, l: i in keep or "dante_node" not in l))


@block("run-phases")
def _run_phases(ws: Workspace) -> str:
    out = _run_tables(ws)
    start = out.index("RDMA payload per phase")
    return "\n```\n" + "\n".join(l.rstrip() for l in out[start:].splitlines()) + "\n```\n"


def _first_runs(ws: Workspace) -> tuple["Timing", float, "Timing"]:
    """``run`` with the engine's numba cache of this tree removed (dante is timed uncompiled
    while a helper compiles the engine in the background), the seconds from its start until
    the background compile was done (its lock released), then again (from the cache); made
    once per workspace."""
    if "first" not in ws.cache:
        from tokenpcap.schedule.engine.compile_aside import LOCK_NAME

        cache = ROOT / "tokenpcap" / "schedule" / "engine" / "__pycache__"
        for f in [*cache.glob("*.nbi"), *cache.glob("*.nbc")]:
            f.unlink()
        t0 = time.perf_counter()
        first = ws.timed("run", "-o", "first", "--quiet")
        shutil.rmtree(ws.path / "first")
        with open(cache / LOCK_NAME, "a") as lock:     # the background compile's end
            fcntl.flock(lock, fcntl.LOCK_EX)
        ready_s = time.perf_counter() - t0
        again = ws.timed("run", "-o", "again", "--quiet")
        shutil.rmtree(ws.path / "again")
        ws.cache["first"] = (first, ready_s, again)
    return ws.cache["first"]


@block("run-first", "timed")
def _run_first(ws: Workspace) -> str:
    first, ready_s, again = _first_runs(ws)
    return (f"\n- first run, timed with the engine uncompiled while numba compiles it in the "
            f"background: {first.line()}; the compiled engine was in the cache {ready_s:.0f} s "
            f"after the run started;\n"
            f"- the same run again, the engine cached: {again.line()}.\n")


@block("run-time-short", "timed")
def _run_time_short(ws: Workspace) -> str:
    first, ready_s, again = _first_runs(ws)
    return (f"{again.wall_s:.0f} s of wall clock ({again.cpu_s:.1f} s of CPU) and "
            f"{again.peak_rss_bytes / 1e9:.2f} GB peak RSS; the first run on a machine times "
            f"the job with the timing engine uncompiled while numba compiles it in the "
            f"background and caches it on disk for the next runs: "
            f"{first.cpu_s:.0f} s of CPU, {first.wall_s:.0f} s of wall clock, the engine "
            f"cached {ready_s:.0f} s after the start (measured "
            f"{first.start} UTC on {os.cpu_count()} cores shared with other jobs, load average "
            f"{first.load_before}-{again.load_after})")


# ---- plan -----------------------------------------------------------------------------------

@block("plan-dante")
def _plan_dante(ws: Workspace) -> str:
    out = ws.cli("plan", DANTE, "--quiet")
    return fence([f"tokenpcap plan {DANTE}"], excerpt(
        out, lambda i, l: i < 2 or not l.startswith("│ tp/") and "NCCL protocol" not in l))


@block("plan-nics-dante")
def _plan_nics_dante(ws: Workspace) -> str:
    return fence([f"tokenpcap plan {DANTE} --nics"], excerpt(
        ws.cli("plan", DANTE, "--nics", "--quiet"), lambda i, l: True))


@block("plan-production", "timed")
def _plan_production(ws: Workspace) -> str:
    s = "profiles/scenarios/gpt3-175b-megatron.yaml"
    t = ws.timed("plan", s, "--no-tokens", "--quiet")
    return fence([f"tokenpcap plan {s} --no-tokens"], excerpt(
        t.stdout, lambda i, l: i < 2 or re.match(r"│ (pp|dp|emb)/", l) is not None
        or re.search(r"totals|NIC bytes \(all|pcap bytes|packets \(", l) is not None)) + \
        f"\n{t.line()}.\n"


# ---- generate -------------------------------------------------------------------------------

@block("generate-dante")
def _generate_dante(ws: Workspace) -> str:
    args = ("generate", DANTE, "-o", "out", "--nics", "0", "--quiet")
    return fence(["tokenpcap " + " ".join(args[:-1])], excerpt(ws.cli(*args), lambda i, l: True))


GENERATE_PRODUCTION = ("generate", "profiles/scenarios/llama3-70b-64n.yaml", "--nics", "0",
                       "--snaplen", "74", "--format", "pcap", "--jobs", "1", "-o", "l70",
                       "--quiet")


@block("generate-production", "timed")
def _generate_production(ws: Workspace) -> str:
    args = GENERATE_PRODUCTION
    t = ws.timed(*args, big=True)
    shutil.rmtree(ws.path / "l70", ignore_errors=True)
    summary = excerpt(t.stdout, lambda i, l: l.startswith(("writing", "packets", "(", "bytes")))
    return fence(["tokenpcap " + " ".join(args[:-1])], summary) + f"\n{t.line()}.\n"


@block("dask-worker-peak", "timed")
def _dask_worker_peak(ws: Workspace) -> str:
    t = ws.timed(*GENERATE_PRODUCTION, big=True)
    shutil.rmtree(ws.path / "l70", ignore_errors=True)
    return (f"{t.peak_rss_bytes / 1e9:.2f} GB peak RSS for one iteration, NIC 0 at "
            f"`--snaplen 74` (`tokenpcap {' '.join(GENERATE_PRODUCTION[:-3])}`: the work one "
            f"worker's task does for a shard of one NIC; measured {t.start} UTC at load "
            f"average {t.load_before}-{t.load_after}, 2 cores shared)")


@block("generate-refused", "timed")
def _generate_refused(ws: Workspace) -> str:
    s = "profiles/scenarios/deepseek-v3-2048.yaml"
    t = ws.timed("generate", s, "--iterations", "8", "--nics", "0", "-o", "ds", "--quiet",
                 expect_fail=True, big=True)
    err = next(l for l in t.stderr.splitlines() if l.startswith("error:"))
    left = "no directory left" if not (ws.path / "ds").exists() else "a directory left behind"
    return (fence([f"tokenpcap generate {s} --iterations 8 --nics 0 -o ds"], err)
            + f"\nExit 1, {left}; {t.line()}.\n")


@block("readme-comments")
def _readme_comments(ws: Workspace) -> str:
    ws.cli("generate", DANTE, "-o", "out", "--nics", "0", "--quiet")
    comments = pcapng_comments(ws.path / "out" / "dante_node00_nic0.pcapng")
    kinds = ((r"^pp/forward/SendRecv .* tokens ", ""), (r"^dp/backward/AllReduce ", ""),
             (r"^cts dp/backward/AllReduce ", "(clear-to-send: control)"),
             (r"^ack emb/backward/AllReduce ", "(ACK: control)"))
    texts = [(next(c for c in comments if re.match(pattern, c)), note) for pattern, note in kinds]
    width = max(len(t) for t, _ in texts) + 2
    lines = [f"{t:<{width}}{note}".rstrip() for t, note in texts]
    return "\n```\n" + "\n".join(lines) + "\n```\n"


# ---- inspect --------------------------------------------------------------------------------

@block("inspect-dante")
def _inspect_dante(ws: Workspace) -> str:
    ws.cli("generate", DANTE, "-o", "out", "--nics", "0", "--quiet")
    out = ws.cli("inspect", "out/dante_node00_nic0.pcapng", "--against", DANTE)
    lines = out.splitlines()
    flows = lines.index(next(l for l in lines if l.startswith("Flows")))
    return fence([f"tokenpcap inspect out/dante_node00_nic0.pcapng --against {DANTE}"], excerpt(
        out, lambda i, l: not (flows + 3 < i < flows + 22)))


# ---- plot -----------------------------------------------------------------------------------

@block("plot-dante")
def _plot_dante(ws: Workspace) -> str:
    ws.cli("generate", DANTE, "-o", "out", "--nics", "0", "--quiet")
    a = ws.cli("plot", DANTE, "-o", "pics", "--quiet")
    b = ws.cli("plot", "out", "-o", "pics", "--quiet")
    c = ws.cli("plot", "out", "-o", "pics", "--heatmap", "--fan-in", "--bin", "20000", "--quiet")
    return fence([f"tokenpcap plot {DANTE} -o pics", "tokenpcap plot out -o pics",
                  "tokenpcap plot out -o pics --heatmap --fan-in --bin 20000"],
                 a.rstrip() + "\n" + b.rstrip() + "\n" + c)


@block("plot-production", "timed")
def _plot_production(ws: Workspace) -> str:
    s = "profiles/scenarios/gpt3-175b-megatron.yaml"
    t = ws.timed("plot", s, "--scale", "1000", "-o", "pics-g3", "--quiet", big=True)
    shutil.rmtree(ws.path / "pics-g3")
    return fence([f"tokenpcap plot {s} --scale 1000 -o pics-g3"], t.stdout) + f"\n{t.line()}.\n"


# ---- export ---------------------------------------------------------------------------------

@block("export-dante")
def _export_dante(ws: Workspace) -> str:
    cmds = [("export", DANTE, "--to", "hpcc", "--scale", "64", "-o", "x/dante.txt"),
            ("export", DANTE, "--to", "csv", "-o", "x/dante.csv"),
            ("export", DANTE, "--to", "chakra", "-o", "x/chakra/dante")]
    body = "".join(ws.cli(*c, "--quiet") for c in cmds)
    files = [f for f in sorted((ws.path / "x").rglob("*")) if f.is_file()]
    et = [f for f in files if f.suffix == ".et"]
    sizes = [f"{f.stat().st_size:>11,}  {f.relative_to(ws.path)}" for f in files if f not in et]
    sizes.append(f"{sum(f.stat().st_size for f in et):>11,}  x/chakra/dante.<rank>.et "
                 f"({len(et)} files)")
    rows = (ws.path / "x" / "dante.csv").read_text().count("\n") - 1
    flows = int((ws.path / "x" / "dante.txt").read_text().split("\n", 1)[0])
    sizes.append(f"x/dante.csv: a header and {rows:,} rows, one per message; "
                 f"x/dante.txt: {flows:,} flows (its first line)")
    out = excerpt(body, lambda i, l: not re.search(r"dante\.([2-9]|\d\d)\.et", l))
    return fence(["tokenpcap " + " ".join(c) for c in cmds], out) + \
        fence(["ls -l x/ x/chakra/   # bytes"], "\n".join(sizes))


@block("export-production", "timed")
def _export_production(ws: Workspace) -> str:
    s = "profiles/scenarios/mixtral-8x7b-ep-64.yaml"
    t = ws.timed("export", s, "--to", "hpcc", "-o", "xm/mixtral.txt", "--quiet")
    n = int((ws.path / "xm" / "mixtral.txt").read_text().split("\n", 1)[0])
    size = (ws.path / "xm" / "mixtral.txt").stat().st_size
    shutil.rmtree(ws.path / "xm")
    return (fence([f"tokenpcap export {s} --to hpcc -o xm/mixtral.txt"], t.stdout)
            + f"\n{n:,} flows, {size:,} bytes in `xm/mixtral.txt`; {t.line()}.\n")


# ---- trace ----------------------------------------------------------------------------------

@block("trace-dante")
def _trace_dante(ws: Workspace) -> str:
    ws.cli("generate", DANTE, "-o", "outpp", "--phases", "pp", "--quiet")
    out = ws.cli("trace", DANTE, VERSE, "--capture", "outpp", "--quiet")
    lines = out.splitlines()
    nv = lines.index(next(l for l in lines if l.startswith("NVLink copies")))

    def keep(i: int, l: str) -> bool:
        return not (re.match(r"\s+[4-8]\s+id", l) or nv + 1 < i < nv + 7)
    return fence([f"tokenpcap generate {DANTE} -o outpp --phases pp",
                   f'tokenpcap trace {DANTE} "{VERSE}" --capture outpp'], excerpt(out, keep))


@block("trace-production", "timed")
def _trace_production(ws: Workspace) -> str:
    s = "profiles/scenarios/mixtral-8x7b-ep-64.yaml"
    t = ws.timed("trace", s, VERSE, "--quiet")
    out = excerpt(t.stdout, lambda i, l: not re.match(r"\s+\d+\s+id", l)
                  and not l.startswith("  node") and "copies," not in l)
    return fence([f'tokenpcap trace {s} "{VERSE}"'], out) + f"\n{t.line()}.\n"


# ---- compare --------------------------------------------------------------------------------

@block("compare-dante")
def _compare_dante(ws: Workspace) -> str:
    s = "tests/cases/hpcc/dante-flows.yaml"
    fct = "tests/cases/hpcc/dante-scale64-fct.txt"
    out = ws.cli("compare", s, "--scale", "64", "--hpcc-fct", fct, "--quiet")
    return fence([f"tokenpcap compare {s} --scale 64 --hpcc-fct {fct}"], out)


# ---- tokens, readdress ----------------------------------------------------------------------

@block("tokens-dante")
def _tokens_dante(ws: Workspace) -> str:
    a = ws.cli("tokens", "samples/divina_commedia.txt")
    b = ws.cli("tokens", "samples/divina_commedia.txt", "--tokenizer", "utf8")
    return fence(["tokenpcap tokens samples/divina_commedia.txt",
                  "tokenpcap tokens samples/divina_commedia.txt --tokenizer utf8"],
                 a.rstrip() + "\n" + excerpt(b, lambda i, l: re.search(
                     r"tokens  |bytes per token|sequences", l) is not None))


@block("readdress-dante")
def _readdress_dante(ws: Workspace) -> str:
    ws.cli("generate", DANTE, "-o", "out", "--nics", "0", "--quiet")
    args = ("readdress", "out/dante_node00_nic0.pcapng", "-o", "lab/nic0.pcapng", "--map",
            "198.18.0.1=10.0.0.1", "--map", "198.18.1.1=10.0.1.1", "--vlan", "100", "--pcp", "3")
    out = ws.cli(*args)
    return fence(["tokenpcap " + " ".join(args)], out)



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write; exit 1 on a difference")
    ap.add_argument("--timed", action="store_true", help="also re-measure the timed blocks")
    ap.add_argument("--only", action="append", default=[], help="only this block (repeat)")
    ap.add_argument("--lock", type=Path, help="a lock file held during each run of several GB "
                    "(e.g. /tmp/bigmem.lock on a shared machine)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tokenpcap-docs-") as tmp:
        ws = Workspace.make(Path(tmp))
        ws.lock = a.lock
        if a.check:
            problems = check(ws)
            print("\n\n".join(problems) or "every output block matches a fresh run")
            return 1 if problems else 0
        names = {n for n, (kind, _) in BLOCKS.items() if kind == "output" or a.timed}
        if a.only:
            names &= set(a.only)
        new = made(ws, names)
        for page in pages():
            text = page.read_text(encoding="utf-8")
            out = rewrite(text, new)
            if out != text:
                page.write_text(out, encoding="utf-8")
                print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
