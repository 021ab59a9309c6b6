"""What the packet simulator can do: the work of a run, estimated from the plan before simulating.

The discrete-event schedule (:mod:`tokenpcap.schedule.runner` on :mod:`tokenpcap.schedule.engine.nic`) spends Python
time per *event* — per collective call, per RDMA message (each data message plus its
clear-to-send write), per NVLink copy — and, in ``generate``, keeps per-message and per-call state
only for the iterations in progress (docs/generate.md, "Memory"); packets are streamed in numpy
chunks with flat memory.
So the work that can make a run impossible is counted in calls, messages and NVLink copies, all
known from the plan before anything runs:

* ``messages``: the plan's message count (``Plan.pcap["messages"]``: every NIC hop cut into
  ``collectives.channels`` parts and ``slice_bytes`` slices, at the plan's scale), doubled with
  ``generation.clear_to_send``, times the iterations simulated;
* ``nvlink_copies``: the same cut of every intra-node hop (:func:`tokenpcap.collectives.transfers.transfers`
  with ``nic == False``), times the iterations;
* ``calls``: ``Plan.calls_per_iteration`` times the iterations;
* ``packets``: data packets + ACKs (+ one packet per clear-to-send write) of the plan's estimate.

Measured on the project's reference machine (2 cores, 23 GB, Python 3.11, shared with other
work: load average 4-6; docs/generate.md, "Limits"): ``generate`` of Mixtral-8x7B-EP at
``--scale 10000`` (117 k messages, 94 k NVLink copies, 234 k packets per iteration) runs about
3,400 messages/s end to end (the schedule alone about 6,000/s: each message brings its CTS, ACK
and arbiter events), and peaks at 205 MB for one iteration, 332 MB for four (≈ 360 B per
message, all state included: the engine's table of 159 B per message, the size prediction,
calls and programs). Dante (3.3 k messages, 52 k NVLink copies, 330 k packets) takes about
2 s to schedule. The limits below keep a run under ≈ 2 GB of simulator state and about 25
minutes of simulation on such a machine (the memory now applies per iteration in progress; the
limit on messages is kept for the time); beyond them :func:`check_work` refuses with
:class:`~tokenpcap.errors.InfeasiblePlanError` before anything is simulated or written.
``--scale`` shrinks messages (down to one per channel and hop) but not the number of calls, so
a plan like GPT-3 175B on 1024 GPUs (1.08 M calls and 84 M messages per iteration unscaled,
still 34 M at ``--scale 100000``) stays plan-only.
"""
from __future__ import annotations

from dataclasses import dataclass

from tokenpcap.errors import InfeasiblePlanError

__all__ = ["Work", "estimate_work", "check_work", "MAX_MESSAGES", "MAX_CALLS",
           "MAX_NVLINK_COPIES", "MESSAGE_STATE_BYTES", "CALL_STATE_BYTES",
           "MESSAGES_PER_S", "NVLINK_COPIES_PER_S", "PACKETS_PER_S"]

#: RDMA messages (data + clear-to-send) one run may simulate: ~2 GB of state, ~15-25 min.
MAX_MESSAGES = 5_000_000
#: Collective calls one run may simulate (Python objects and program instructions).
MAX_CALLS = 2_000_000
#: NVLink copies one run may simulate (timers of the engine).
MAX_NVLINK_COPIES = 50_000_000
#: Measured costs (module docstring).
MESSAGE_STATE_BYTES = 400
CALL_STATE_BYTES = 1024
MESSAGES_PER_S = 3_500
NVLINK_COPIES_PER_S = 40_000
PACKETS_PER_S = 250_000


@dataclass(frozen=True)
class Work:
    """The work of a run (module docstring): counts over every simulated iteration."""

    iterations: int
    calls: int
    messages: int
    nvlink_copies: int
    packets: int

    @property
    def memory_bytes(self) -> int:
        """Simulator state of one iteration, what ``generate`` holds at a time (estimate,
        bytes; the schedule drops an iteration's calls and messages once it is over)."""
        n = max(1, self.iterations)
        return (self.messages * MESSAGE_STATE_BYTES + self.calls * CALL_STATE_BYTES) // n

    @property
    def seconds(self) -> float:
        """Simulation time on the reference machine (estimate, seconds; writing not included)."""
        return (self.messages / MESSAGES_PER_S + self.nvlink_copies / NVLINK_COPIES_PER_S
                + self.packets / PACKETS_PER_S)


