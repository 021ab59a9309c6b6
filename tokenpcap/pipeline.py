"""Scenario → plan → checked work → schedule: the one path ``generate``, ``export`` and ``plot`` take.

:func:`prepare` plans a loaded scenario (stage 3), refuses a run beyond what the packet simulator
can do (:func:`tokenpcap.schedule.limits.check_work`) before simulating anything, and returns a
:class:`~tokenpcap.schedule.runner.Schedule` ready to run (stage 5). :func:`schedule_scenario`
loads a scenario file and runs that schedule to its end, for the callers that want every message
of the run at once (exports and pictures of a scenario).
"""
from __future__ import annotations

import os
from typing import Callable, NamedTuple

import numpy as np

from tokenpcap.config.profiles import load_scenario
from tokenpcap.config.types import Scenario
from tokenpcap.errors import InputError
from tokenpcap.plan.build import Plan, build_plan
from tokenpcap.schedule.limits import check_work
from tokenpcap.schedule.memory import run_kind
from tokenpcap.schedule.runner import Schedule
from tokenpcap.schedule.engine.compiled import engine_compiled
from tokenpcap.stages import stage
from tokenpcap.tokens import TokenizedCorpus

__all__ = ["Prepared", "prepare", "schedule_scenario"]


class Prepared(NamedTuple):
    """A planned scenario and its schedule (run, or ready to run)."""

    scenario: Scenario
    plan: Plan
    schedule: Schedule


def prepare(scenario: Scenario, *, tokens: TokenizedCorpus | None = None, scale: int = 1,
            iterations: int = 1, nics=None, ranks=None, chunk_rows: int = 1 << 16,
            keep_nvlink: bool = True, keep_history: bool = True, keep_messages: bool = True,
            check: Callable[[Plan], None] | None = None, point=None,
            run: str | None = None) -> Prepared:
    """Plan ``scenario`` and build its schedule of ``iterations`` iterations, not yet run.

    Args:
        scenario: a loaded scenario. tokens: its stage-1 result (per-epoch totals in the plan).
        scale: divide every message size and compute time by this (>= 1).
        iterations: iterations the schedule runs (>= 1).
        nics, chunk_rows, keep_nvlink, keep_history, keep_messages: as
            :class:`~tokenpcap.schedule.runner.Schedule` (the NICs whose frames are
            materialized, every NIC timed; ``keep_messages=False``: only the messages in
            progress are held, read per handed-out chunk). ``ranks``: materialize
            only the NICs of these ranks (and of ``nics`` when both are given).
        check: called with the plan before the schedule is built (a caller's refusal, e.g.
            generate's disk space from the plan's size estimate); what it raises propagates.
        point: the capture point (:class:`tokenpcap.records.points.CapturePoint`) the
            schedule's frames are seen at; None: the schedule's default (``nic-tx``).
        run: the run kind (a key of :data:`tokenpcap.schedule.memory.RUN_KINDS`, e.g.
            ``"plot"``) whose memory estimate is checked, and whose ``keep_messages`` is used;
            None: the engine's state alone.

    Raises:
        InputError: ``scale`` or ``iterations`` < 1.
        InfeasiblePlanError: the scenario cannot be planned, or the run is beyond the packet
            simulator (:func:`~tokenpcap.schedule.limits.check_work`).
    """
    if scale < 1 or iterations < 1:
        raise InputError(f"scale {scale} / iterations {iterations}: expected >= 1")
    world = scenario.cluster.nodes * scenario.cluster.gpus_per_node
    stage(f"planning {scenario.name} ({world:,} GPUs"
          f"{f', --scale {scale}' if scale > 1 else ''})")
    plan = build_plan(scenario, tokens, scale=scale)
    # InfeasiblePlanError before simulating the impossible
    stage("estimating the work")
    kind = None if run is None else run_kind(run, compiling=not engine_compiled())
    keep_messages = keep_messages if kind is None else kind.keep_messages
    work = check_work(plan, iterations, keep_messages=keep_messages, run=kind)
    over = f" over {iterations} iterations" if iterations > 1 else ""
    # a first run's compile is a stage of its own, shown when it starts (engine.compiled)
    stage(f"timing {work.messages:,} messages{over}", seconds=work.seconds)
    if check is not None:
        check(plan)
    if ranks is not None:
        of_ranks = set(plan.layout.nic_array(np.asarray(sorted(ranks), np.int64)).tolist())
        nics = of_ranks if nics is None else of_ranks & set(nics)
    sched = Schedule(plan, iterations=iterations, nics=nics, chunk_rows=chunk_rows,
                     keep_nvlink=keep_nvlink, keep_history=keep_history,
                     keep_messages=keep_messages, **({} if point is None else {"point": point}))
    return Prepared(scenario, plan, sched)


def schedule_scenario(path: str | os.PathLike, *, scale: int = 1, iterations: int = 1,
                      run: str | None = None) -> Prepared:
    """Load the scenario file at ``path``, plan it and run its schedule to the end (every
    message timed; no frame is made: the callers read messages, NVLink copies and the timeline);
    ``run``: the caller's run kind, as :func:`prepare`.

    Raises:
        ProfileError: the scenario cannot be loaded. As :func:`prepare` otherwise.
    """
    done = prepare(load_scenario(path), scale=scale, iterations=iterations, nics=(), run=run)
    for _ in done.schedule.run():
        pass
    return done
