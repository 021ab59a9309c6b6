"""Stage lines on stderr (not a terminal under CliRunner, as in a log file or CI): generate,
run, plot, export and trace say what each long step does and its estimate, stdout keeps only the
results, and --quiet prints none. Every step counts as long here (the threshold set to 0), so
that a small scenario shows what a large one does."""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.cli import main
from tokenpcap.cli import progress
from tokenpcap.cli.progress import count_text
from tokenpcap.stages import Count, about, counting, duration_text, listening, stage, wall_seconds


@pytest.fixture
def scen(tmp_path):  # type: ignore[no-untyped-def]
    return str(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8))


@pytest.fixture
def big_scen(tmp_path):  # type: ignore[no-untyped-def]
    """The same at 64 samples a batch: its timing lasts tens of milliseconds."""
    return str(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=64))


@pytest.fixture
def every_step(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(progress, "AFTER_S", 0.0)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("tokenpcap: ")]


HPCC = Path(__file__).resolve().parents[1] / "cases" / "hpcc"

#: Every command that times a job: its arguments ({s} the scenario, {o} a directory) and the
#: line of the step after the timing, if it has one.
COMMANDS = [
    (["export", "{s}", "--to", "csv", "-o", "{o}/m.csv"], "tokenpcap: writing csv to "),
    (["plot", "{s}", "-o", "{o}", "--scale", "64"], "tokenpcap: drawing the timeline of "),
    (["generate", "{s}", "-o", "{o}/g", "--scale", "64"], "tokenpcap: writing the last packets"),
    (["run", "{s}", "-o", "{o}/r", "--scale", "64", "--jobs", "1"],
     "tokenpcap: writing the last packets"),
    (["trace", "{s}", "Nel mezzo del cammin", "--scale", "64"], None),
    (["plan", "{s}", "--time"], None),
    (["compare", str(HPCC / "dante-flows.yaml"), "--hpcc-fct",
      str(HPCC / "dante-scale64-fct.txt"), "--scale", "64"], None),
]


@pytest.fixture
def counted(monkeypatch):  # type: ignore[no-untyped-def]
    """A progress line at every poll of the count (a millisecond apart)."""
    monkeypatch.setattr(progress, "EVERY_S", 0.0)


def _progress(lines: list[str]) -> tuple[list[str], list[str]]:
    """The timing's periodic progress lines and its final ones."""
    pat = re.compile(r"tokenpcap: timing: ([\d,]+) of ([\d,]+) messages \((\d+) %\)")
    got = [x for x in lines if pat.match(x)]
    return [x for x in got if ", done in " not in x], [x for x in got if ", done in " in x]


