"""The plan made from the hops that carry bytes equals the plan made from the whole hop tables.

The ring's own table of its hops with data (:func:`tokenpcap.collectives.algorithms.ring.
ring_nonempty_hops`) is what keeps the plan of a ZeRO job linear in its GPUs: its gradient-norm
AllReduce of one fp32 runs over every rank. Here every bundled scenario small enough for a test
is planned twice, once with the ring's table and once with every sum filtering the whole table
(the construction before it), and the two plans' JSON must be equal.
"""
from __future__ import annotations

import pytest

from tokenpcap.collectives.algorithms.ring import Ring
from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tests.collectives.test_nonempty_hops import clear_caches

SCENARIOS = [("dante", 1), ("dante", 64), ("gpt2-all-cross", 1), ("llama2-7b-a100-ib", 1),
             ("llama3-8b-zero3", 64), ("mixtral-8x7b-ep", 1), ("llama3-70b-64n", 1), ("alltoall-64", 1)]


@pytest.mark.parametrize("name,scale", SCENARIOS)
def test_plan_equals_the_plan_of_the_whole_hop_tables(name, scale, monkeypatch):
    s = load_scenario(f"profiles/scenarios/{name}.yaml")
    clear_caches()
    sparse = build_plan(s, scale=scale).to_json()
    clear_caches()
    monkeypatch.setattr(Ring, "nonempty_hops", lambda self, *a: None)
    whole = build_plan(s, scale=scale).to_json()
    clear_caches()
    assert sparse == whole


def test_a_zero_plan_holds_an_allreduce_over_every_rank_with_empty_chunks():
    # what the test above exercises: the gradient norm (one fp32) over all 32 ranks of a
    # ZeRO-1 job, 31 of its 32 ring chunks empty
    s = load_scenario("profiles/scenarios/llama2-7b-a100-ib.yaml")
    plan = build_plan(s)
    world = plan.layout.world_size
    norm = [f for f in plan.families if f.dim == "mp" and len(f.groups[0]) == world]
    assert norm and all(f.message_bytes == 4 for f in norm)
