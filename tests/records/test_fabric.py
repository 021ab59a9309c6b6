"""The fabric log's vocabulary: the dtypes are exactly the engine's contract, every column is
documented with a unit, the summary round-trips through JSON and refuses bad values, and the
pause-time arithmetic is IEEE 802.1Qbb's."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.records.fabric import (COLUMN_DOCS, DROP_DTYPE, FABRIC_TABLES, LINK_DTYPE,
                                      NIC_FABRIC_DTYPE, PFC_EVENT_DTYPE, QUEUE_DEPTH_DTYPE,
                                      FabricSummary, check_log, empty_log, pause_ns)

#: the contract as the engine's brief spells it, transcribed independently of the module
CONTRACT = {
    "pfc": [("time_ns", "<i8"), ("switch", "<i4"), ("port", "<i4"), ("priority", "u1"),
            ("xoff", "u1"), ("quanta", "<u2")],
    "queues": [("time_ns", "<i8"), ("switch", "<i4"), ("port", "<i4"), ("priority", "u1"),
               ("max_bytes", "<i8")],
    "links": [("switch", "<i4"), ("port", "<i4"), ("peer_nic", "<i4"), ("peer_switch", "<i4"),
              ("peer_port", "<i4"), ("gbps", "<f8"), ("tx_frames", "<i8"), ("tx_bytes", "<i8"),
              ("pfc_sent", "<i8"), ("pfc_received", "<i8"), ("paused_ns", "<i8"),
              ("max_queue_bytes", "<i8")],
    "nics": [("nic", "<i4"), ("pfc_received", "<i8"), ("paused_ns", "<i8"), ("rx_frames", "<i8"),
             ("rx_bytes", "<i8")],
    "drops": [("switch", "<i4"), ("port", "<i4"), ("priority", "u1"), ("packets", "<i8"),
              ("bytes", "<i8")],
}


def test_dtypes_are_the_contract():
    assert list(FABRIC_TABLES) == ["pfc", "queues", "links", "nics", "drops"]
    for name, fields in CONTRACT.items():
        assert FABRIC_TABLES[name] == np.dtype(fields), name
    assert (PFC_EVENT_DTYPE, QUEUE_DEPTH_DTYPE, LINK_DTYPE, NIC_FABRIC_DTYPE, DROP_DTYPE) == \
        tuple(FABRIC_TABLES.values())


def test_every_column_is_documented():
    for name, dt in FABRIC_TABLES.items():
        assert list(COLUMN_DOCS[name]) == list(dt.names), name
        for col, (unit, doc) in COLUMN_DOCS[name].items():
            assert doc, (name, col)
            if col.endswith("_ns"):
                assert unit == "ns", (name, col)
            if col.endswith("_bytes") or col == "bytes":
                assert unit == "bytes", (name, col)


def test_check_log():
    log = empty_log()
    assert check_log(log) is log
    with pytest.raises(InputError, match=r"^fabric log: drops: got missing, expected a table$"):
        check_log({k: v for k, v in log.items() if k != "drops"})
    with pytest.raises(InputError, match=r"fabric log: got table 'ecn'"):
        check_log({**log, "ecn": log["pfc"]})
    bad = np.zeros(1, [("time_ns", "<i8")])
    with pytest.raises(InputError, match=r"^fabric log: pfc: got dtype .*, expected "):
        check_log({**log, "pfc": bad})
    with pytest.raises(InputError, match="expected a 1-D numpy structured array"):
        check_log({**log, "nics": [1, 2]})


def summaries():
    return st.builds(
        FabricSummary,
        switch_names=st.lists(st.text(min_size=1, max_size=8), max_size=4).map(tuple),
        packet_hops=st.integers(0, 1 << 62), headroom_overflows=st.integers(0, 1 << 40),
        drops_total=st.integers(0, 1 << 40), preset=st.text(max_size=10),
        topology_kind=st.sampled_from(["rail-optimized", "leaf-spine", "single-switch"]),
        lossless_priorities=st.lists(st.integers(0, 7), max_size=3, unique=True).map(tuple),
        qlen_sample_ns=st.integers(0, 10**9))


@settings(max_examples=60, deadline=None)
@given(summaries())
def test_summary_round_trips_through_json(s):
    import json
    assert FabricSummary.from_json(json.loads(json.dumps(s.to_json()))) == s


@pytest.mark.parametrize("change,message", [
    ({"packet_hops": -1}, r"summary: packet_hops: got -1, expected an integer >= 0"),
    ({"drops_total": 1.5}, r"drops_total: got 1.5, expected an integer >= 0"),
    ({"lossless_priorities": [8]}, r"lossless_priorities: got 8, expected priorities 0..7"),
    ({"switch_names": "leaf0"}, r"switch_names: got 'leaf0', expected a list"),
    ({"preset": 3}, r"preset: got 3, expected a string"),
    ({"colour": 1}, r"summary: colour: got an unknown key"),
])
def test_summary_refuses_bad_values(change, message):
    doc = FabricSummary(("leaf0",), 1, 0, 0, "", "single-switch").to_json()
    with pytest.raises(InputError, match=message):
        FabricSummary.from_json({**doc, **change})


def test_missing_key_and_defaults():
    doc = FabricSummary(("leaf0",), 1, 0, 0, "", "single-switch").to_json()
    del doc["qlen_sample_ns"], doc["lossless_priorities"]
    s = FabricSummary.from_json(doc)
    assert s.qlen_sample_ns == 0 and s.lossless_priorities == (3,)
    del doc["packet_hops"]
    with pytest.raises(InputError, match=r"^summary: packet_hops: got missing, expected a value$"):
        FabricSummary.from_json(doc)


def test_pause_quanta_arithmetic():
    """IEEE 802.3 Annex 31B: one quantum is 512 bit times; at 400 Gb/s a bit is 1/400 ns."""
    assert pause_ns(1, 100.0) == pytest.approx(5.12)
    assert pause_ns(1, 400.0) == pytest.approx(1.28)
    assert pause_ns(65535, 400.0) == pytest.approx(83_884.8)
    assert pause_ns(np.array([0, 2]), 25.0).tolist() == pytest.approx([0.0, 40.96])
