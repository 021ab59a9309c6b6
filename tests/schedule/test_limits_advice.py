"""The advice of a refusal (tokenpcap.schedule.limits) on small jobs: the smallest --scale that
fits, found by bisecting the powers of ten, is the one a scan of every power finds; a job that
needs its microbatches in whole groups (the interleaved schedule: a multiple of pp, Megatron-LM's
rule) is told a global batch of whole groups, which loads and is accepted."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule import limits
from tokenpcap.schedule.limits import (
    _smallest_scale,
    _work_at_any_scale,
    check_work,
    estimate_work,
)
from tokenpcap.schedule.memory import engine_run

SCEN = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def test_the_smallest_scale_is_the_first_power_of_ten_that_fits(monkeypatch):
    """Dante's work at --scale 10**e for every e (a scan, the independent count): with the
    limit between the work at two neighbouring powers where it drops, the bisection returns the
    larger power, and the messages of its plan; below the work at every power, None."""
    s = load_scenario(SCEN / "dante.yaml")
    work = {e: estimate_work(build_plan(s, scale=10 ** e), 1, nvlink=False, run=engine_run())
            for e in range(1, 11)}
    drops = [e for e in range(1, 10) if work[e].memory_bytes > work[e + 1].memory_bytes]
    assert len(drops) >= 2
    plan = build_plan(s)
    for e in drops:
        limit = (work[e].memory_bytes + work[e + 1].memory_bytes) // 2
        monkeypatch.setattr(limits, "MAX_STATE_BYTES", limit)
        want = min(k for k in range(1, 11) if work[k].memory_bytes <= limit)
        assert want == e + 1
        assert _smallest_scale(plan, 1, engine_run()) == (10 ** want, work[want].messages)
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", work[10].memory_bytes - 1)
    assert _smallest_scale(plan, 1, engine_run()) is None


def test_an_interleaved_job_is_told_a_global_batch_of_whole_groups_of_pp_microbatches(
        tmp_path, monkeypatch):
    """pp 2 with two model chunks a stage: 2, 4 or 6 microbatches load, an odd count does not.
    With a state limit between the floors at any scale of 4 and 6 microbatches, the advice is
    4 of 6 (global batch 16), and following it is accepted."""
    path = tiny_scenario(tmp_path, "vpp", 4, 1, 2, 24,
                         par=", virtual_pipeline_model_parallel_size: 2, zero_stage: 1")
    no_cts = {"generation.clear_to_send": False}

    def floor(m: int) -> int:
        s = load_scenario(path, {**no_cts, "training.global_batch_size": 4 * m})
        return _work_at_any_scale(build_plan(s), 1, engine_run()).memory_bytes

    floors = {m: floor(m) for m in (2, 4, 6)}
    assert floors[2] < floors[4] < floors[6]
    with pytest.raises(InfeasiblePlanError, match="a multiple of pp 2"):
        load_scenario(path, {**no_cts, "training.global_batch_size": 4 * 5})
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", (floors[4] + floors[6]) // 2)
    with pytest.raises(InfeasiblePlanError, match="--scale cannot help") as info:
        check_work(build_plan(load_scenario(path, no_cts)), 1)
    msg = str(info.value)
    assert "--set training.global_batch_size=16 (4 of 6 microbatches) --scale " in msg, msg
    m = re.search(r"global_batch_size=(\d+) .* --scale (\d+) fits", msg)
    followed = load_scenario(path, {**no_cts, "training.global_batch_size": int(m.group(1))})
    check_work(build_plan(followed, scale=int(m.group(2))), 1)             # accepted
