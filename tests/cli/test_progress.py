"""Stage lines on stderr (not a terminal under CliRunner, as in a log file or CI): generate,
run, plot, export and trace say what each long step does and its estimate, stdout keeps only the
results, and --quiet prints none. Every step counts as long here (the threshold set to 0), so
that a small scenario shows what a large one does."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.cli import main
from tokenpcap.cli import progress
from tokenpcap.stages import duration_text, listening, stage


@pytest.fixture
def scen(tmp_path):  # type: ignore[no-untyped-def]
    return str(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8))


@pytest.fixture
def every_step(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(progress, "AFTER_S", 0.0)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("tokenpcap: ")]


@pytest.mark.parametrize("cmd, last", [
    (["export", "{s}", "--to", "csv", "-o", "{o}/m.csv"], "tokenpcap: writing csv to "),
    (["plot", "{s}", "-o", "{o}", "--scale", "64"], "tokenpcap: drawing the timeline of "),
    (["generate", "{s}", "-o", "{o}/g", "--scale", "64"], "tokenpcap: timing "),
    (["run", "{s}", "-o", "{o}/r", "--scale", "64", "--jobs", "1"], "tokenpcap: timing "),
    (["trace", "{s}", "Nel mezzo del cammin", "--scale", "64"], "tokenpcap: timing "),
])
def test_long_commands_print_stage_lines_on_stderr_off_a_terminal(tmp_path, scen, every_step,
                                                                   cmd, last):
    args = [a.format(s=scen, o=tmp_path) for a in cmd]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = _lines(r.stderr)
    assert lines[0].startswith("tokenpcap: planning ") and "(8 GPUs" in lines[0]
    timing = [x for x in lines if x.startswith("tokenpcap: timing ")]
    assert len(timing) == 1 and ", about " in timing[0]
    assert any(x.startswith(last) for x in lines), lines
    assert not _lines(r.stdout)                     # results alone on stdout
    if cmd[0] == "export":
        q = CliRunner().invoke(main, [a.format(s=scen, o=tmp_path / "q") for a in cmd]
                               + ["--quiet"])
        assert q.exit_code == 0 and not _lines(q.stderr), q.stderr
        assert q.stdout == r.stdout.replace(str(tmp_path), str(tmp_path / "q"))


def test_the_timing_estimate_is_the_engines(tmp_path, scen, every_step):
    """The number of messages on the timing line is the work estimate's (the schedule's own
    count: tests/schedule/test_limits.py)."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work

    w = estimate_work(build_plan(load_scenario(scen)), 1)
    r = CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o", str(tmp_path / "m.csv")])
    assert f"tokenpcap: timing {w.messages:,} messages, about {duration_text(w.seconds)}" \
        in r.stderr


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
        assert "--quiet" in {o for p in main.commands[name].params for o in p.opts}, name


def test_stage_without_a_listener_prints_nothing(capsys):
    stage("nobody listens")
    assert capsys.readouterr() == ("", "")
    assert Path(progress.__file__).name == "progress.py"


def test_a_compile_of_the_engine_is_a_stage_of_its_own(tmp_path, scen, every_step, monkeypatch):
    """When numba compiles while the engine times the run (something not in its on-disk cache:
    here a function compiled for the first time at the entry point's call), a stage line says
    so, with an estimate, after the timing line; the timing line says nothing of it."""
    from numba import njit

    from tokenpcap.schedule.engine import kernel

    real = kernel.run
    fresh = njit(lambda x: x + 1)           # compiled at its first call

    def run(*args):
        fresh(1)
        return real(*args)

    monkeypatch.setattr(kernel, "run", run)
    r = CliRunner().invoke(main, ["export", scen, "--to", "csv", "-o", str(tmp_path / "m.csv")])
    assert r.exit_code == 0, r.output
    lines = _lines(r.stderr)
    (at,) = [i for i, x in enumerate(lines) if "compiling" in x]
    assert re.fullmatch(r"tokenpcap: compiling the timing engine, once per machine, about "
                        r"\d+ (s|min)", lines[at]), lines[at]
    assert lines[at - 1].startswith("tokenpcap: timing ") and "compil" not in lines[at - 1]
