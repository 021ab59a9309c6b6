"""The size prediction in pieces (tokenpcap.generate.size.predict_message_chunks): the pieces of
whole calls, of any size, hold the messages of the whole prediction (predict_messages, tested
against written captures in tests/plan/test_plan.py), so the sums predict_capture makes over them
are the whole's."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.size import predict_message_chunks, predict_messages, record_bytes
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _dante() -> Schedule:
    s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
    return Schedule(build_plan(s, scale=64), iterations=2, keep_nvlink=False)


def _key(m: np.ndarray) -> np.ndarray:
    return np.sort(m, order=["kc", "call_id", "src_nic", "dst_nic", "step", "token_start", "size_bytes"])


@settings(max_examples=15, deadline=None)
@given(rows=st.integers(1, 3000), its=st.sampled_from([[0], [1], [0, 1]]))
def test_pieces_hold_the_whole_prediction(rows, its):
    sched = _dante()
    whole = predict_messages(sched, its)
    pieces = list(predict_message_chunks(sched, its, rows=rows))
    assert len(pieces) >= (2 if rows < 200 else 1)
    got = np.concatenate([p.messages for p in pieces])
    assert np.array_equal(_key(got), _key(whole.messages))
    for fmt in ("pcap", "erf"):
        a = [sum(int(v.sum()) for v in record_bytes(p, fmt, 262144, False, None)) for p in pieces]
        b = record_bytes(whole, fmt, 262144, False, None)
        assert sum(a) == sum(int(v.sum()) for v in b)


@functools.cache
def _dante_four_nics() -> Schedule:
    """dante on 4 NICs per node of 8 GPUs: a call's NICs move by 4 per node, its ranks by 8."""
    s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml", {"cluster.nics_per_node": 4})
    return Schedule(build_plan(s, scale=64), iterations=2, keep_nvlink=False)


@functools.cache
def _mixtral() -> Schedule:
    """Mixtral's expert parallelism: AllToAll on NCCL's network p2p path, whose messages leave
    on the PXN proxy's NIC, not their rank's."""
    s = load_scenario(ROOT / "profiles" / "scenarios" / "mixtral-8x7b-ep.yaml")
    return Schedule(build_plan(s, scale=512), iterations=1, keep_nvlink=False)


@settings(max_examples=25, deadline=None)
@given(which=st.sampled_from(["dante", "mixtral"]), data=st.data())
def test_calls_meeting_a_selection_are_those_of_its_messages(which, data):
    """:meth:`calls_meeting` (read per call shape and shift) marks exactly the calls one of
    whose messages, expanded one by one, a selected NIC sends or receives and (the same or
    another) a selected rank sends or receives; the prediction of the marked calls holds every
    predicted message that touches the selection."""
    sched = _dante_four_nics() if which == "dante" else _mixtral()
    n_nics, world = sched.engine.n_nics, sched.layout.world_size
    nics = data.draw(st.none() | st.frozensets(st.integers(0, n_nics - 1), max_size=6))
    ranks = data.draw(st.none() | st.frozensets(st.integers(0, world - 1), max_size=6))
    its = list(range(sched.iterations))
    t = sched.nic_transfers(its)
    ids = np.unique(sched._call_attr[:, 3], return_index=True)[1]     # call id -> call index
    call = ids[t["call_id"]]
    expect = np.ones(sched.n_calls, bool)
    for want, a, b in ((nics, "src_nic", "dst_nic"), (ranks, "rank_src", "rank_dst")):
        if want is not None:
            w = np.asarray(sorted(want), np.int64)
            expect &= np.bincount(call, weights=np.isin(t[a], w) | np.isin(t[b], w),
                                  minlength=sched.n_calls) > 0
    got = sched.calls_meeting(nics, ranks)
    assert np.array_equal(got, expect)
    whole = predict_messages(sched, its).messages
    keep = np.ones(len(whole), bool)
    for want, a, b in ((nics, "src_nic", "dst_nic"), (ranks, "rank_src", "rank_dst")):
        if want is not None:
            keep &= np.isin(whole[a], list(want)) | np.isin(whole[b], list(want))
    part = np.concatenate([p.messages for p in predict_message_chunks(sched, its, calls=got)]
                          + [whole[:0]])
    assert np.isin(whole["call_id"][keep], part["call_id"]).all()
    assert np.array_equal(_key(part), _key(whole[np.isin(whole["call_id"],
                                                          sched._call_attr[got, 3])]))
