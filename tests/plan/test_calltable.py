"""The calls as columns (plan/calltable.py): the table, the objects made from it and a call made
alone by id agree with an enumeration written out here call by call from the families (the
nested loop family, instance, group; Megatron-LM's sampler for the token ranges), on every
bundled scenario small enough and on the kinds of call of the small variants."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.plan.build import build_plan
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.calltable import CallTable
from tokenpcap.config.profiles import load_scenario
from tests.plan.test_plan import PROFILES, dante
from tests.schedule.test_schedule import VARIANTS, tiny_scenario


def _reference(plan, iteration: int) -> list[CollectiveCall]:
    """Every call of ``iteration`` by the rule of plan/calls.py, one at a time."""
    s, lay = plan.scenario, plan.layout
    t, seq = s.training, s.model.seq_length
    b, dp, tp = t.micro_batch_size, s.parallelism.dp, s.parallelism.tp
    out, cid = [], iteration * plan.calls_per_iteration
    for f in plan.families:
        for inst in f.insts:
            for g in f.groups:
                tok = (-1, -1, -1, -1)
                if f.tokens and inst.microbatch >= 0:
                    c = lay.coords(g[0])
                    first = iteration * t.global_batch_size + inst.microbatch * b * dp + c.dp * b
                    pos = (0, seq) if f.tokens == "mb" else (c.tp * seq // tp,
                                                             (c.tp + 1) * seq // tp)
                    tok = (first * seq, (first + b) * seq) + pos
                p2p = f.collective == "SendRecv"
                out.append(CollectiveCall(
                    cid, iteration, f.dim, f.phase, f.collective, g, f.message_bytes,
                    f.elem_bytes, inst.layer, inst.microbatch, f.stage, g[0] if p2p else -1,
                    g[1] if p2p else -1, *tok, inst.bucket, inst.recompute, inst.op))
                cid += 1
    return out


def _same(got: list[CollectiveCall], want: list[CollectiveCall]) -> None:
    assert len(got) == len(want)
    for x, y in zip(got, want):
        assert x == y
        for f in dataclasses.fields(CollectiveCall):        # ints stay ints (JSON, hashing)
            assert type(getattr(x, f.name)) is type(getattr(y, f.name)), f.name


@pytest.mark.parametrize("name", ["dante", "gpt2-all-cross", "mixtral-8x7b-ep", "llama3-8b-zero3",
                                  "llama2-7b-a100-ib"])
def test_the_calls_are_the_families_expanded_call_by_call(name):
    plan = build_plan(load_scenario(PROFILES / "scenarios" / f"{name}.yaml"), scale=64)
    for it in (0, 3):
        want = _reference(plan, it)
        _same(list(plan.calls(it)), want)
        table = plan.call_table(it)
        ts, te, s0, s1 = table.tokens()
        src, dst = table.src_dst()
        cols = {"call_id": table.call_id(), "layer": table.layer(),
                "microbatch": table.microbatch(), "message_bytes": table.message_bytes(),
                "token_start": ts, "token_end": te, "seq_start": s0, "seq_end": s1,
                "src": src, "dst": dst}
        for k, v in cols.items():
            assert v.dtype == np.int64 and v.tolist() == [getattr(c, k) for c in want], k


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_small_variants_expand_as_the_rule_says(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"),
                         kw.pop("gbs"), **kw)
    plan = build_plan(load_scenario(path))
    _same(list(plan.calls(1)), _reference(plan, 1))


def test_a_table_holds_three_small_indices_per_call():
    table = build_plan(dante()).call_table(0)
    assert {a.dtype for a in (table.family, table.inst, table.group)} == {np.dtype(np.int32)}
    assert len(table) == table.family.size == build_plan(dante()).calls_per_iteration


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_call_made_alone_and_the_calls_of_some_ranks_are_those_of_the_whole(data):
    plan = _DANTE
    it = data.draw(st.integers(0, 5))
    every = _ALL.get(it) or _ALL.setdefault(it, list(plan.calls(it)))
    i = data.draw(st.integers(0, len(every) - 1))
    assert plan.call(every[i].call_id) == every[i]
    ranks = frozenset(data.draw(st.sets(st.integers(0, plan.layout.world_size - 1), max_size=3)))
    mine = list(plan.calls(it, ranks))
    assert mine == [c for c in every if not ranks.isdisjoint(c.group)]
    table = CallTable.of_iteration(plan.families, plan.scenario, plan.layout, it, ranks)
    assert table.call_id().tolist() == [c.call_id for c in mine]


def test_a_call_id_outside_the_plan_is_a_key_error():
    plan = build_plan(dante())
    with pytest.raises(KeyError):
        plan.call(-1)
    last = plan.calls_per_iteration - 1
    assert plan.call(last).call_id == last and plan.call(last + 1).iteration == 1


_DANTE = build_plan(dante())
_ALL: dict[int, list[CollectiveCall]] = {}
