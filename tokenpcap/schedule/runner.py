"""Stage 5: transfers × cluster → timed RDMA messages and the packets the NICs send.

:class:`Schedule` runs every rank's program (:mod:`tokenpcap.schedule.program`: 1F1B, blocking
TP, DP buckets overlapping the backward pass, optimizer) on the compiled NIC engine
(:mod:`tokenpcap.schedule.engine.kernel`): compute is a timer (:mod:`tokenpcap.schedule.compute`),
a collective call becomes transfers (:mod:`tokenpcap.collectives.transfers`), a transfer between
nodes an RDMA message posted on its sender's NIC, a transfer inside a node an NVLink copy (a
timer: it is not on the wire). The whole job is timed message by message; frames are
materialized only for the NICs asked for (``nics``).

Rules (all times integer ns):

* A rank *starts* a call when its program reaches it. A transfer is launched at the first instant
  when its sender and its receiver have both started the call (NCCL's rendezvous: the receiver's
  buffer must be posted) and every transfer it depends on has arrived
  (:mod:`tokenpcap.collectives.transfers`). A rank has *finished* a call when every transfer it
  sends or receives has arrived; a blocking call resumes the program then.
* RDMA messages go on QP index ``dim_index * channels + channel``: one NCCL communicator per
  parallel dimension (:data:`tokenpcap.records.DIMS`), one connection per channel. With
  ``generation.clear_to_send`` each data message waits for a 64-byte RDMA WRITE from its receiver
  on the receiver's QP of the same connection (NCCL's ``ncclIbSendFifo`` entry). Every packet
  with AckReq (the last of a message, every ``ack_every_packets``-th) is answered by an ACK
  :data:`~tokenpcap.schedule.engine.frames.ACK_DELAY_NS` after it arrived.
* A NIC sends one frame at a time at its link rate (layer-1 time of each frame, ceiling ns),
  ACKs first, then its eligible QPs round-robin one packet per turn in the order the QPs were
  created, each QP's messages in the order they were posted (:mod:`tokenpcap.schedule.engine.port`
  describes the arbiter). A message arrives ``network.latency_ns`` after its last bit left.
* NVLink: each GPU sends its NVLink copies one after another at ``nvlink_gbps``
  (``ceil(bytes·8/nvlink_gbps)`` ns each) and a copy arrives :data:`NVLINK_LATENCY_NS` after its
  last byte left. When an iteration has more than :data:`NVLINK_COPIES_PER_COPY` copies (TP
  inside the nodes of a production job: 739 M for Llama-3 70B on 64 nodes), a call whose every
  hop is on NVLink is timed as a whole instead (it never reaches a capture): it starts when every
  rank of it has started and its GPUs' NVLink is free, and ends ``ceil(B·8/nvlink_gbps) +
  steps·NVLINK_LATENCY_NS`` later, ``B`` the most bytes one of its ranks sends (the α–β time of
  Thakur, Rabenseifner & Gropp 2005 with the NVLink latency as α); :attr:`Schedule.nvlink_mode`
  says which, and :attr:`Schedule.nvlink` then lists only the copies of mixed calls.
* Iteration ``i + 1`` of a rank starts when its iteration ``i`` ends (after its optimizer step).

Events at one instant run in a fixed order (:mod:`tokenpcap.schedule.engine.kernel`), so the same
inputs give the same times, message ids and frames; these are exactly those of the discrete-event
Python engine (:mod:`tokenpcap.schedule.reference`), which the tests compare. A run whose
data-parallel replicas are translates of each other (:mod:`tokenpcap.schedule.replicas`) makes the
transfers launched at one instant messages in a canonical order instead (both engines), and is
timed through one replica when its captures allow (``replicas``).

The rows a run holds (messages, NVLink copies, compute blocks, transfers) and the provenance each
message carries: :mod:`tokenpcap.schedule.results`.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Iterator

import numpy as np

from tokenpcap.collectives.transfers import drop_cached
from tokenpcap.errors import InputError, raise_if_stopped
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import Plan, build_plan
from tokenpcap.records import TX_FLAG_CE
from tokenpcap.records.points import NIC_TX, CapturePoint, parse_point
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine import interpreted
from tokenpcap.schedule.engine.compile_aside import compile_engine, compile_in_background
from tokenpcap.schedule.engine.compiled import in_cache
from tokenpcap.schedule.engine.cclog import cc_log
from tokenpcap.schedule.engine.fablog import fabric_log
from tokenpcap.schedule.engine.fabstate import fabric_args
from tokenpcap.schedule.engine.fabric import flush_samples
from tokenpcap.schedule.engine.frames import NicModel
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.schedule.engine.state import build_state
from tokenpcap.schedule.engine.table import MSG_STATE_DTYPE
from tokenpcap.schedule.spans import token_range, token_ranges
from tokenpcap.schedule.flat import flatten
from tokenpcap.schedule.replicas import quotient_flats
from tokenpcap.schedule.replicaview import ReplicaView
from tokenpcap.schedule.results import (NVLINK_DTYPE, TIMELINE_DTYPE, MessageIndex, ScheduleResults,
                                         call_columns)

__all__ = ["Schedule", "MessageIndex", "NVLINK_LATENCY_NS", "NVLINK_COPIES_PER_COPY", "TIMELINE_DTYPE", "NVLINK_DTYPE", "token_range",
           "token_ranges", "TX_DTYPE", "MSG_STATE_DTYPE"]

#: Latency of an NVLink copy after its last byte (ns); a modelling constant of the order of
#: NCCL's intra-node small-message latency.
NVLINK_LATENCY_NS = 500

#: NVLink copies per iteration up to which every copy is timed (above: per collective).
NVLINK_COPIES_PER_COPY = 2_000_000
_TX = ("time_ns", "nic", "peer_nic", "msg", "index", "kind", "frame_bytes")
#: The rows :meth:`Schedule.run` yields when the fabric marks ECN: ``TX_DTYPE`` and the ``flags``
#: the lowering reads (``tokenpcap.records.TX_FLAG_CE``: the packet carries CE).
TX_CC_DTYPE = np.dtype(TX_DTYPE.descr + [("flags", "u1")])


class Schedule(ScheduleResults):
    """Run the iterations of a plan on the compiled NIC engine (module docstring).

    The scale is the plan's (``plan.scale``: its calls' sizes are already scaled, see
    :func:`tokenpcap.plan.build.build_plan`); the schedule takes the sizes as they are and divides
    compute times by the same scale, so bytes are never scaled twice.

    Args:
        plan: :func:`tokenpcap.plan.build.build_plan`'s result.
        iterations: iterations to run (default the scenario's ``generation.iterations``).
        scale: ``None`` (default) or ``plan.scale``; another value plans the scenario again at
            that scale and runs that plan (``self.plan``).
        nics: the NICs whose frames :meth:`run` yields (default all); every NIC is timed.
        chunk_rows: most frames per chunk :meth:`run` yields.
        keep_nvlink: record every NVLink copy in :attr:`nvlink` (default).
        keep_history: record the compute blocks in :attr:`timeline` (default).
        ib_grh: native InfiniBand frames carry a GRH (frame lengths).
        nvlink_copies: NVLink copies per iteration up to which each copy is timed (module
            docstring; 0 times every NVLink-only call as a whole).
        keep_messages: keep every message's row for :attr:`messages` after the run (default).
            False streams: the engine holds only the messages in progress (a ring of rows,
            :mod:`tokenpcap.schedule.engine.ring`), :meth:`message_rows` answers for the
            messages the frames of the chunk just handed out name, and :attr:`messages` raises.
        ring_rows: the ring's first size in rows (a power of two; it grows as needed).
        replicas: time one data-parallel replica for all of them when that is exact
            (:mod:`tokenpcap.schedule.replicas`: the run passes the quotient's checks, its
            messages are not kept and every NIC in ``nics`` is data-parallel index 0's); the
            frames, message rows, timeline and NVLink copies are then the whole run's
            (:mod:`tokenpcap.schedule.replicaview`). False: every rank is timed. Either way a
            run that passes the checks orders its instants canonically, so both give the same.
        point: the capture point whose frames :meth:`run` yields
            (:class:`tokenpcap.records.points.CapturePoint`, default ``NIC_TX``: what the NICs
            send); kept as :attr:`point`.

    Raises:
        InputError: ``iterations`` or ``scale`` < 1; NICs out of range; settings the engine
            cannot take (:class:`~tokenpcap.schedule.engine.frames.NicModel`); ``ring_rows``
            not a power of two; a ``point`` other than ``nic-tx`` while the engine has no
            fabric to see frames there.
    """

    def __init__(self, plan: Plan, *, iterations: int | None = None, scale: int | None = None,
                 nics=None, chunk_rows: int = 1 << 16, keep_nvlink: bool = True,
                 keep_history: bool = True, ib_grh: bool = False,
                 nvlink_copies: int = NVLINK_COPIES_PER_COPY, keep_messages: bool = True,
                 ring_rows: int = 1 << 16, point: CapturePoint | str = NIC_TX, topology=None,
                 replicas: bool = True):
        if isinstance(point, str):
            point = parse_point(point)
        if not isinstance(point, CapturePoint):
            raise InputError(f"point: got {point!r}, expected a CapturePoint "
                             f"(tokenpcap.records.points.parse_point)")
        self.point = point
        s = plan.scenario
        self.iterations = s.generation.iterations if iterations is None else int(iterations)
        if self.iterations < 1 or (scale is not None and scale < 1):
            raise InputError(f"iterations: got {self.iterations}, scale: got {scale}, expected "
                             "integers >= 1")
        if scale is not None and int(scale) != plan.scale:
            plan = build_plan(s, plan.tokens, scale=int(scale))
        self.plan, self.scenario, self.scale = plan, s, plan.scale
        self._seq_length = s.token_layout[1]       # a workload's: 1 (it carries no tokens)
        self.layout = plan.layout
        self.engine = NicModel(s.cluster, s.generation, ib_grh=ib_grh)
        if chunk_rows < 1:
            raise InputError(f"chunk_rows: got {chunk_rows}, expected an integer >= 1")
        if nics is not None:
            bad = [n for n in nics if not 0 <= int(n) < self.engine.n_nics]
            if bad:
                raise InputError(f"nics: got {bad[0]}, expected 0 .. {self.engine.n_nics - 1}")
        self.nics = None if nics is None else frozenset(int(n) for n in nics)
        self._chunk = int(chunk_rows)
        pp = s.parallelism.pp
        # a workload scenario has no model: no compute, no shards (schedule.workload)
        times = [stage_times(s, st, self.scale) for st in range(pp)] if s.model else []
        shards = scenario_shards(s) if s.model else []
        rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
        nvl = ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS)
        tables: dict = {}                   # one ShapeTable for the iterations that share it
        flats = [flatten(plan, it, shards, times, nvl, int(nvlink_copies), tables=tables)
                 for it in range(self.iterations)]
        drop_cached()   # the flats' shape tables hold copies: not kept twice while building
        self.nvlink_mode = "collectives" if any((f.call_ab >= 0).any() for f in flats) else "copies"
        fab = self._fabric_args(s, point, topology)
        flats, canonical = self._quotient(flats, bool(replicas) and not keep_messages)
        #: The transfers launched at one instant are ordered canonically (``CANON``,
        #: :mod:`tokenpcap.schedule.engine.events`): the run passes the quotient's checks.
        self.canonical_order = canonical
        # int64 (C, 9) per call of the run: iteration, layer, microbatch, call_id, token_start,
        # token_end, seq_start, seq_end, message_bytes (no call objects are kept: :meth:`call`)
        self._call_attr = np.concatenate([call_columns(f.calls) for f in flats])
        lp = plan.line_protocols()           # uint8 LINE_PROTOCOLS code per call of the run
        #: :meth:`tokenpcap.plan.build.Plan.line_protocols` of the plan run (None: all Simple),
        #: kept for the lowering: it walks every call of an iteration (seconds for a big job)
        self.line_protocols = lp
        self._call_line = (np.zeros(len(self._call_attr), np.uint8) if lp is None
                           else lp[self._call_attr[:, 3] % lp.size])
        self._eng = build_state(flats, self.layout, self.engine, channels=s.collectives.channels,
                                nvlink_gbps=s.cluster.nvlink_gbps, nvlink_latency_ns=NVLINK_LATENCY_NS,
                                nics=self.nics, chunk_rows=self._chunk,
                                keep_history=keep_history, keep_nvlink=keep_nvlink,
                                keep_messages=keep_messages, ring_rows=ring_rows,
                                canonical=canonical, **fab)
        self.keep_messages = bool(keep_messages)
        self._done = False
        #: Called once when :meth:`run` starts, before the first event (what a caller shows
        #: while the job is timed: :class:`tokenpcap.pipeline.Timing`); None: nothing.
        self.on_run: Callable[[], None] | None = None

    def _quotient(self, flats: list, allowed: bool) -> tuple[list, bool]:
        """``(flats to run, canonical)``: the quotient's flats when ``allowed`` and the run is
        one replica's translates (:func:`~tokenpcap.schedule.replicas.quotient_flats`) whose
        selected NICs are all a representative's, else ``flats``; ``canonical``: the run's
        instants are ordered canonically (:mod:`tokenpcap.schedule.engine.events`, ``CANON``),
        which a run that passes the quotient's checks always is, timed whole or not, so that
        both give the same times. Sets :attr:`replicas_reason` (what was decided and why) and
        :attr:`replica_view` (None: every rank timed)."""
        self.replica_view = None
        q, why = quotient_flats(flats, self.layout, fabric_queued=self.fabric_queued,
                                workload=not self.scenario.model)
        if q is not None and self.nvlink_mode != "copies":
            q, why = None, ("NVLink-only calls are timed as a whole (their starts at one "
                            "instant are not ordered canonically)")
        self.replicas_reason = why
        if q is None:
            return flats, False
        view = ReplicaView(q)
        reps = set(view.representative_nics(self.engine.n_nics).tolist())
        if not allowed or self.nics is None or not self.nics <= reps:
            self.replicas_reason = ("every rank timed (canonical order): " +
                                    ("the frames of NICs outside data-parallel index 0 are asked"
                                     if allowed else "every message row is kept or the caller "
                                     "asked for every rank"))
            return flats, True
        self.replica_view = view
        return q.flats, True

    def _run_args(self) -> tuple:
        """``kernel.run``'s eight arguments for this run."""
        e = self._eng
        return (e.S, e.cf, e.sc, e.heap, e.acks, e.out, e.launch, e.fabric)

    def engine_cached(self) -> bool:
        """True when numba's on-disk cache holds the engine's entry point for this run's arrays
        (:func:`~tokenpcap.schedule.engine.compiled.in_cache`): :meth:`compile_engine` then
        only loads it."""
        import numba

        return in_cache(K.run, tuple(numba.typeof(x) for x in self._run_args()))

    def compile_engine(self, aside=None) -> None:
        """Compile the engine's kernels for this run's arrays now (or load them from numba's
        cache, :mod:`tokenpcap.schedule.engine.compiled`) instead of at the first event, so
        that the compile is a step of its own; ``aside``: a helper process compiling part of
        them meanwhile (:mod:`tokenpcap.schedule.engine.compile_aside`), or None."""
        run = self._run_args()
        commit = run[:6] + (0, 0, run[7]) if self._eng.selected.size else None
        compile_engine(run, commit, aside)

    def time_uncompiled(self, aside) -> None:
        """Time this run with the engine uncompiled (:mod:`~tokenpcap.schedule.engine.interpreted`)
        while the helper process ``aside`` compiles the engine for this run's arrays into numba's
        cache in the background, for the next runs
        (:func:`~tokenpcap.schedule.engine.compile_aside.compile_in_background`; None: no
        helper, nothing compiled). An ideal fabric's run only (module
        :mod:`~tokenpcap.schedule.engine.interpreted`).

        Raises:
            ValueError: the run's fabric is queued."""
        if self.fabric_queued:
            raise ValueError("internal: a queued fabric's run is timed compiled")
        if aside is not None:
            run = self._run_args()
            commit = run[:6] + (0, 0, run[7]) if self._eng.selected.size else None
            compile_in_background(run, commit, aside)
        self._eng.kernel = interpreted.KERNEL

    @property
    def selected_nics(self) -> int:
        """The NICs whose frames this run makes."""
        return int(self._eng.selected.size)

    def _fabric_args(self, s, point, topology) -> dict:
        args = fabric_args(s, point, topology)
        self.fabric_queued = bool(args)
        self.topology = args.get("topology")
        return args

    # ------------------------------------------------------------------ running
    def run(self) -> Iterator[np.ndarray]:
        """Run to the end; yield the selected NICs' transmitted frames
        (:data:`~tokenpcap.schedule.engine.port.TX_DTYPE` chunks of at most ``chunk_rows`` rows,
        sorted by ``time_ns`` then NIC across chunks).

        Raises:
            RuntimeError: a rank could not finish its program (a deadlock: an internal error).
        """
        if self.on_run is not None:
            self.on_run()
        eng = self._eng
        while True:
            status = eng.run()
            raise_if_stopped()      # a stop lost in numba's compiler callbacks stops the run here
            eng.commit(int(eng.sc[K.FRONT]))
            out = eng.out
            rows = out[: int(eng.sc[K.NOUT])]
            keep = rows[:, 0] < eng.sc[K.FRONT]
            got, rest = rows[keep], rows[~keep]
            out[: rest.shape[0]] = rest
            eng.sc[K.NOUT] = rest.shape[0]
            if got.shape[0]:
                got = got[np.lexsort((got[:, 1], got[:, 0]))]
                if self.replica_view is not None:
                    self._real_peers(got)
                tx = np.empty(got.shape[0], TX_CC_DTYPE if eng.cf[K.F_ECN] else TX_DTYPE)
                for j, name in enumerate(_TX):
                    tx[name] = got[:, j]
                if eng.cf[K.F_ECN]:
                    # the engine adds OUT_CE to a CE-marked packet's kind (module ecn)
                    ce = (got[:, 5] & K.OUT_CE) != 0
                    tx["kind"] = got[:, 5] & ~K.OUT_CE
                    tx["flags"] = np.where(ce, TX_FLAG_CE, 0)
                for i in range(0, tx.size, self._chunk):
                    yield tx[i: i + self._chunk]
            if status == 0:
                if eng.cf[K.FAB]:
                    flush_samples(eng.S, eng.cf, eng.sc)
                break
            eng.handed_out(int(eng.sc[K.FRONT]))
        rk = eng.S.rk
        stuck = np.flatnonzero((rk[:, K.R_PC] < rk[:, K.R_END]) | (rk[:, K.R_BLOCKED] != 0)
                               | (rk[:, K.R_IT] < self.iterations))
        if stuck.size:
            r = int(stuck[0])
            raise RuntimeError(f"internal: ranks {stuck[:8].tolist()} did not finish; rank {r} at "
                               f"iteration {int(rk[r, K.R_IT])} instruction {int(rk[r, K.R_PC])}")
        self._done = True

    # ------------------------------------------------------------------ logs and counters
    def fabric_log(self):
        """What the queued fabric did so far: ``(tables, FabricSummary)``
        (:func:`tokenpcap.schedule.engine.fablog.fabric_log`; the tables of
        :data:`tokenpcap.records.fabric.FABRIC_TABLES`).

        Raises:
            RuntimeError: the cluster's fabric is ideal (nothing was queued).
        """
        if not self.fabric_queued:
            raise RuntimeError("Schedule.fabric_log: the fabric is ideal (fabric.model: ideal); "
                               "expected a cluster with fabric.model: queued")
        return fabric_log(self._eng, self.topology, self.scenario.cluster.fabric)

    def cc_log(self) -> dict[str, np.ndarray]:
        """What congestion control did so far: the tables of
        :data:`tokenpcap.records.cc.CC_TABLES` (CNPs, DCQCN rate changes, CE marks per port and
        per QP; :func:`tokenpcap.schedule.engine.cclog.cc_log`).

        Raises:
            RuntimeError: the cluster's fabric is ideal (nothing was marked).
        """
        if not self.fabric_queued:
            raise RuntimeError("Schedule.cc_log: the fabric is ideal (fabric.model: ideal); "
                               "expected a cluster with fabric.model: queued")
        return cc_log(self._eng)

    @property
    def fabric_counters(self) -> dict[str, int]:
        """Counters of the queued fabric so far: ``packet_hops`` (link traversals), ``pfc_frames``
        sent, ``headroom_overflows`` (lossless packets admitted beyond their headroom), ``drops``,
        ``ce_marks`` (packets switches marked CE), ``cnps`` (CNPs notification points sent)."""
        sc = self._eng.sc
        return dict(packet_hops=int(sc[K.HOPS]), pfc_frames=int(sc[K.NPFC]),
                    headroom_overflows=int(sc[K.HDRM_OVER]), drops=int(sc[K.DROPS]),
                    ce_marks=int(sc[K.NCE]), cnps=int(sc[K.NCNP]))

    @property
    def event_counts(self) -> dict[str, int]:
        """What the engine's loop did so far (:mod:`tokenpcap.schedule.engine.events`, the
        ``NPOP`` slots): events pushed on the heap (``pushed``), events popped by type
        (``ready``, ``ack``, ``arrive``, ``timer``, ``wake``, ``hop``, ``free``, ``pfc``),
        messages posted without the heap (``inline``), wakes popped after their port's wake
        moved (``stale_wakes``), wakes that committed no stop slot (``empty_wakes``) and stop
        slots committed (``stops``)."""
        sc = self._eng.sc
        out = {"pushed": int(sc[K.SEQ])}
        for i, name in enumerate(("ready", "ack", "arrive", "timer", "wake", "hop", "free", "pfc")):
            out[name] = int(sc[K.NPOP + i])
        out.update(inline=int(sc[K.NINLINE]), stale_wakes=int(sc[K.NSTALE]),
                   empty_wakes=int(sc[K.NEMPTY]), stops=int(sc[K.NSTOP]))
        return out
