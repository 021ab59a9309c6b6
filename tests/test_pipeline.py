"""tokenpcap.pipeline.Timing: what a prepared schedule does when it starts running, here its
choice between the compiled engine and the uncompiled one (a first run's small job,
tokenpcap.schedule.engine.interpreted) and the line it says."""
from __future__ import annotations

import numpy as np

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap import pipeline
from tokenpcap.config.profiles import load_scenario
from tokenpcap.schedule.engine import interpreted
from tokenpcap.schedule.runner import Schedule
from tokenpcap.stages import listening


def _first_run(tmp_path, monkeypatch, messages_per_s: int):
    """A tiny job's run with numba's cache taken as empty (no helper process started)."""
    monkeypatch.setattr(pipeline, "engine_compiled", lambda: True)     # prepare starts no helper
    monkeypatch.setattr(pipeline, "start_aside", lambda: None)
    monkeypatch.setattr(pipeline, "compiling_in_background", lambda: False)
    monkeypatch.setattr(Schedule, "engine_cached", lambda self: False)
    monkeypatch.setattr(interpreted, "PY_MESSAGES_PER_S", messages_per_s)
    done = pipeline.prepare(load_scenario(tiny_scenario(tmp_path, "t", 2, 2, 2, 4)), scale=8)
    lines: list[str] = []
    with listening(lines.append, after_s=0.0):
        tx = np.concatenate(list(done.schedule.run()))
    return done.schedule, tx, [x for x in lines if x.startswith("timing ")]


def test_a_first_run_of_a_small_job_is_timed_uncompiled_and_says_so(tmp_path, monkeypatch):
    sched, tx, said = _first_run(tmp_path, monkeypatch, interpreted.PY_MESSAGES_PER_S)
    assert sched._eng.kernel is interpreted.KERNEL
    assert len(said) == 1 and interpreted.UNCOMPILED in said[0], said
    assert tx.size > 0


def test_a_first_run_of_a_job_python_would_take_longer_on_is_compiled(tmp_path, monkeypatch):
    # one message per second uncompiled: the compile is the shorter
    sched, tx, said = _first_run(tmp_path, monkeypatch, 1)
    assert sched._eng.kernel is not interpreted.KERNEL
    assert len(said) == 1 and interpreted.UNCOMPILED not in said[0], said
