"""The message table as a ring of rows (tokenpcap.schedule.engine.ring, driven by
tokenpcap.schedule.runner.Schedule with keep_messages=False).

Right values: the same run with one row per message kept for the whole run (keep_messages=True,
itself equal to the reference engine, test_kernel.py): every frame byte for byte, and every row
handed out with a chunk the row of its message id (the times a message reaches later are -1
then). The bound: the ring's rows against the messages of the run and against the span of
message ids in flight (created, not yet arrived), computed from the kept table.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine import ring
from tokenpcap.schedule.runner import MSG_STATE_DTYPE, TX_DTYPE, Schedule
from tests.conftest import simple_on
from tests.schedule.test_schedule import tiny_scenario

ROOT = Path(__file__).resolve().parents[3]
LATER = ("ready_ns", "first_tx_ns", "last_tx_end_ns", "arrival_ns")   # reached after creation


def _scenario(name: str, **gen):
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    return dataclasses.replace(s, generation=dataclasses.replace(s.generation, **gen)) if gen else s


def _chunks(sched: Schedule):
    """Every chunk of frames and, read while it is handed out, the rows of the messages it names."""
    tx, rows, size = [], [], []
    for c in sched.run():
        tx.append(c.copy())
        rows.append(sched.message_rows(c["msg"]))
        size.append(sched._eng.S.ms.shape[0])
    if not tx:
        return np.zeros(0, TX_DTYPE), np.zeros(0, MSG_STATE_DTYPE), size
    return np.concatenate(tx), np.concatenate(rows), size


def assert_streams_as_kept(plan, nics, ring_rows: int, chunk_rows: int = 1 << 10, iterations: int = 1):
    kept = Schedule(plan, iterations=iterations, nics=nics, chunk_rows=chunk_rows)
    tx_k, _, _ = _chunks(kept)
    ringed = Schedule(plan, iterations=iterations, nics=nics, chunk_rows=chunk_rows,
                      keep_messages=False, ring_rows=ring_rows)
    tx_r, rows, sizes = _chunks(ringed)
    assert tx_r.tobytes() == tx_k.tobytes()
    assert ringed.n_messages == kept.n_messages
    if tx_r.size:
        assert (rows["msg_id"] == tx_r["msg"]).all()
        full = kept.messages[tx_r["msg"]]
        for f in rows.dtype.names:
            if f in LATER:
                assert ((rows[f] == full[f]) | (rows[f] == -1)).all(), f
            else:
                assert (rows[f] == full[f]).all(), f
    # every message done and settled: each row free once everything is handed out
    ms = ringed._eng.S.ms
    assert ring.is_free(ms, K.NEVER).all()
    assert (ms[:, K.M_NACK] == 0).all() and (kept._eng.S.ms[:, K.M_ARR] >= 0).all()
    assert kept._eng.S.ms.shape[1] == K.M_ID               # a kept table has no ring columns
    return kept, ringed, sizes


@pytest.mark.parametrize("cts", [True, False])
@pytest.mark.parametrize("nics", [None, (0, 5), (3,), ()])
def test_a_tiny_ring_reused_and_grown_all_the_time_gives_the_frames_and_rows_of_the_kept_table(cts, nics):
    """Dante at --scale 64 (1,072 messages with clear-to-send, 8 NICs) on a ring of 4 rows: it
    grows and its rows are reused at every turn; frames and the rows read per chunk are those of
    the run that keeps every row."""
    plan = build_plan(_scenario("dante", clear_to_send=cts), scale=64)
    kept, ringed, sizes = assert_streams_as_kept(plan, nics, ring_rows=4, chunk_rows=256)
    assert ringed._eng.S.ms.shape[0] < kept.n_messages      # rows were reused


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ep=st.sampled_from([(4, 1, 2, 2), (8, 1, 1, 4), (2, 2, 2, 2)]), channels=st.integers(1, 3),
       every=st.sampled_from([0, 1, 3]), cts=st.booleans(), scale=st.sampled_from([1, 64, 4096]),
       sel=st.sampled_from([None, (0,), (1, 3), ()]), ring_rows=st.sampled_from([1, 2, 16, 256]),
       chunk_rows=st.sampled_from([16, 1 << 10]))
def test_any_ring_size_gives_the_frames_and_rows_of_the_kept_table(tmp_path, ep, channels, every, cts,
                                                                   scale, sel, ring_rows, chunk_rows):
    """Expert-parallel AllToAlls (many QPs per NIC, messages of one to many packets, ACKs inside
    messages, some NICs selected), two iterations, any first ring size and chunk size."""
    dp, tp, pp, e = ep
    sp = ", sequence_parallel: true" if tp > 1 else ""
    path = tiny_scenario(tmp_path, "ep", dp, tp, pp, gbs=dp * 2, channels=channels,
                         par=f", ep: {e}{sp}", model="  moe: {experts: 8, top_k: 2}\n")
    path.write_text(path.read_text() + f"generation: {{ack_every_packets: {every}, "
                                       f"clear_to_send: {str(cts).lower()}}}\n")
    assert_streams_as_kept(build_plan(load_scenario(path), scale=scale), sel, ring_rows,
                           chunk_rows=chunk_rows, iterations=2)


def _span_in_flight(m: np.ndarray) -> int:
    """Most message ids from the oldest message not yet arrived to the newest created, over the
    run (ids are in creation order, so ``start_ns`` does not decrease with the id)."""
    start, arr = m["start_ns"], m["arrival_ns"]
    oldest = np.searchsorted(np.maximum.accumulate(arr), start, side="right")
    return int((np.arange(m.size) - oldest + 1).max())


@pytest.mark.parametrize("nics", [(), None])
def test_the_ring_holds_what_is_in_progress_not_the_job(nics):
    """mixtral-8x7b-ep at --scale 1000 (202,662 messages in one iteration, its AllToAll peers in
    NCCL's p2p chunks): the ring, started at
    16 rows, ends within 4x the span of ids in flight and below 1/32 of the messages, timing
    only and with every NIC's frames made (whose rows wait for their hand-out)."""
    # NCCL's 16 channels for every call and Simple: the 202,662 messages (auto trims the small
    # calls' channels and sends LL: 186,502)
    s = load_scenario(ROOT / "profiles" / "scenarios" / "mixtral-8x7b-ep.yaml",
                      {**simple_on(), "collectives.channels": 16})
    plan = build_plan(s, scale=1000)
    kept = Schedule(plan, iterations=1, nics=(), keep_history=False, keep_nvlink=False)
    for _ in kept.run():
        pass
    span = _span_in_flight(kept.messages)
    ringed = Schedule(plan, iterations=1, nics=nics, keep_history=False, keep_nvlink=False,
                      keep_messages=False, ring_rows=16)
    n = 0
    for tx in ringed.run():
        n += tx.size
        ringed.message_rows(tx["msg"])
    rows = ringed._eng.S.ms.shape[0]
    assert ringed.n_messages == kept.n_messages > 200_000
    assert rows <= 4 * span and rows * 32 < ringed.n_messages, (rows, span)
    assert (n > 0) == (nics is None)


def test_grow_puts_every_row_at_its_id_under_the_new_mask():
    ms = ring.table(8)
    ids = np.array([17, 10, 3, 12])                 # rows 1, 2, 3, 4 of 8
    ms[ids & 7, K.M_ID] = ids
    ms[ids & 7, K.M_SIZE] = ids * 100
    for need, rows in ((0, 16), (40, 64)):
        g = ring.grow(ms, need)
        assert g.shape == (rows, K.M_COLS)
        assert g[ids & (rows - 1), K.M_ID].tolist() == ids.tolist()
        assert g[ids & (rows - 1), K.M_SIZE].tolist() == (ids * 100).tolist()
        assert (g[:, K.M_ID] >= 0).sum() == ids.size and ring.is_free(g, 0).sum() == rows - ids.size
