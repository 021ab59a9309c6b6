"""The memory estimate per run kind (tokenpcap.schedule.memory) and the guard that checks it: every
command that runs the schedule names its kind; a run whose kind's estimate passes the limit is
refused in one line that names the kind, the estimate and a ``--scale`` that fits, which is then
accepted; a job the engine-only estimate accepts is refused when what its kind holds per
message is counted (the issue this guards against: plots and exports of Llama-3 70B at 64k
tokens peaking at 2.7-4x the engine's estimate)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.schedule.test_limits import _follow
from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule import limits
from tokenpcap.schedule.limits import check_work, estimate_work
from tokenpcap.schedule.memory import COMPILE_BYTES, RUN_KINDS, run_kind

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


def test_every_export_that_runs_the_schedule_has_a_run_kind_and_no_other():
    from tokenpcap.export.core import EXPORTS

    scheduled = {f"export --to {n}" for n, f in EXPORTS.items() if not f.plan_only}
    assert scheduled == {k for k in RUN_KINDS if k.startswith("export --to ")}
    assert {"generate", "plot", "trace", "compare"} <= set(RUN_KINDS)
    assert not run_kind("generate").keep_messages
    assert all(k.keep_messages for n, k in RUN_KINDS.items() if n != "generate")


def test_a_first_run_adds_the_compile_to_the_base_only():
    for name in RUN_KINDS:
        first, cached = run_kind(name, compiling=True), run_kind(name)
        assert first.base_bytes == cached.base_bytes + COMPILE_BYTES
        assert first.message_bytes == cached.message_bytes


def test_a_kinds_estimate_adds_its_base_and_bytes_per_message_to_the_engines_state():
    """Dante's one iteration has 6,240 RDMA messages (3,120 data messages and their
    clear-to-send writes: the README's count); each kind's estimate is the engine's state plus
    its base plus that many times its bytes per message."""
    plan = build_plan(load_scenario(SCEN / "dante.yaml"))
    engine_only = estimate_work(plan, 1, nvlink=False)
    for name, kind in RUN_KINDS.items():
        w = estimate_work(plan, 1, nvlink=False, run=kind)
        assert w.messages == 6_240
        assert w.keep_messages == kind.keep_messages
        kept = engine_only.engine_bytes - (0 if kind.keep_messages else
                                           6_240 * limits.MESSAGE_ROW_BYTES)
        assert w.memory_bytes == kept + kind.base_bytes + 6_240 * kind.message_bytes, name


def _refusal(tmp_path, args, monkeypatch, limit: int):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", limit)
    r = CliRunner().invoke(main, args)
    return r


@pytest.mark.parametrize("kind,args", [
    ("plot", ["plot", "{s}", "-o", "{o}"]),
    ("export --to csv", ["export", "{s}", "--to", "csv", "-o", "{o}/m.csv"]),
    ("export --to parquet", ["export", "{s}", "--to", "parquet", "-o", "{o}/m.parquet"]),
    ("trace", ["trace", "{s}", "Nel mezzo del cammin"]),
    ("generate", ["generate", "{s}", "-o", "{o}", "--jobs", "1"]),
])
def test_a_run_past_its_kinds_estimate_is_refused_in_one_line_naming_the_kind(
        tmp_path, monkeypatch, kind, args):
    """With the limit between the engine's state and the kind's estimate (what the guard
    checked before: it accepted this run), the command exits 1 with one line naming the run
    kind and its estimate (with the engine's compile when it is not cached yet), before
    anything is written."""
    scen = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    from tokenpcap.schedule.engine.compiled import engine_compiled

    w = estimate_work(build_plan(load_scenario(scen)), 1, nvlink=False,
                      run=run_kind(kind, compiling=not engine_compiled()))
    limit = (w.engine_bytes + w.memory_bytes) // 2
    assert w.engine_bytes < limit < w.memory_bytes
    out = tmp_path / "out"
    r = _refusal(tmp_path, [a.format(s=scen, o=out) for a in args], monkeypatch, limit)
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cross: too large"), r.output
    assert f"need about {w.memory_bytes / 1e9:,.1f} GB of memory as `{kind}` runs it" in lines[0]
    assert not out.exists() or not list(out.rglob("*.*"))


def test_llama3_70b_64k_plot_and_parquet_accepted_by_the_engines_state_are_refused(monkeypatch):
    """``plot`` and ``export --to parquet`` of llama3-70b-64k-cp4 at --scale 10 (18,974,118
    messages kept) need about 3.9 GB of engine state, within a limit of 8 GB (the limit pinned
    here: the machine's share is larger on a large machine), and peaked at 9.7 and 14.5 GB when
    the guard checked only that: as their kinds run them they are refused at that limit, and
    what the refusal names (a --set or --scale) is accepted for the same kind."""
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", 8_000_000_000)
    s = load_scenario(SCEN / "llama3-70b-64k-cp4.yaml")
    plan = build_plan(s, scale=10)
    assert check_work(plan, 1).messages == 18_974_118              # the engine alone: accepted
    for kind in ("plot", "export --to parquet"):
        with pytest.raises(InfeasiblePlanError, match=rf"as `{re.escape(kind)}` runs it .*"
                                                      r"(--scale|--set) .* fits") as info:
            check_work(plan, 1, run=run_kind(kind))
        assert float(re.search(r"need about ([\d.,]+) GB", str(info.value)).group(1)) > 8
        advice = str(info.value)
        if "--set generation.clear_to_send=false fits" in advice:       # at the same --scale
            followed = build_plan(load_scenario(s.path, {"generation.clear_to_send": False}),
                                  scale=10)
            its = 1
        else:
            followed, its = _follow(s, advice, 1)
        assert check_work(followed, its, run=run_kind(kind)).memory_bytes <= limits.MAX_STATE_BYTES
