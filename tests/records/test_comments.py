"""The packet comment grammar (tokenpcap/records/comments.py): PFC frames' form, spelled out
from the module docstring, and its round trip."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.records import LABELS, PKT_ACK, PKT_PFC
from tokenpcap.records.comments import (CONTROL_PREFIXES, comment_text, parse_comment,
                                        pfc_comment_text)


def test_pfc_comments_as_documented():
    assert pfc_comment_text(1 << 3, 65535) == "pfc xoff prio 3 quanta 65535"
    assert pfc_comment_text(1 << 3, 0) == "pfc xon prio 3"
    assert pfc_comment_text(0b10011000, 7) == "pfc xoff prio 3,4,7 quanta 7"
    assert pfc_comment_text(0, 0) == "pfc xon prio none"
    assert not any("pfc xon prio 3".startswith(p) for p in CONTROL_PREFIXES)   # no phase label


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 255), st.integers(0, 0xFFFF))
def test_pfc_round_trip(vector, quanta):
    d = parse_comment(pfc_comment_text(vector, quanta))
    assert d == {"kind": PKT_PFC, "xoff": quanta > 0, "quanta": quanta,
                 "priorities": [p for p in range(8) if vector >> p & 1]}


def test_malformed_pfc_comments_are_another_tools():
    for text in ("pfc xoff prio 3", "pfc xon prio 3 quanta 5", "pfc xoff prio 9 quanta 1",
                 "pfc xoff prio 4,3 quanta 1", "pfc xoff prio 3 quanta 0", "pfc pause prio 3",
                 "pfc xoff prio 3 quanta 65536", "pfc xoff prio 3,3 quanta 2"):
        assert parse_comment(text) is None, text


def test_rdma_comments_unchanged():
    t = comment_text(PKT_ACK, LABELS.index("dp/backward/AllReduce"), 0, 5, 1, -1, -1, -1, -1)
    assert t == "ack dp/backward/AllReduce it 0 call 5 step 1"
    assert parse_comment(t)["kind"] == PKT_ACK
