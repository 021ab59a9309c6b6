"""The flat arrays of a run: the fast build (canonical call shapes, program templates) equals the
straightforward one (transfers per call, one program per rank) field by field, on the bundled
scenarios that exercise every kind of call: Dante (GPT-2 small, dp/tp/pp), gpt2-all-cross (every
group across nodes), Mixtral-8x7B with expert parallelism, Llama-3 8B with ZeRO-3, and the
NVLink-only calls timed as a whole; and on the small scenarios of every kind of call (context
parallelism, interleaved 1F1B, MoE, ZeRO, trees, hierarchical), whose programs depend on the
model chunks and on ``overlap_grad_reduce``; and on DeepSeek-V3's uneven pipeline split of dense
and MoE layers."""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.flat import CALL, Flat, FlatTransfers, flatten
from tokenpcap.schedule.runner import NVLINK_LATENCY_NS
from tests.schedule.test_schedule import VARIANTS, tiny_scenario

ROOT = Path(__file__).resolve().parents[2]


def _inputs(name: str | Path, scale: int):
    path = name if isinstance(name, Path) else ROOT / "profiles" / "scenarios" / f"{name}.yaml"
    s = load_scenario(path)
    plan = build_plan(s, scale=scale)
    pp = s.parallelism.pp
    times = [stage_times(s, st, plan.scale) for st in range(pp)]
    shards = scenario_shards(s)
    rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
    return plan, shards, times, ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS)


#: How each build stores its transfers (its own shapes); compared through ``expand`` instead.
_TEMPLATES = ("call_shape", "call_shift", "shapes", "direct")


def _assert_fields(a, b, cls, skip=()) -> None:
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(y, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name
        else:
            assert x == y, f.name


def _assert_same(a: Flat, b: Flat) -> None:
    """``a`` (the fast build) and ``b`` (the straightforward one) hold the same calls,
    participations and programs, and ``a``'s templates expand to ``b``'s transfers one by one;
    so do ``b``'s own templates (one per group, not moved), read the same way."""
    assert a.direct is None and b.direct is not None
    _assert_fields(a, b, Flat, _TEMPLATES)
    _assert_fields(a.expand(), b.expand(), FlatTransfers)
    _assert_fields(dataclasses.replace(b, direct=None).expand(), b.direct, FlatTransfers)


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
    assert fast.n_transfers > 0 and (fast.ins_kind == CALL).any()


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


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fast_build_equals_the_straightforward_one_on_every_kind_of_call(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"),
                         kw.pop("gbs"), **kw)
    plan, shards, times, nvl = _inputs(path, 1)
    fast = flatten(plan, 0, shards, times, nvl, 2_000_000)
    _assert_same(fast, flatten(plan, 0, shards, times, nvl, 2_000_000, direct=True))


def test_fast_build_equals_the_straightforward_one_without_overlap_and_with_chunks(tmp_path):
    """Without ``overlap_grad_reduce`` the DP buffers go after the whole backward, and with
    interleaving every stage has two chunks: both change the programs, so both reach the
    template build."""
    path = tiny_scenario(tmp_path, "vpp", 4, 1, 2, 8,
                         par=", virtual_pipeline_model_parallel_size: 2, zero_stage: 1",
                         extra=", overlap_grad_reduce: false")
    plan, shards, times, nvl = _inputs(path, 1)
    fast = flatten(plan, 0, shards, times, nvl, 2_000_000)
    _assert_same(fast, flatten(plan, 0, shards, times, nvl, 2_000_000, direct=True))


def test_fast_build_equals_the_straightforward_one_on_an_uneven_split_of_mixed_layers(tmp_path):
    """DeepSeek-V3's shape in small: a first dense layer, then MoE layers, split 1 | 3 over two
    stages (Megatron's decoder_first_pipeline_num_layers), experts over ep 2."""
    path = tiny_scenario(tmp_path, "uneven", 4, 1, 2, 8,
                         model="  moe: {experts: 4, top_k: 2, layer_freq: [0, 1, 1, 1]}\n",
                         par=", ep: 2, zero_stage: 1, decoder_first_pipeline_num_layers: 1")
    plan, shards, times, nvl = _inputs(path, 1)
    assert [sh.layers for sh in shards] == [1, 3]
    fast = flatten(plan, 0, shards, times, nvl, 2_000_000)
    _assert_same(fast, flatten(plan, 0, shards, times, nvl, 2_000_000, direct=True))
