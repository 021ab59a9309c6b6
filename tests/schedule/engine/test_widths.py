"""A run whose transfer ids pass 2**31: the engine's indices are int64 wherever a transfer or a
message count can exceed int32, and nothing of a transfer is stored that would bound them.

The engine names a transfer by its handle ``call·2**32 + index`` (module
tokenpcap.schedule.engine.access), so every handle of a call past the first is already past
2**32; its run-wide id is ``tr_base[call] + index``. A real job with 2**31 transfers is too large
for a test; the same run is made here with every call's first transfer id ``tr_base`` moved up
by ``OFFSET`` > 2**31 instead, which the engine reads only for a call's transfer count. Every
message, frame and NVLink copy must be the unshifted run's, and the run-wide ids of the
messages' transfers ``OFFSET`` higher.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine.access import HANDLE_SHIFT
from tokenpcap.schedule.runner import Schedule
from tests.schedule.test_schedule import tiny_scenario

OFFSET = (1 << 31) + 12_345


def _shifted(sched: Schedule, offset: int) -> None:
    """Move every transfer id of ``sched`` (not yet run) up by ``offset`` (module docstring)."""
    eng = sched._eng
    eng.S = eng.S._replace(tr_base=eng.S.tr_base + offset)
    eng.tr.S = eng.S


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
    assert nv.shape[0] > 0 and np.array_equal(got_nv, nv)
    held = moved._eng.S.ms[:, K.M_TR]
    ids = moved._eng.tr.ids(held)
    assert ids.min() >= OFFSET                    # every message's transfer id is past 2**31
    assert np.array_equal(ids - OFFSET, base._eng.tr.ids(base._eng.S.ms[:, K.M_TR]))
    assert (held >> HANDLE_SHIFT).max() > 0 and held.max() >= 1 << 32      # handles past 2**32
