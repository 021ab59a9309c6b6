"""The flat arrays of a run: the fast build (canonical call shapes, program templates) equals the
straightforward one (transfers per call, one program per rank) field by field, on the bundled
scenarios that exercise every kind of call: Dante (GPT-2 small, dp/tp/pp), gpt2-all-cross (every
group across nodes), Mixtral-8x7B with expert parallelism, Llama-3 8B with ZeRO-3, and the
NVLink-only calls timed as a whole."""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import shard_parameters
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.flat import CALL, Flat, flatten
from tokenpcap.schedule.runner import NVLINK_LATENCY_NS

ROOT = Path(__file__).resolve().parents[2]


def _inputs(name: str, scale: int):
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    plan = build_plan(s, scale=scale)
    pp = s.parallelism.pp
    times = [stage_times(s, st, plan.scale) for st in range(pp)]
    shards = [shard_parameters(s.model, s.parallelism.tp, pp, st, s.parallelism.ep) for st in range(pp)]
    rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
    return plan, shards, times, ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS)


def _assert_same(a: Flat, b: Flat) -> None:
    for f in dataclasses.fields(Flat):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(y, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("name, scale, iteration, above", [
    ("dante", 1, 0, 2_000_000),
    ("dante", 1, 1, 0),                      # NVLink-only calls as one alpha-beta term
    ("gpt2-all-cross", 1, 0, 2_000_000),
    ("mixtral-8x7b-ep", 1000, 0, 0),
    ("llama3-8b-zero3", 64, 0, 2_000_000),
])
def test_fast_build_equals_the_straightforward_one(name, scale, iteration, above):
    plan, shards, times, nvl = _inputs(name, scale)
    fast = flatten(plan, iteration, shards, times, nvl, above)
    direct = flatten(plan, iteration, shards, times, nvl, above, direct=True)
    _assert_same(fast, direct)
    assert fast.tr_bytes.size > 0 and (fast.ins_kind == CALL).any()


def test_every_call_is_made_once_by_every_rank_of_its_group():
    """Independent of either build: the CALL instructions name each participation exactly once,
    from the program of that participation's rank."""
    plan, shards, times, nvl = _inputs("llama3-8b-zero3", 64)
    f = flatten(plan, 0, shards, times, nvl, 2_000_000)
    calls = f.ins_kind == CALL
    owner = np.repeat(np.arange(f.prog_ptr.size - 1), np.diff(f.prog_ptr))
    parts = f.ins_a[calls]
    assert np.array_equal(np.sort(parts), np.arange(f.part_rank.size))
    assert np.array_equal(f.part_rank[parts], owner[calls])
