"""Selections (tokenpcap/generate/select.py): the phase patterns' rule and the window's text."""
from __future__ import annotations

from hypothesis import given, strategies as st

from tokenpcap.generate.select import (OPEN_END_NS, Selection, parse_window, phase_matches,
                                       unknown_phase_patterns, window_text)
from tokenpcap.records import LABELS


def test_patterns_match_a_label_a_prefix_or_a_part():
    lab = "pp/forward/SendRecv"
    assert all(phase_matches(p, lab) for p in (lab, "pp/", "pp", "pp/forward", "pp/forward/",
                                                "forward", "SendRecv"))
    assert not any(phase_matches(p, lab) for p in ("p", "pp/forwar", "forward/SendRecv",
                                                    "pp/backward", "sendrecv", ""))


@given(st.lists(st.sampled_from(LABELS), min_size=1, max_size=3),
       st.lists(st.text(alphabet="abcdefxyz/", min_size=1, max_size=8), max_size=3))
def test_unknown_patterns_are_exactly_those_that_select_no_label(labels, junk):
    pats = [lab.split("/")[i % 3] for i, lab in enumerate(labels)] + junk
    unknown = unknown_phase_patterns(pats)
    keep = {p: Selection(phases=(p,)).labels().any() for p in pats}
    assert unknown == [p for p in pats if not keep[p]]
    assert not set(unknown) & {lab.split("/")[i % 3] for i, lab in enumerate(labels)}


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
