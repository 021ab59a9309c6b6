"""What the timing engine can do: the work of a run, estimated from the plan before simulating.

The compiled engine (:mod:`tokenpcap.schedule.runner` on :mod:`tokenpcap.schedule.engine.kernel`)
times every RDMA message of the job (each data message plus its clear-to-send write) at a cost
that does not depend on its packets, and every NVLink copy it times one by one (an iteration with
more than :data:`~tokenpcap.schedule.runner.NVLINK_COPIES_PER_COPY` copies times its NVLink-only
calls as a whole). Its state is arrays held for every iteration of the run; the Python work before
it is per collective call (programs and transfers, vectorized per call shape). So what bounds a
run is counted in calls, messages and NVLink copies, all known from the plan:

* ``messages``: the plan's message count (``Plan.pcap["messages"]``: every NIC hop cut into
  ``collectives.channels`` parts and ``slice_bytes`` slices, at the plan's scale), doubled with
  ``generation.clear_to_send``, times the iterations simulated;
* ``nvlink_copies``: the NVLink copies timed one by one (every intra-node hop cut the same way
  while an iteration has at most ``NVLINK_COPIES_PER_COPY`` of them; beyond, only those of calls
  that also cross nodes), times the iterations;
* ``calls``: ``Plan.calls_per_iteration`` times the iterations;
* ``packets``: data packets + ACKs (+ one packet per clear-to-send write) of the whole job; only
  the selected NICs' are made.

What a run holds (measured on the project's reference machine, 2 cores, 23 GB, Python 3.11,
numba 0.68, shared; benchmarks/README.md, "engine_state.py", "call_state.py", "message_ring.py";
docs/generate.md, "Limits"):

* nothing per transfer: the engine names a transfer by its call and its index in the call
  (:mod:`tokenpcap.schedule.engine.access`) and holds the dependency countdowns only of the
  calls in flight (:mod:`tokenpcap.schedule.engine.slabs`), :data:`SLAB_WORD_BYTES` per word of
  :attr:`Shapes.slab_words`, a bound of the pool's high-water mark (:func:`shape_counts`);
* per row of the call-shape templates (the transfers of each distinct canonical shape, shared
  by every call of that shape and by the iterations of a run:
  :meth:`tokenpcap.schedule.flatbuild.ShapeTable.join`), :data:`TEMPLATE_ROW_BYTES`: the
  plan's cached transfers of the shape, the template's columns, its dependency and send and
  receive lists, the engine's ``ct`` row and the provenance columns, fitted with
  :data:`CALL_STATE_BYTES` so that the estimate bounds from above the peak RSS of building and
  timing a whole unscaled iteration of the production scenarios (the measurements:
  docs/generate.md, "Limits"; the peak is while the engine's arrays are made, the iteration's
  flat arrays still held); each iteration after the first adds :data:`CALL_NEXT_BYTES` per
  call;
* per call, :data:`CALL_STATE_BYTES`: its ranks' participations and program steps in the engine
  and, at the peak while the engine's arrays are made, in the iteration's flat arrays too (no
  call objects are kept); ``benchmarks/call_state.py`` measures it as the peak RSS a second
  iteration adds, per call, on jobs whose calls outweigh their messages;
* per NVLink copy timed one by one, :data:`COPY_STATE_BYTES`, its row when the run keeps the
  copies (``keep_nvlink``), and at most :data:`MAX_NVLINK_COPIES` of them;
* per RDMA message, :data:`MESSAGE_ROW_BYTES` (its row of the message table) only when the run
  keeps every message (``keep_messages``: exports, plots, traces, comparisons read the whole table
  after the run). ``generate`` keeps only the messages in progress (a ring of rows,
  :mod:`tokenpcap.schedule.engine.ring`: GPT-3 175B's 56.9 M messages in 2 M rows), which the
  per-call constant covers.

No count of the run is bounded by an integer width before memory: transfer and message ids and
every count of them are int64 in the engine (:mod:`tokenpcap.schedule.engine.state`; a run of
more than 2**31 transfers times as one of fewer, ``tests/schedule/engine/test_widths.py``), and
what stays int32 (a countdown, a call's transfer count, a participation's and an instruction's
columns) is bounded by one call's transfers (at most 2**31 - 1, checked) or by calls, ranks
and program steps, whose state (:data:`CALL_STATE_BYTES` per call) passes
:data:`MAX_STATE_BYTES` long before 2**31 of them. So :func:`check_work`'s memory estimate is
the whole check, and it grows with the calls and the distinct call shapes, not with the
messages: a whole iteration of DeepSeek-V3 on 2,048 GPUs (9.0 G RDMA messages) is estimated
in docs/generate.md, "Limits".

Time: :data:`MESSAGES_PER_S` messages per CPU second with every NIC timed (the engine with its
event loop's parts inlined, ``benchmarks/engine_timing.py``, 2026-12-07: 1.17-1.70 M per CPU
second on llama3-70b-64n and gpt3-175b-megatron at ``--scale`` 100 to 10; GPT-3 175B's whole
iteration, 172.6 M messages, timed and written for node 0 in 2 min 13 s at load 1-2). :func:`check_work` refuses a run whose state would pass :data:`MAX_STATE_BYTES` (the
calls of every iteration counted in it; for a command, its run kind's estimate of its whole
peak: :mod:`tokenpcap.schedule.memory`) with :class:`~tokenpcap.errors.InfeasiblePlanError`
before anything is simulated, and says what fits: fewer iterations, no clear-to-send writes, or the
smallest ``--scale`` that fits.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.schedule.machine import memory_bytes, state_limit_bytes
from tokenpcap.schedule.memory import RunKind, engine_run
from tokenpcap.schedule.shapecount import Shapes, shape_counts

__all__ = ["Work", "estimate_work", "check_work", "MAX_STATE_BYTES", "MACHINE_MEMORY_BYTES",
           "MAX_MESSAGES",
           "MAX_NVLINK_COPIES", "MESSAGE_ROW_BYTES", "MESSAGE_STATE_BYTES", "TEMPLATE_ROW_BYTES",
           "SLAB_WORD_BYTES", "COPY_STATE_BYTES", "CALL_STATE_BYTES", "CALL_NEXT_BYTES",
           "Shapes", "shape_counts",
           "MESSAGES_PER_S", "NVLINK_COPIES_PER_S",
           "PACKETS_PER_S"]

#: What one run may plan to hold (bytes): three fifths of the machine's memory or its cgroup's
#: limit (:mod:`tokenpcap.schedule.machine`; 15.2 GB on the reference machine's 25.3 GB).
MACHINE_MEMORY_BYTES = memory_bytes()
MAX_STATE_BYTES = state_limit_bytes(MACHINE_MEMORY_BYTES)
#: Measured costs (module docstring).
MESSAGE_ROW_BYTES = 136
#: A row of the call-shape templates (a distinct shape's transfer), fitted (module docstring):
#: the largest of (peak RSS - calls x CALL_STATE_BYTES - the slab bound) / rows over the whole
#: iterations measured on 2026-12-07, Llama-3.1 405B's 413 B (GPT-3 175B's 217 B), rounded up;
#: with the templates up to a shared local index the re-measured peaks stay below the estimate
#: (docs/generate.md, "Limits").
TEMPLATE_ROW_BYTES = 420
#: A countdown word of a call in flight (int32; module slabs).
SLAB_WORD_BYTES = 4
#: An NVLink copy timed one by one: its kept row (transfer, start, arrival: three int64) when
#: the run keeps them (``keep_nvlink``); nothing else outlives its timer in the heap.
COPY_STATE_BYTES = 24
CALL_STATE_BYTES = 1550
#: What each iteration after the first adds (its templates are the first one's).
CALL_NEXT_BYTES = 950
MESSAGES_PER_S = 1_300_000
#: A kept RDMA message with clear-to-send writes: its row (nothing is held per transfer).
MESSAGE_STATE_BYTES = MESSAGE_ROW_BYTES
NVLINK_COPIES_PER_S = 600_000
#: The queued fabric's cost of one packet crossing one link (CPU seconds, reference machine):
#: 0.70 us per packet-hop on top of the per-message work, measured at three scales of GPT-3 175B
#: on a queued rail-optimized fabric (benchmarks/fabric_engine.py, benchmarks/README.md).
FABRIC_PACKET_HOPS_PER_S = 1_430_000
PACKETS_PER_S = 2_000_000
#: RDMA messages (data + clear-to-send) a run that keeps every message may time: what
#: MAX_STATE_BYTES holds.
MAX_MESSAGES = MAX_STATE_BYTES // MESSAGE_STATE_BYTES
#: NVLink copies one run may time one by one: as many kept rows as MAX_STATE_BYTES holds.
MAX_NVLINK_COPIES = MAX_STATE_BYTES // COPY_STATE_BYTES


@dataclass(frozen=True)
class Work:
    """The work of a run (module docstring): counts over every simulated iteration."""

    iterations: int
    calls: int
    messages: int
    nvlink_copies: int
    packets: int
    transfers: int = 0              # data messages (the transfers between nodes)
    keep_messages: bool = True      # every message row kept (else only those in progress)
    p2p_transfers: int = 0          # of which NCCL's network p2p chunks (Plan.p2p_messages)
    packet_hops: int = 0            # packets x links crossed on a queued fabric (0: ideal)
    run: RunKind | None = None      # what the run does after timing (None: the engine alone)
    template_rows: int = 0          # rows of the call-shape templates (Shapes; shared)
    slab_words: int = 0             # countdown words the calls in flight may hold (Shapes)

    @property
    def memory_bytes(self) -> int:
        """Peak memory of the run (estimate, bytes): :attr:`engine_bytes` and what its run
        kind holds beyond (:meth:`tokenpcap.schedule.memory.RunKind.bytes`)."""
        if self.run is None:
            return self.engine_bytes
        return self.run.bytes(self.engine_bytes, self.messages)

    @property
    def engine_bytes(self) -> int:
        """Engine state of the run (estimate, bytes: the engine holds every iteration's calls,
        the call-shape templates once, the countdowns of the calls in flight, and every
        message's row only with ``keep_messages``; nothing per transfer; the iterations are
        alike, so each has ``1/iterations`` of the calls)."""
        rows = self.messages * MESSAGE_ROW_BYTES if self.keep_messages else 0
        n = max(1, self.iterations)
        c = self.calls // n
        first = (self.template_rows * TEMPLATE_ROW_BYTES + c * CALL_STATE_BYTES
                 + self.slab_words * SLAB_WORD_BYTES)
        later = (n - 1) * c * CALL_NEXT_BYTES
        return rows + first + later + self.nvlink_copies * COPY_STATE_BYTES

    @property
    def seconds(self) -> float:
        """CPU time of timing the run on the reference machine (estimate, seconds; making and
        writing the selected packets not included)."""
        return (self.messages / MESSAGES_PER_S + self.nvlink_copies / NVLINK_COPIES_PER_S
                + self.packet_hops / FABRIC_PACKET_HOPS_PER_S)


def _work_at_any_scale(plan, iterations: int, run: RunKind) -> Work:  # type: ignore[no-untyped-def]
    """The least work at any ``--scale``: the plan with every call at its floor
    (:func:`tokenpcap.plan.calls.scaled_bytes`: one element per piece, so every (hop, channel)
    that carries data unscaled carries one message; a call's messages never grow with the
    scale)."""
    from tokenpcap.plan.build import build_plan

    # A scale at least the largest unscaled call (scaled bytes * scale bounds it from above)
    # makes every call its floor, whatever --scale the plan was built at.
    big = max((f.message_bytes for f in plan.families), default=1) * plan.scale
    low = build_plan(plan.scenario, scale=max(plan.scale, big))
    return estimate_work(low, iterations, nvlink=False, run=run)


def _messages_at_any_scale(plan, iterations: int) -> int:  # type: ignore[no-untyped-def]
    """The messages of :func:`_work_at_any_scale`."""
    return _work_at_any_scale(plan, iterations, engine_run()).messages


def estimate_work(plan, iterations: int, *, nvlink: bool = True,  # type: ignore[no-untyped-def]
                  keep_messages: bool = True, run: RunKind | None = None) -> Work:
    """The work of simulating ``iterations`` iterations of ``plan`` (at ``plan.scale``), keeping
    every message row (``keep_messages``) or only those in progress; with ``run`` (a
    :class:`~tokenpcap.schedule.memory.RunKind`) its memory is that run kind's (and
    ``keep_messages`` the kind's).

    ``nvlink=False`` leaves the NVLink copies out of the work (they are counted in the same loop
    over every group of every call family as the templates' rows and the countdown slabs,
    :func:`shape_counts`). Raises nothing."""
    if run is not None:
        keep_messages = run.keep_messages
    s = plan.scenario
    cts = 2 if s.generation.clear_to_send else 1
    pc = plan.pcap
    msgs = pc["messages"] * cts * iterations
    packets = (pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"]) * iterations
    shapes = shape_counts(plan)
    nvl = shapes.copies * iterations if nvlink else 0
    fab = s.cluster.fabric
    hops = packets * _path_links(s.cluster) if fab.queued else 0
    return Work(iterations, plan.calls_per_iteration * iterations, msgs, nvl, packets,
                pc["messages"] * iterations, keep_messages,
                plan.p2p_messages * iterations, hops, run, shapes.template_rows,
                shapes.slab_words)


def _path_links(cluster) -> int:  # type: ignore[no-untyped-def]
    """Links on the longest NIC-to-NIC path of the cluster's queued fabric (2 through one leaf,
    4 up to a spine and down, 6 through a core): its hops per packet, bounded from above."""
    from tokenpcap.config.fabric import fabric_shape

    sh = fabric_shape(cluster.nodes, cluster.nics_per_node, cluster.link_gbps,
                      cluster.fabric.topology)
    return 2 if sh.leaves <= 1 or not sh.spines else 4 if not sh.cores else 6


def _smallest_scale(plan, iterations: int, run: RunKind
                    ) -> tuple[int, int] | None:  # type: ignore[no-untyped-def]
    """``(scale, messages)`` of the smallest power of ten above ``plan.scale`` (up to
    ``10**10``) whose plan the engine holds (:func:`_fits`), or None.

    A call's messages, transfers and countdowns do not grow with the scale
    (:func:`_work_at_any_scale`), so the powers are bisected: at most five plans are made of the
    ten (the largest first, then the bisection's). The scale returned was planned and fits
    whatever the work does between the powers tried."""
    from tokenpcap.plan.build import build_plan

    def work(e: int) -> Work:
        return estimate_work(build_plan(plan.scenario, scale=10 ** e), iterations, nvlink=False,
                             run=run)

    lo = len(str(plan.scale))          # the first power of ten above plan.scale: 10**lo
    if lo > 10:
        return None
    hi, w_hi = 10, work(10)            # the least exponent known to fit and its work
    if not _fits(w_hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        w = work(mid)
        if _fits(w):
            hi, w_hi = mid, w
        else:
            lo = mid + 1
    return 10 ** hi, w_hi.messages


def _smaller_batch(plan, floor: Work, iterations: int,  # type: ignore[no-untyped-def]
                   run: RunKind) -> str:
    """Advice for a job no ``--scale`` fits: the largest ``training.global_batch_size`` (a
    multiple of ``u`` microbatches per data-parallel replica, ``u`` what the schedule needs:
    :func:`tokenpcap.config.feasibility.microbatch_multiple`) whose plan fits at some scale,
    with the smallest power-of-ten ``--scale`` that then fits, or, when ``u`` microbatches are
    too many, fewer data-parallel replicas.

    The messages and state of the floor grow with the microbatches (every TP, EP, CP and PP
    call is per microbatch; the DP buckets are per iteration): the count is extrapolated
    linearly from ``u`` microbatches and ``plan``'s, then checked, and lowered until its plan
    fits."""
    import dataclasses as dc

    from tokenpcap.config.feasibility import microbatch_multiple
    from tokenpcap.plan.build import build_plan

    s = plan.scenario
    fewer_dp = ("a smaller job fits, e.g. fewer data-parallel replicas on a matching cluster "
                f"(--set parallelism.dp=... --set cluster.nodes=...; dp is {s.parallelism.dp})")
    m_all = plan.microbatches
    u = 1 if s.model is None else microbatch_multiple(s.parallelism)
    if s.model is None or m_all <= u:
        return fewer_dp
    per = s.training.global_batch_size // m_all
    k_all = m_all // u

    def at(k: int):  # type: ignore[no-untyped-def]
        sm = dc.replace(s, training=dc.replace(s.training, global_batch_size=k * u * per))
        return sm, _work_at_any_scale(build_plan(sm, scale=plan.scale), iterations, run)

    _, one = at(1)
    if not _fits(one):
        return fewer_dp
    slope = [max(1, (a - b) // (k_all - 1)) for a, b in
             ((floor.messages, one.messages), (floor.memory_bytes, one.memory_bytes))]
    room = [(MAX_STATE_BYTES - one.memory_bytes) // slope[1]]
    if run.keep_messages:
        room.append((MAX_MESSAGES - one.messages) // slope[0])
    k = max(1, min(k_all - 1, 1 + min(room)))
    while True:
        sm, w = at(k)
        if _fits(w) or k == 1:
            break
        k = max(1, k * 3 // 4)
    m = k * u
    found = _smallest_scale(build_plan(sm, scale=plan.scale), iterations, run)
    how = f"--scale {found[0]} " if found else ""
    return (f"--set training.global_batch_size={m * per} ({m} of {m_all} microbatches) "
            f"{how}fits")


def _fits(w: Work) -> bool:
    """Whether the engine holds ``w``: its estimated state within :data:`MAX_STATE_BYTES` and,
    when it keeps every message, its messages within :data:`MAX_MESSAGES`."""
    return (not w.keep_messages or w.messages <= MAX_MESSAGES) and w.memory_bytes <= MAX_STATE_BYTES


def _per_iteration(w: Work, iterations: int) -> Work:
    n = max(1, iterations)
    return dataclasses.replace(w, iterations=1, calls=w.calls // n, messages=w.messages // n,
                               nvlink_copies=w.nvlink_copies // n, packets=w.packets // n,
                               transfers=w.transfers // n, p2p_transfers=w.p2p_transfers // n)


def _most_iterations(one: Work, copies: int) -> int:
    """The most iterations of a run whose one iteration is ``one`` (NVLink copies not counted in
    it) that the engine holds (:func:`_fits`, the state of later iterations smaller than the
    first's) with ``copies`` NVLink copies timed one by one per iteration within
    :data:`MAX_NVLINK_COPIES`; 0 when not even one fits."""
    def fits(n: int) -> bool:
        w = dataclasses.replace(one, iterations=n, calls=one.calls * n, messages=one.messages * n,
                                transfers=one.transfers * n, packets=one.packets * n,
                                p2p_transfers=one.p2p_transfers * n, nvlink_copies=0)
        return _fits(w) and n * copies <= MAX_NVLINK_COPIES

    lo, hi = 0, 1
    while fits(hi) and hi < 1 << 40:
        lo, hi = hi, hi * 2
    while hi - lo > 1:                      # fits(lo), not fits(hi): the state grows with n
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def check_work(plan, iterations: int, *, keep_messages: bool = True,  # type: ignore[no-untyped-def]
               run: RunKind | None = None) -> Work:
    """Estimate the work (:func:`estimate_work`) and refuse what the engine cannot hold, for a
    run that keeps every message row (``keep_messages``: exports, plots, traces) or only the
    messages in progress (``generate``); with ``run`` (a
    :class:`~tokenpcap.schedule.memory.RunKind`, whose ``keep_messages`` then counts) the
    memory checked is that run kind's estimate (:mod:`tokenpcap.schedule.memory`), else the
    engine's state alone.

    Returns:
        the :class:`Work` when it is within :data:`MAX_NVLINK_COPIES`,
        :data:`MAX_STATE_BYTES` and (keeping every message) :data:`MAX_MESSAGES`.

    Raises:
        InfeasiblePlanError: one line naming the scenario, the run kind, the estimate, the
            limit and what fits: at most so many iterations, the scenario without
            clear-to-send writes, the smallest ``--scale`` that fits, or (when none does) a
            smaller job; ``tokenpcap plan`` reports the traffic of any size.
    """
    run = engine_run(keep_messages) if run is None else run
    keep_messages = run.keep_messages
    s = plan.scenario
    name = s.name
    work = estimate_work(plan, iterations, run=run)
    quick = dataclasses.replace(work, nvlink_copies=0)
    scale = f" at --scale {plan.scale}" if plan.scale > 1 else ""
    its = f" over {iterations:,} iterations" if iterations > 1 else ""
    plan_hint = "`tokenpcap plan` reports its traffic at any size"
    if not _fits(quick):
        one = _per_iteration(quick, iterations)
        no_cts = dataclasses.replace(quick, messages=quick.messages // 2)
        if iterations > 1 and _fits(one):
            most = _most_iterations(one, work.nvlink_copies // max(1, iterations))
            fits = f"at most --iterations {max(1, most)} fit"
        elif s.generation.clear_to_send and _fits(no_cts):
            fits = (f"--set generation.clear_to_send=false fits ({no_cts.messages:,} "
                    "messages, no clear-to-send writes)")
        else:
            floor = _work_at_any_scale(plan, iterations, run)
            found = _smallest_scale(plan, iterations, run) if _fits(floor) else None
            if found is not None:
                fits = f"--scale {found[0]} fits ({found[1]:,} messages)"
            else:
                fits = (f"--scale cannot help (at least {floor.messages:,} messages and "
                        f"{floor.memory_bytes / 1e9:,.1f} GB at any scale): "
                        + _smaller_batch(plan, floor, iterations, run))
        limit = (f"limit {MAX_MESSAGES:,} messages kept, " if keep_messages else "limit ")
        what = (f"of memory as `{run.name}` runs it" if run.name else "of engine state")
        raise InfeasiblePlanError(
            f"{name}: too large for the timing engine: {quick.messages:,} RDMA messages"
            f"{scale}{its} need about {quick.memory_bytes / 1e9:,.1f} GB {what} ("
            f"{limit}{MAX_STATE_BYTES / 1e9:,.1f} GB of this machine's "
            f"{MACHINE_MEMORY_BYTES / 1e9:,.1f} GB); {fits}; {plan_hint}")
    if work.nvlink_copies > MAX_NVLINK_COPIES:
        one = _per_iteration(work, iterations)
        most = _most_iterations(one, one.nvlink_copies)
        fits = (f"at most --iterations {most} fit" if iterations > 1 and most >= 1 else
                "use a larger --scale (fewer slices to copy) or a smaller scenario")
        raise InfeasiblePlanError(
            f"{name}: too large for the timing engine: {work.nvlink_copies:,} NVLink "
            f"copies{scale}{its} timed one by one (limit {MAX_NVLINK_COPIES:,}); {fits}; "
            f"{plan_hint}")
    return work
