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
