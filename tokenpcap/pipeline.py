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
from tokenpcap.records.provenance import MAX_SCALE
from tokenpcap.plan.build import Plan, build_plan
from tokenpcap.schedule.allocator import hold_mmap_threshold
from tokenpcap.schedule.limits import Work, check_work
from tokenpcap.schedule.memory import run_kind
from tokenpcap.schedule.runner import Schedule
from tokenpcap.schedule.engine.compile_aside import Aside
from tokenpcap.schedule.engine.compile_aside import start as start_aside
from tokenpcap.schedule.engine.compile_aside import compiling_in_background
from tokenpcap.schedule.engine.compiled import (ASIDE_SHARE, COMPILE_CPU_S, CompileNotice,
                                                engine_compiled)
from tokenpcap.schedule.engine.interpreted import UNCOMPILED, python_seconds, worth_it
from tokenpcap.stages import counting, stage, wall_seconds
from tokenpcap.tokens import TokenizedCorpus

__all__ = ["Prepared", "prepare", "schedule_scenario", "Timing", "BUILD_CPU_S_PER_CALL"]

#: CPU seconds of building the engine's state per collective call of the run (flattening the
#: plan's calls, programs and transfers, :class:`~tokenpcap.schedule.runner.Schedule`'s
#: construction): llama3-70b-64n at ``--scale 10``, 883,145 calls built in 7.9 CPU s
#: (``benchmarks/engine_timing.py``, 2026-12-07).
BUILD_CPU_S_PER_CALL = 9e-6


class Prepared(NamedTuple):
    """A planned scenario and its schedule (run, or ready to run)."""

    scenario: Scenario
    plan: Plan
    schedule: Schedule