@pytest.mark.parametrize("cmd, last", COMMANDS, ids=lambda c: c[0] if isinstance(c, list) else "")
def test_long_commands_print_stage_lines_and_progress_off_a_terminal(tmp_path, big_scen,
                                                                     every_step, counted,
                                                                     cmd, last):
    """Off a terminal (CliRunner's stderr is not one): the stage lines (planning, building,
    timing with its estimate), the timing's progress as plain lines with the time left, its
    final line with the count the work estimate gave, the results alone on stdout; with
    --quiet, none of it and the same stdout."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work

    out = tmp_path / "out"
    out.mkdir()
    args = [a.format(s=big_scen, o=out) for a in cmd]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = _lines(r.stderr)
    assert lines[0].startswith("tokenpcap: planning ")
    assert any(x.startswith("tokenpcap: building the timing engine's state: ") for x in lines)
    timing = [x for x in lines if x.startswith("tokenpcap: timing ")]
    assert len(timing) == 1 and re.search(r", (about \d|under a second)", timing[0]), timing
    scale = int(args[args.index("--scale") + 1]) if "--scale" in args else 1
    sc = load_scenario(args[1])
    messages = estimate_work(build_plan(sc, scale=scale), 1).messages
    # a job whose replicas are translates of each other, timed through one of its dp replicas
    # (tokenpcap.schedule.replicas: plan --time keeps no row of every message), times 1/dp
    one = re.search(r"\(data-parallel index 0 of (\d+) replicas", timing[0])
    if one:
        assert int(one.group(1)) == sc.parallelism.dp and cmd[0] == "plan", timing[0]
        messages //= sc.parallelism.dp
    assert timing[0].startswith(f"tokenpcap: timing {messages:,} messages")
    periodic, final = _progress(lines)
    assert final == [x for x in final if x.startswith(
        f"tokenpcap: timing: {messages:,} of {messages:,} messages (100 %), done in ")]
    assert len(final) == 1, lines
    assert periodic, lines                          # polled every millisecond
    for x in periodic:
        assert x.split("; ")[0].endswith(" left") or "the rate not known yet" in x, x
        done, total = (int(v.replace(",", "")) for v in x.split(": ")[2].split(" messages")[0]
                       .split(" of "))
        assert 0 <= done <= total == messages
    if last is not None:
        assert any(x.startswith(last) for x in lines), lines
    assert lines.index(timing[0]) < lines.index(final[0])
    assert not _lines(r.stdout)                     # results alone on stdout
    shutil.rmtree(out)                             # the same run again, quiet
    out.mkdir()
    q = CliRunner().invoke(main, args + ["--quiet"])
    assert q.exit_code == 0 and not _lines(q.stderr), q.stderr
    # the same results but the free space and the wall seconds
    assert re.sub(r"[\d,.]+", "N", q.stdout) == re.sub(r"[\d,.]+", "N", r.stdout)


def test_generate_says_what_it_writes_while_timing(tmp_path, scen, every_step, counted):
    """generate's timing step names the packets and files it writes meanwhile (as its own
    announcement on stdout predicts them), and its progress notes the packets written."""
    r = CliRunner().invoke(main, ["generate", scen, "-o", str(tmp_path / "g"), "--scale", "64",
                                  "--nics", "0,1"])
    assert r.exit_code == 0, r.output
    packets = re.search(r"writing 2 pcapng files to \S+: ([\d,]+) packets", r.stdout).group(1)
    (timing,) = [x for x in _lines(r.stderr) if x.startswith("tokenpcap: timing ")]
    assert f", writing {packets} packets to 2 files, " in timing
    (final,) = _progress(_lines(r.stderr))[1]
    assert final.endswith(f"; {packets} of {packets} packets written"), final


def test_the_timing_estimate_is_the_engines(tmp_path, scen, every_step, monkeypatch):
    """The number of messages on the timing line is the work estimate's (the schedule's own
    count: tests/schedule/test_limits.py), its time the estimate's CPU seconds stretched by the
    load (here 8 on 2 cores: sqrt(4) = 2x)."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work
    from tokenpcap.schedule.runner import Schedule

    monkeypatch.setattr(os, "getloadavg", lambda: (8.0, 1.0, 1.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    # the compiled engine's estimate (a first run of a job this small, numba's cache empty, is
    # timed uncompiled with its own estimate: tests/test_pipeline.py)
    monkeypatch.setattr(Schedule, "engine_cached", lambda self: True)
    w = estimate_work(build_plan(load_scenario(scen)), 1)
    r = CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o", str(tmp_path / "m.csv")])
    assert f"tokenpcap: timing {w.messages:,} messages, {about(2 * w.seconds)}" in r.stderr


@pytest.mark.parametrize("load, cores, factor", [(0.3, 2, 1), (2.0, 2, 1), (8.0, 2, 2),
                                                 (9.0, 4, 1.5)])
def test_wall_seconds_shares_the_cores_among_the_runnable(monkeypatch, load, cores, factor):
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert wall_seconds(10.0) == pytest.approx(10.0 * factor)


def test_counted_steps_report_the_count_on_a_thread_and_the_final_count():
    """A counted step: the meter gets the count every ``every_s`` while the caller works
    (without reporting anything itself), the time left at the rate so far, and the final
    count when the next step starts; a step ended early is not reported at all."""
    got: list[Count] = []
    done = [0]
    with listening(lambda line: None, after_s=0.0, meter=got.append, every_s=0.01):
        stage("timing 1,000 messages", seconds=5)
        counting("timing", 1000, "messages", lambda: done[0], lambda: f"{done[0]} noted")
        for k in range(1, 11):
            done[0] = 100 * k
            time.sleep(0.03)
        stage("writing")
    assert got[-1].final and got[-1].done == 1000 and got[-1].note == "1000 noted"
    ticks = got[:-1]
    assert len(ticks) >= 5 and not any(c.final for c in ticks)
    assert [c.done for c in ticks] == sorted(c.done for c in ticks)
    c = next(c for c in ticks if 0 < c.done < 1000)
    assert c.left_s() == pytest.approx(c.elapsed_s * (1000 - c.done) / c.done)
    assert count_text(c).startswith(f"timing: {c.done:,} of 1,000 messages "
                                    f"({c.done // 10} %), {about(c.left_s())} left")
    assert count_text(got[-1]).startswith("timing: 1,000 of 1,000 messages (100 %), done in ")
    cut: list[Count] = []
    with pytest.raises(KeyboardInterrupt):
        with listening(lambda line: None, after_s=0.0, meter=cut.append, every_s=10.0):
            stage("timing 9 messages", seconds=5)
            counting("timing", 9, "messages", lambda: 3)
            raise KeyboardInterrupt
    assert cut == []                                # stopped: not "done"
    late: list[Count] = []
    with listening(lambda line: None, after_s=10.0, meter=late.append, every_s=10.0):
        stage("quick")
        counting("timing", 5, "messages", lambda: 5)
    assert late == []


def test_short_steps_print_nothing_and_a_step_that_lasts_gets_its_line():
    got: list[str] = []
    with listening(got.append, after_s=0.05):
        stage("quick")
        stage("estimated", seconds=0.01)
        stage("slow")
        time.sleep(0.3)
        stage("long", seconds=100)
    assert got == ["slow ...", "long, about 2 min"]


@pytest.mark.parametrize("s, text", [(0.2, "under a second"), (40, "40 s"), (180, "3 min"),
                                     (5400, "1.5 h")])
def test_duration_text(s, text):
    assert duration_text(s) == text


def test_every_long_command_has_quiet():
    for name in ("generate", "run", "plot", "export", "trace", "compare"):
        assert "--quiet" in {o for p in main.get_command(None, name).params for o in p.opts}, name


def test_stage_without_a_listener_prints_nothing(capsys):
    stage("nobody listens")
    assert capsys.readouterr() == ("", "")
    assert Path(progress.__file__).name == "progress.py"


@pytest.mark.parametrize("compiled", [True, False])
def test_the_first_run_says_it_compiles_the_engine(tmp_path, scen, every_step, monkeypatch,
                                                   compiled):
    """The engine's kernels are loaded or compiled before the timing starts; when numba really
    compiles (its cache misses a signature of this run: a first run, or a first run of another
    kind), a line says the compile comes first, with its estimate (it is what the first run's
    minutes go into); with the cache there, nothing of it."""
    from tokenpcap.schedule.engine.compiled import compile_seconds
    from tokenpcap.schedule.runner import Schedule

    from numba import njit

    if compiled:
        # the engine really compiled in this process first (numba's cache may be empty here,
        # and a job this small is otherwise timed uncompiled, leaving the kernel to compile at
        # its first call below)
        monkeypatch.setattr(Schedule, "engine_cached", lambda self: True)
        assert CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o",
                                         str(tmp_path / "warm.csv")]).exit_code == 0
    compiles: list[int] = []
    helped: list[bool] = []

    def compile_engine(self, aside=None):    # numba's cache hit, or a real compile
        compiles.append(self.n_messages)
        helped.append(aside is not None)    # a helper process: the engine is not in the cache
        if not compiled:
            njit(lambda x: x + 1).compile("int64(int64)")

    monkeypatch.setattr(Schedule, "compile_engine", compile_engine)
    # the compiled engine's path (a first run of a job this small is otherwise timed
    # uncompiled: tests/test_pipeline.py)
    monkeypatch.setattr(Schedule, "engine_cached", lambda self: True)
    r = CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o", str(tmp_path / "m.csv")])
    assert r.exit_code == 0, r.output
    lines = _lines(r.stderr)
    said = [x for x in lines if x.startswith("tokenpcap: compiling the timing engine, once per "
                                             "machine, about ")]
    assert len(said) == (0 if compiled else 1), lines
    assert compiles == [0]                  # before the first message, cached or not
    if said:
        assert duration_text(compile_seconds(False, aside=helped[0])) in said[0]
        assert lines.index(said[0]) + 1 == lines.index(
            next(x for x in lines if x.startswith("tokenpcap: timing ")))


