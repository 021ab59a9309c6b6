"""A call family (plan/family.py): its calls are its instances on each of its groups."""
from __future__ import annotations

from tokenpcap.plan.build import build_plan
from tokenpcap.plan.family import Family, Inst
from tests.plan.test_plan import dante


def test_a_family_makes_one_call_per_instance_and_group():
    f = Family("tp", "forward", "AllReduce", 64, 2, 0, [(0, 1), (2, 3), (4, 5)],
               [Inst(0, 0), Inst(1, 0)])
    assert f.n_calls == 6 and f.label == "tp/forward/AllReduce"


def test_the_plan_expands_its_families_call_by_call():
    plan = build_plan(dante())
    assert plan.calls_per_iteration == sum(f.n_calls for f in plan.families)
    assert sum(1 for _ in plan.calls()) == plan.calls_per_iteration