class Timing:
    """What a schedule made by :func:`prepare` does when it starts running (its
    :attr:`~tokenpcap.schedule.runner.Schedule.on_run`): load the engine's kernels for this run's
    signatures from numba's cache, compiling those that are not there first (a step of its own,
    said by :class:`~tokenpcap.schedule.engine.compiled.CompileNotice` only when numba really
    compiles: once per machine, and per kind of fabric; ``aside``: the helper process compiling
    half of it, :mod:`~tokenpcap.schedule.engine.compile_aside`, started by :func:`prepare` when
    the engine is not in the cache, or here when this run's specialization is not), then start
    the step "timing N messages" with the work's estimate
    (:attr:`~tokenpcap.schedule.limits.Work.seconds`), counted by the engine's message count
    (:attr:`Schedule.n_messages`, read while the engine runs) against the job's
    (:attr:`Work.messages`: the same count, ``tests/schedule/test_limits.py``).

    When the engine is not in the cache and an ideal fabric's job is timed uncompiled in less
    CPU time (:func:`~tokenpcap.schedule.engine.interpreted.python_seconds`) than the compile's
    critical path (:data:`~tokenpcap.schedule.engine.compiled.COMPILE_CPU_S` times
    :data:`~tokenpcap.schedule.engine.compiled.ASIDE_SHARE`) plus the compiled run, the job is
    timed uncompiled (:mod:`~tokenpcap.schedule.engine.interpreted`; the step's line says so and
    carries the uncompiled estimate) while ``aside`` compiles the whole engine in the background
    for the next runs (none is started while another run's background compile runs).

    A caller that writes while the job is timed (``generate``) adds to the step: ``also`` (text
    after the count, e.g. ", writing 52,000,000 packets to 8 files"), ``also_cpu_s`` (its CPU
    seconds, added to the estimate) and ``note`` (the meter's note, e.g. the packets written)."""

    def __init__(self, schedule: Schedule, work: Work, aside: Aside | None = None):
        self.schedule, self.work, self.aside = schedule, work, aside
        self.also, self.also_cpu_s = "", 0.0
        self.note: Callable[[], str] | None = None

    def __call__(self) -> None:
        aside, self.aside = self.aside, None
        sched, w = self.schedule, self.work
        python_s = None
        if not sched.engine_cached():
            packets = w.packets * sched.selected_nics // max(1, sched.engine.n_nics)
            uncompiled_s = python_seconds(w.messages, w.nvlink_copies, packets)
            if worth_it(sched.fabric_queued, uncompiled_s,
                        COMPILE_CPU_S[False] * ASIDE_SHARE + w.seconds):
                python_s = uncompiled_s
        if python_s is not None:
            # this run uncompiled; the engine compiles in the background for the next runs
            if aside is None and not compiling_in_background():
                aside = start_aside()
            sched.time_uncompiled(aside)
        else:
            if aside is None and not sched.engine_cached():
                aside = start_aside()   # e.g. a queued fabric's first run after an ideal one's
            try:
                with CompileNotice().watching(sched.fabric_queued, aside is not None):
                    # loads numba's cache; says so when it compiles (half of it in ``aside``)
                    sched.compile_engine(aside)
            finally:
                if aside is not None:
                    aside.close()
        over = f" over {w.iterations} iterations" if w.iterations > 1 else ""
        # timed through its quotient: one data-parallel replica's messages of D
        # (tokenpcap.schedule.replicas keeps exactly 1/D of them)
        D = 1 if sched.replica_view is None else sched.replica_view.D
        one = f" (data-parallel index 0 of {D} replicas, the others its translates)" if D > 1 else ""
        cpu_s = (w.seconds if python_s is None else python_s) / D
        how = "" if python_s is None else f" {UNCOMPILED}"
        stage(f"timing {w.messages // D:,} messages{over}{how}{one}{self.also}",
              seconds=wall_seconds(cpu_s + self.also_cpu_s))
        counting("timing", w.messages // D, "messages", lambda: sched.n_messages, self.note)


def prepare(scenario: Scenario, *, tokens: TokenizedCorpus | None = None, scale: int = 1,
            iterations: int = 1, nics=None, ranks=None, chunk_rows: int = 1 << 16,
            keep_nvlink: bool = True, keep_history: bool = True, keep_messages: bool = True,
            check: Callable[[Plan], None] | None = None, point=None,
            run: str | None = None) -> Prepared:
    """Plan ``scenario`` and build its schedule of ``iterations`` iterations, not yet run.
    When the engine is not in numba's cache, a helper process starts first (its imports overlap
    the planning) and compiles half of the engine when the schedule starts running
    (:class:`Timing`, :mod:`~tokenpcap.schedule.engine.compile_aside`); it ends then, or when
    this raises.

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
        InputError: ``scale`` outside 1.. :data:`~tokenpcap.records.provenance.MAX_SCALE` or
            ``iterations`` < 1.
        InfeasiblePlanError: the scenario cannot be planned, or the run is beyond the packet
            simulator (:func:`~tokenpcap.schedule.limits.check_work`).
    """
    if not 1 <= scale <= MAX_SCALE or iterations < 1:
        raise InputError(f"scale {scale} / iterations {iterations}: expected 1..{MAX_SCALE:,} "
                         "/ >= 1")
    hold_mmap_threshold()           # the build's freed temporaries leave the process at once
    compiled = engine_compiled()
    # the engine's first compile: a helper process imports meanwhile, compiles half of it later
    aside = None if compiled else start_aside()
    try:
        world = scenario.cluster.nodes * scenario.cluster.gpus_per_node
        stage(f"planning {scenario.name} ({world:,} GPUs"
              f"{f', --scale {scale}' if scale > 1 else ''})")
        plan = build_plan(scenario, tokens, scale=scale)
        # InfeasiblePlanError before simulating the impossible
        stage("estimating the work")
        kind = None if run is None else run_kind(run, compiling=not compiled)
        keep_messages = keep_messages if kind is None else kind.keep_messages
        work = check_work(plan, iterations, keep_messages=keep_messages, run=kind)
        if check is not None:
            check(plan)
        if ranks is not None:
            of_ranks = set(plan.layout.nic_array(np.asarray(sorted(ranks), np.int64)).tolist())
            nics = of_ranks if nics is None else of_ranks & set(nics)
        stage(f"building the timing engine's state: {work.calls:,} calls, {work.transfers:,} "
              "transfers", seconds=wall_seconds(work.calls * BUILD_CPU_S_PER_CALL))
        sched = Schedule(plan, iterations=iterations, nics=nics, chunk_rows=chunk_rows,
                         keep_nvlink=keep_nvlink, keep_history=keep_history,
                         keep_messages=keep_messages, **({} if point is None else {"point": point}))
        sched.on_run = Timing(sched, work, aside)
        return Prepared(scenario, plan, sched)
    except BaseException:
        if aside is not None:
            aside.close()
        raise


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
