"""Capture points (tokenpcap/records/points.py): the documented texts and their refusals."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.records.points import NIC_RX, NIC_TX, CapturePoint, parse_point


def test_the_documented_points():
    assert parse_point("nic-tx") == NIC_TX == CapturePoint() and not NIC_TX.receive
    assert parse_point("nic-rx") == NIC_RX and NIC_RX.receive and not NIC_RX.at_switch
    p = parse_point("switch:leaf0-3:2")
    assert (p.kind, p.switch, p.port, p.at_switch) == ("switch", "leaf0-3", 2, True)
    assert [str(parse_point(t)) for t in ("nic-tx", "nic-rx", "switch:spine1-0:17", "switch:switch0:0")] \
        == ["nic-tx", "nic-rx", "switch:spine1-0:17", "switch:switch0:0"]


@pytest.mark.parametrize("text", ["", "nic", "NIC-TX", "tx", "switch", "switch:leaf0", "switch:a:b",
                                  "switch::1", "switch:1abc:2", "switch:a b:1", "switch:leaf0:-2",
                                  "switch:leaf0:2:3"])
def test_other_texts_are_refused_naming_the_option(text):
    with pytest.raises(InputError, match=r"--point: got .*expected nic-tx, nic-rx or switch:NAME:PORT"):
        parse_point(text)


def test_inconsistent_points_are_refused():
    with pytest.raises(InputError, match="--point"):
        CapturePoint("switch")
    with pytest.raises(InputError, match="--point"):
        CapturePoint("nic-rx", "leaf0", 1)
    with pytest.raises(InputError, match="--point"):
        CapturePoint("port")


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,12}", fullmatch=True), st.integers(0, 10**6))
def test_text_round_trip(name, port):
    p = parse_point(f"switch:{name}:{port}")
    assert (p.switch, p.port) == (name, port) and parse_point(str(p)) == p