def _nvlink_copies_per_iteration(plan) -> int:  # type: ignore[no-untyped-def]
    from tokenpcap.collectives.transfers import transfers
    from tokenpcap.collectives.traffic import CallShape

    c = plan.scenario.collectives
    n = 0
    for f in plan.families:
        per = 0
        for g in f.groups:
            tr = transfers(CallShape(f.collective, g, f.message_bytes, f.elem_bytes),
                           plan.algorithm, plan.layout, c.channels, c.slice_bytes)
            per += int((~tr.table["nic"]).sum())
        n += per * len(f.insts)
    return n


def _messages_at_any_scale(plan, iterations: int) -> int:  # type: ignore[no-untyped-def]
    """A lower bound of the messages at any ``--scale``: the plan with every call one element
    (chunks of zero bytes send nothing, so the true minimum is at least this)."""
    from tokenpcap.plan.build import build_plan

    # A scale at least the largest unscaled call (scaled bytes * scale bounds it from above)
    # makes every call its smallest, whatever --scale the plan was built at.
    big = max((f.message_bytes for f in plan.families), default=1) * plan.scale
    low = build_plan(plan.scenario, scale=max(plan.scale, big))
    return estimate_work(low, iterations, nvlink=False).messages


def estimate_work(plan, iterations: int, *, nvlink: bool = True) -> Work:  # type: ignore[no-untyped-def]
    """The work of simulating ``iterations`` iterations of ``plan`` (at ``plan.scale``).

    ``nvlink=False`` skips counting NVLink copies (a loop over every group of every call family:
    cheap, but not free on plans with very many groups). Raises nothing."""
    s = plan.scenario
    cts = 2 if s.generation.clear_to_send else 1
    pc = plan.pcap
    msgs = pc["messages"] * cts * iterations
    packets = (pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"]) * iterations
    nvl = _nvlink_copies_per_iteration(plan) * iterations if nvlink else 0
    return Work(iterations, plan.calls_per_iteration * iterations, msgs, nvl, packets)


def check_work(plan, iterations: int) -> Work:  # type: ignore[no-untyped-def]
    """Estimate the work (:func:`estimate_work`) and refuse what the simulator cannot do.

    Returns:
        the :class:`Work` when it is within :data:`MAX_CALLS`, :data:`MAX_MESSAGES` and
        :data:`MAX_NVLINK_COPIES`.

    Raises:
        InfeasiblePlanError: one line naming the scenario, the estimate, the limit and what
            to do (``--scale``, fewer iterations, a smaller scenario; ``tokenpcap plan`` still
            reports the traffic of any size).
    """
    s = plan.scenario
    name = s.name
    quick = estimate_work(plan, iterations, nvlink=False)
    scale = f" at --scale {plan.scale}" if plan.scale > 1 else ""
    its = f" over {iterations} iterations" if iterations > 1 else ""
    fewer = "fewer --iterations or " if iterations > 1 else ""
    hint = (f"use --scale K (fewer and smaller messages), {fewer}a smaller scenario; "
            "`tokenpcap plan` reports its traffic at any size")
    if quick.calls > MAX_CALLS:
        raise InfeasiblePlanError(
            f"{name}: too large for the packet simulator: {quick.calls:,} collective calls"
            f"{its} (limit {MAX_CALLS:,}; --scale does not reduce calls); use {fewer}a "
            "smaller scenario; `tokenpcap plan` reports its traffic")
    if quick.messages > MAX_MESSAGES:
        floor = _messages_at_any_scale(plan, iterations)
        hint = hint.replace("(fewer and smaller messages)",
                            f"(fewer and smaller messages: {floor:,} when every call is one element)")
        if floor > MAX_MESSAGES:
            hint = (f"--scale cannot help (at least {floor:,} messages at any scale): use "
                    f"{fewer}a smaller scenario; `tokenpcap plan` reports its traffic")
        raise InfeasiblePlanError(
            f"{name}: too large for the packet simulator: {quick.messages:,} RDMA messages"
            f"{scale}{its} (limit {MAX_MESSAGES:,}, about {quick.memory_bytes / 1e9:,.1f} GB "
            f"of simulator state{' per iteration' if iterations > 1 else ''}); {hint}")
    work = estimate_work(plan, iterations)
    if work.nvlink_copies > MAX_NVLINK_COPIES:
        raise InfeasiblePlanError(
            f"{name}: too large for the packet simulator: {work.nvlink_copies:,} NVLink "
            f"copies{scale}{its} (limit {MAX_NVLINK_COPIES:,}); {hint}")
    return work