def test_on_a_terminal_a_counted_step_is_a_bar_that_ends_in_its_line():
    """On a terminal the count is a rich bar (the time left at the rate so far) that goes away
    when the step ends, leaving the final line."""
    import io

    from rich.console import Console

    term = progress._Terminal()
    buf = io.StringIO()
    term.console = Console(file=buf, force_terminal=True, width=120)
    term.meter(Count("timing", 25, 100, "messages", 3.0, "7 packets written"))
    assert term.bar is not None
    (task,) = term.bar.tasks
    assert (task.completed, task.total, task.fields["left"]) == (25, 100, "about 9 s left")
    term.meter(Count("timing", 100, 100, "messages", 4.0, final=True))
    assert term.bar is None
    assert "tokenpcap: timing: 100 of 100 messages (100 %), done in 4.0 s" in buf.getvalue()
    term.close()


def test_a_compile_of_the_engine_is_a_stage_of_its_own(tmp_path, scen, every_step, monkeypatch):
    """When numba compiles while the engine times the run (something not in its on-disk cache:
    here a function compiled for the first time at the entry point's call), a stage line says
    so, with an estimate, after the timing line; the timing line says nothing of it."""
    from numba import njit

    from tokenpcap.schedule.engine import kernel
    from tokenpcap.schedule.runner import Schedule

    real = kernel.run
    fresh = njit(lambda x: x + 1)           # compiled at its first call

    def run(*args):
        fresh(1)
        return real(*args)

    monkeypatch.setattr(kernel, "run", run)
    monkeypatch.setattr(Schedule, "compile_engine", lambda self, aside=None: None)  # nothing ahead
    monkeypatch.setattr(Schedule, "engine_cached", lambda self: True)   # the compiled engine
    r = CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o", str(tmp_path / "m.csv")])
    assert r.exit_code == 0, r.output
    lines = _lines(r.stderr)
    (at,) = [i for i, x in enumerate(lines) if "compiling" in x]
    assert re.fullmatch(r"tokenpcap: compiling the timing engine, once per machine, about "
                        r"\d+ (s|min)", lines[at]), lines[at]
    assert lines[at - 1].startswith("tokenpcap: timing") and "compil" not in lines[at - 1]
