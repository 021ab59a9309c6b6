"""A run whose transfer ids pass 2**31: the engine's indices are int64 wherever a transfer or a
message count can exceed int32, and only per-transfer values (a call id, a dependency
countdown) are int32.

A real job with 2**31 transfers holds about 17 GB of per-transfer state; the same run is made
here with every transfer id moved up by ``OFFSET`` > 2**31 instead: the per-transfer arrays get
``OFFSET`` leading entries nobody reads (zero pages that are never touched, so never resident)
and each call's first canonical row ``c_row`` moves down by as much, so the transfer the engine
launches as id ``x + OFFSET`` reads the template row that id ``x`` read. Every message, frame and
NVLink copy must be the unshifted run's, with transfer ids ``OFFSET`` higher where they show.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.runner import Schedule
from tests.schedule.test_schedule import tiny_scenario

OFFSET = (1 << 31) + 12_345


def _shifted(sched: Schedule, offset: int) -> None:
    """Move every transfer id of ``sched`` (not yet run) up by ``offset`` (module docstring)."""
    eng = sched._eng
    S = eng.S
    T = S.tw.size
    tw = np.zeros(offset + T, np.int32)        # calloc: the leading pages are never touched
    tcall = np.zeros(offset + T, np.int32)
    tw[offset:] = S.tw
    tcall[offset:] = S.tcall
    eng.S = S._replace(tw=tw, tcall=tcall, c_row=S.c_row - offset)
    eng.tr.S = eng.S
    eng.tr.tr_base = eng.tr.tr_base + offset


def _outcome(sched: Schedule) -> tuple[bytes, bytes, np.ndarray]:
    frames = np.concatenate(list(sched.run()))
    return sched.messages.tobytes(), frames.tobytes(), sched._eng.S.nv[: int(sched._eng.sc[K.NNV])]


def test_transfer_ids_past_2_31_time_every_message_alike(tmp_path):
    path = tiny_scenario(tmp_path, "widths", 4, 4, 2, 8, cluster="a100-hdr-ib", algorithm="tree",
                         par=", sequence_parallel: true")
    plan = build_plan(load_scenario(path), scale=8)
    base = Schedule(plan, iterations=2)
    msgs, frames, nv = _outcome(base)
    moved = Schedule(plan, iterations=2)
    _shifted(moved, OFFSET)
    got_msgs, got_frames, got_nv = _outcome(moved)
    assert got_msgs == msgs and got_frames == frames
    assert nv.shape[0] > 0 and np.array_equal(got_nv[:, 0], nv[:, 0] + OFFSET)
    assert np.array_equal(got_nv[:, 1:], nv[:, 1:])
    held = moved._eng.S.ms[:, K.M_TR]
    assert held.min() >= OFFSET                   # every message's transfer id is past 2**31
