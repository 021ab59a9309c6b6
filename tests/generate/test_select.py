"""Selections (tokenpcap/generate/select.py): the phase patterns' rule and the window's text."""
from __future__ import annotations

from hypothesis import given, strategies as st

from tokenpcap.generate.select import (OPEN_END_NS, Selection, parse_iterations, parse_window,
                                       phase_matches, unknown_phase_patterns, window_text)
from tokenpcap.records import LABELS


def test_patterns_match_a_label_a_prefix_or_a_part():
    lab = "pp/forward/SendRecv"
    assert all(phase_matches(p, lab) for p in (lab, "pp/", "pp", "pp/forward", "pp/forward/",
                                                "forward", "SendRecv"))
    assert not any(phase_matches(p, lab) for p in ("p", "pp/forwar", "forward/SendRecv",
                                                    "pp/backward", "sendrecv", ""))


def _known() -> set[str]:
    """What a pattern may be, spelled out from the labels (the documented rule, independent of
    phase_matches): a label, a '/'-prefix of one with or without its slash, or one part."""
    out = set()
    for lab in LABELS:
        parts = lab.split("/")
        out |= set(parts)
        out |= {lab} | {"/".join(parts[:k]) + end for k in (1, 2) for end in ("", "/")}
    return out


@given(st.lists(st.sampled_from(LABELS), min_size=1, max_size=3),
       st.lists(st.text(alphabet="abcdefpwxyz/", min_size=1, max_size=8), max_size=3))
def test_unknown_patterns_are_exactly_those_the_rule_does_not_name(labels, junk):
    pats = [lab.split("/")[i % 3] for i, lab in enumerate(labels)] + junk + ["dp/", "pp/forward", "dp//", "pp/forward/SendRecv/"]
    unknown = unknown_phase_patterns(pats)
    assert unknown == [p for p in pats if p not in _known()]
    keep = {p: Selection(phases=(p,)).labels().any() for p in pats}
    assert unknown == [p for p in pats if not keep[p]]      # the selection agrees


def test_a_window_is_written_with_its_open_end_in_words():
    assert window_text(parse_window("1ms:")) == "1,000,000 ns.. (open end)"
    assert window_text(parse_window("1ms:2ms")) == "1,000,000..2,000,000 ns"
    assert parse_window(":5")[1] == 5 and parse_window("5:")[1] == OPEN_END_NS


def test_a_reversed_range_is_named_as_such_not_as_out_of_range():
    import pytest
    from tokenpcap.errors import InputError
    from tokenpcap.generate.select import parse_index_set
    with pytest.raises(InputError) as e:
        parse_index_set("3-1", "--ranks", 512)
    assert str(e.value) == "--ranks: got '3-1', expected a range A-B with A <= B"
    with pytest.raises(InputError) as e:
        parse_index_set("0-512", "--ranks", 512)
    assert str(e.value) == "--ranks: got '0-512', expected indices in 0..511"


@given(st.integers(1, 32767))
def test_iterations_from_zero_are_no_selection_as_the_plain_count(n):
    """"0:B" keeps every one of the B iterations run: the same as "B" (no selection), so a nic-rx
    capture keeps its PFC frames with either spelling."""
    assert parse_iterations(f"0:{n}") == parse_iterations(str(n)) == (n, None)
    if n > 1:
        assert parse_iterations(f"1:{n}") == (n, range(1, n))
