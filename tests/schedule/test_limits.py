"""The work estimate of a run (tokenpcap.schedule.limits) against what the engine really does:
the schedule's message and NVLink-copy counts are the independent source; the limits refuse the
bundled GPT-3 175B scenario (84 M messages per iteration) before any simulation with advice
that works (the scale it names is accepted), and accept the scenarios that run."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.schedule.limits import MAX_MESSAGES, check_work, estimate_work
from tokenpcap.records import KIND_DATA
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


@pytest.mark.parametrize("scale,iterations", [(1, 1), (16, 2)])
def test_estimate_counts_what_the_schedule_simulates(scale, iterations):
    plan = build_plan(load_scenario(SCEN / "dante.yaml"), scale=scale)
    w = estimate_work(plan, iterations)
    sched = Schedule(plan, iterations=iterations)
    packets = sum(len(tx) for tx in sched.run())
    m = sched.messages
    assert w.messages == len(m)                                   # data + clear-to-send
    assert w.messages == 2 * int((m["kind"] == KIND_DATA).sum())
    assert w.nvlink_copies == len(sched.nvlink)
    assert w.calls == len(sched._calls)
    assert w.packets == packets                  # one ACK per message: exact for Dante
    assert w.memory_bytes > 0 and w.seconds > 0


def test_gpt3_175b_is_refused_before_simulating():
    plan = build_plan(load_scenario(SCEN / "gpt3-175b-megatron.yaml"))
    with pytest.raises(InfeasiblePlanError) as info:
        check_work(plan, 1)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("gpt3-175b-megatron: too large for the timing engine: "
                          "56,929,152 RDMA messages need about ")
    # what fits, as the refusal says: the same iteration without clear-to-send writes
    assert "the scenario with generation.clear_to_send: false fits (28,464,576 messages" in msg
    assert 28_464_576 <= MAX_MESSAGES


def test_many_iterations_of_a_small_scenario_hit_the_call_limit():
    plan = build_plan(load_scenario(SCEN / "dante.yaml"))
    with pytest.raises(InfeasiblePlanError, match=r"2,312,000 collective calls over 1000 "
                                                  r"iterations \(limit 2,000,000"):
        check_work(plan, 1000)


@pytest.mark.parametrize("name", ["dante", "gpt2-all-cross", "llama2-7b-a100-ib"])
def test_bundled_runnable_scenarios_pass(name):
    work = check_work(build_plan(load_scenario(SCEN / f"{name}.yaml")), 1)
    assert work.messages <= MAX_MESSAGES


def test_generate_refuses_before_writing_anything(tmp_path, monkeypatch):
    from tokenpcap.schedule import limits as generate_limits

    monkeypatch.setattr(generate_limits, "MAX_MESSAGES", 10)
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(InfeasiblePlanError, match=r"cross: too large .* \(limit 10 messages"):
        generate(load_scenario(path), GenerateOptions(out_dir=out, jobs=1))
    assert not list(out.iterdir())


def test_the_floor_of_messages_does_not_depend_on_the_scale_asked_for():
    """The 'at any scale' count comes from the smallest calls whatever --scale is given: the
    same for GPT-3 175B at --scale 1000 and 100000 (computed from the scaled plan it would be
    34,374,176 and 34,401,536)."""
    from tokenpcap.schedule.limits import _messages_at_any_scale

    s = load_scenario(SCEN / "gpt3-175b-megatron.yaml")
    floors = {k: _messages_at_any_scale(build_plan(s, scale=k), 1) for k in (1, 1000, 100_000)}
    assert len(set(floors.values())) == 1
    assert floors[1] <= estimate_work(build_plan(s, scale=10 ** 9), 1, nvlink=False).messages
    with pytest.raises(InfeasiblePlanError, match="the scenario with generation.clear_to_send: false fits"):
        check_work(build_plan(s, scale=1), 1)
