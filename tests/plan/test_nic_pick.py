"""``--nics busiest[:K]`` / ``carrying:FAMILY`` (tokenpcap/plan/nic_pick.py): the NICs picked
from the bytes ``plan --nics`` reports, against sorting and summing by hand."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.nic_pick import is_pick, pick_nics
from tokenpcap.plan.nics import NicPhaseTable, nic_phase_table

SCEN = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"
PHASES = ("pp/forward/SendRecv", "dp/backward/AllReduce", "ep/forward/AllToAll")


def _table(rows) -> NicPhaseTable:  # type: ignore[no-untyped-def]
    return NicPhaseTable(PHASES, np.array(rows, np.int64).reshape(-1, len(PHASES)), 2)


def test_busiest_breaks_ties_by_the_lowest_nic():
    t = _table([[1, 0, 0], [5, 0, 0], [2, 3, 0], [0, 0, 5], [4, 0, 0]])
    assert pick_nics("busiest", t).nics == {1}            # 5 B at NICs 1, 2, 3: the lowest
    assert pick_nics("busiest:3", t).nics == {1, 2, 3}
    assert pick_nics("busiest:4", t).nics == {1, 2, 3, 4}
    assert "NICs 1-4" in pick_nics("busiest:4", t).why


def test_carrying_is_every_nic_with_a_byte_of_the_family():
    t = _table([[1, 0, 0], [0, 7, 0], [2, 3, 0], [0, 0, 5]])
    assert pick_nics("carrying:pp", t).nics == {0, 2}
    assert pick_nics("carrying:dp", t).nics == {1, 2}
    assert pick_nics("carrying:ep", t).nics == {3}


@pytest.mark.parametrize("text, want", [
    ("busiest:0", "busiest:K with K in 1..4"), ("busiest:5", "K in 1..4"),
    ("busiest:x", "K in 1..4"), ("busiest:", "K in 1..4"),
    ("carrying", "FAMILY one of tp, pp, dp"), ("carrying:zz", "FAMILY one of"),
    ("carrying:tp", "no NIC sends tp bytes"), ("carrying:ep", "no NIC sends ep bytes"),
    ("nosuch", "expected busiest, busiest:K, carrying:FAMILY"),
])
def test_a_bad_pick_names_the_option_what_was_got_and_expected(text, want):
    t = _table([[1, 0, 0], [0, 7, 0], [2, 3, 0], [4, 0, 0]])
    with pytest.raises(InputError, match=r"^--nics: got .*, expected") as err:
        pick_nics(text, t)
    assert want in str(err.value) and repr(text) in str(err.value)


def test_is_pick():
    assert is_pick("busiest") and is_pick("busiest:3") and is_pick("carrying:dp")
    assert not is_pick("0-3,8") and not is_pick("") and not is_pick("busy")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=3, max_size=3), min_size=1, max_size=12),
       st.data())
def test_busiest_k_is_the_top_k_of_the_sorted_totals(rows, data):
    t = _table(rows)
    k = data.draw(st.integers(1, len(rows)))
    want = sorted(range(len(rows)), key=lambda i: (-sum(rows[i]), i))[:k]
    got = pick_nics(f"busiest:{k}", t).nics
    assert got == set(want)
    # nothing left out sends more than anything picked
    assert all(sum(rows[i]) <= min(sum(rows[j]) for j in got) for i in set(range(len(rows))) - got)


def test_dante_picks_from_the_plan_nics_table():
    t = nic_phase_table(build_plan(load_scenario(SCEN / "dante.yaml")))
    # plan --nics: 0,4,8,12 send 42,208,132 B, the rest of node 0/1's NICs 4 B less
    assert pick_nics("busiest", t).nics == {0}
    assert pick_nics("busiest:4", t).nics == {0, 4, 8, 12}
    assert pick_nics("carrying:pp", t).nics == set(range(32))
    assert pick_nics("carrying:mp", t).nics == {0, 4, 8, 12, 16, 20, 24, 28}
