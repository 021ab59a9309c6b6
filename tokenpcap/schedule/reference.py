"""Stage 5: transfers × cluster → timed RDMA messages and the packets the NICs send.

:class:`Schedule` runs every rank's program (:mod:`tokenpcap.schedule.program`: 1F1B, blocking TP, DP
buckets overlapping the backward pass, optimizer) on the discrete-event NIC engine
(:class:`tokenpcap.schedule.engine.nic.Engine`): compute is a timer (:mod:`tokenpcap.schedule.compute`), a collective call
becomes transfers (:mod:`tokenpcap.collectives.transfers`), a transfer between nodes an RDMA message posted
on its sender's NIC, a transfer inside a node an NVLink copy (a timer: it is not on the wire).

Rules (all times integer ns):

* A rank *starts* a call when its program reaches it. A transfer is launched at the first instant
  when its sender and its receiver have both started the call (NCCL's rendezvous: the receiver's
  buffer must be posted) and every transfer it depends on has arrived
  (:mod:`tokenpcap.collectives.transfers`). A rank has *finished* a call when every transfer it sends or
  receives has arrived; a blocking call resumes the program then.
* RDMA messages go on QP index ``dim_index * channels + channel``: one NCCL communicator per
  parallel dimension (:data:`tokenpcap.records.DIMS`), one connection per channel.
* NVLink: each GPU sends its NVLink copies one after another at ``nvlink_gbps``
  (``ceil(bytes·8/nvlink_gbps)`` ns each) and a copy arrives :data:`NVLINK_LATENCY_NS` after its
  last byte left.
* Iteration ``i + 1`` of a rank starts when its iteration ``i`` ends (after its optimizer step).
  The programs of iteration ``i + 1`` (every rank's) are built when the first rank gets there,
  so a run holds the programs of the iterations in progress, not of the whole run.

Provenance: every message carries phase, dim, collective, iteration, layer, microbatch, step (the
algorithm step), call_id, rank_src, rank_dst; a message of a call that carries per-token data
(activations, TP buffers, cross-entropy values) has ``token_start``/``token_end``: Megatron lays an
activation out as ``[s, b, h]`` so byte ``o`` of a buffer of ``S`` bytes over sequence positions
``[p0, p1)`` belongs to position ``p0 + floor(o·(p1-p0)/S)`` of every one of the ``b`` samples;
a message covering bytes ``[o0, o1)`` holds positions ``[q0, q1)`` and the range is
``[token_start + q0, token_start + (b-1)·s + q1)`` (exact for ``b = 1``, enclosing otherwise).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Iterator

import numpy as np

from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.collectives.transfers import Transfers
from tokenpcap.schedule.compute import stage_times
from tokenpcap.records import COLLECTIVES, DIMS, KIND_DATA, MESSAGE_DTYPE, PHASES, VERB_WRITE
from tokenpcap.model import scenario_shards
from tokenpcap.schedule.engine.nic import Engine
from tokenpcap.schedule.runner import NVLINK_DTYPE, NVLINK_LATENCY_NS, TIMELINE_DTYPE
from tokenpcap.schedule.spans import token_range
from tokenpcap.wire.lines import LINE_PROTOCOLS
from tokenpcap.errors import InputError
from tokenpcap.plan.build import Plan, build_plan
from tokenpcap.schedule.program import CallMode, Compute, Mark, Overlap, Wait, build_programs
from tokenpcap.schedule.workload import workload_programs
from tokenpcap.plan.pipeline import chunk_layers

__all__ = ["ReferenceSchedule"]

class _CallRun:
    """Runtime state of one call: which ranks started it, what each transfer still waits for."""

    __slots__ = ("call", "tr", "wait", "started", "pending", "waiters", "size", "qp_base", "codes",
                 "line")

    def __init__(self, call: CollectiveCall, tr: Transfers, channels: int, line: int):
        self.call, self.tr, self.line = call, tr, line
        self.qp_base = DIMS.index(call.dim) * channels
        self.codes = (PHASES.index(call.phase), DIMS.index(call.dim),
                      COLLECTIVES.index(call.collective))
        self.wait = [len(d) + 2 for d in tr.deps]       # deps + sender started + receiver started
        self.started: set[int] = set()
        self.pending = {r: len(tr.by_src[r]) + len(tr.by_dst[r]) for r in call.group}
        self.waiters: dict[int, object] = {}
        self.size = call.message_bytes


class _Rank:
    __slots__ = ("rank", "prog", "pc", "it", "stream", "stream_busy", "stream_wait", "blocked",
                 "marks")

    def __init__(self, rank: int, prog: list):
        self.rank, self.prog, self.pc = rank, prog, 0
        self.it = 0                          # iteration of prog (the run's iterations: done)
        self.stream: list[int] = []          # async calls issued, not started (FIFO)
        self.stream_busy = False
        self.stream_wait = False
        self.blocked = False
        self.marks: dict[tuple, int] = {}


class ReferenceSchedule:
    """Run the iterations of a plan on the NIC engine (module docstring).

    The scale is the plan's (``plan.scale``: its calls' sizes are already scaled, see
    :func:`tokenpcap.plan.build.build_plan`); the schedule takes the sizes as they are and divides
    compute times by the same scale, so bytes are never scaled twice.

    Args:
        plan: :func:`tokenpcap.plan.build.build_plan`'s result.
        iterations: iterations to run (default the scenario's ``generation.iterations``).
        scale: ``None`` (default) or ``plan.scale``: the plan's scale. Another value plans the
            scenario again at that scale (``build_plan(plan.scenario, plan.tokens, scale=...)``)
            and runs that plan (``self.plan``).
        engine: an :class:`~tokenpcap.schedule.engine.nic.Engine` (default: one for the scenario's cluster).
        keep_nvlink: record every NVLink copy in :attr:`nvlink` (default); ``False`` keeps
            memory flat over long runs that do not need them (the generator).
        keep_history: keep every call (:meth:`call`) and compute block (:attr:`timeline`) of
            the run (default); ``False`` drops an iteration's calls once every rank has finished
            it, and records no timeline, so that memory stays flat over ``iterations`` (the
            generator: it needs neither after the packets are out).
        canonical: the transfers launched at one instant become messages and NVLink copies
            after the instant's last event, in the canonical order of the compiled engine
            (``CANON``, :func:`tokenpcap.schedule.engine.canon.canon_less`; the data QPs they
            need created before the clear-to-send ones), instead of after each event.

    Raises:
        InputError: ``iterations`` or ``scale`` < 1.
    """

    def __init__(self, plan: Plan, *, iterations: int | None = None, scale: int | None = None,
                 engine: Engine | None = None, keep_nvlink: bool = True,
                 keep_history: bool = True, canonical: bool = False):
        s = plan.scenario
        self.iterations = s.generation.iterations if iterations is None else int(iterations)
        if self.iterations < 1 or (scale is not None and scale < 1):
            raise InputError(f"iterations: got {self.iterations}, scale: got {scale}, expected "
                             "integers >= 1")
        if scale is not None and int(scale) != plan.scale:
            plan = build_plan(s, plan.tokens, scale=int(scale))
        self.plan, self.scenario = plan, s
        self.scale = plan.scale
        self.engine = engine if engine is not None else Engine(s.cluster, s.generation)
        self.layout = plan.layout
        cfg = s.collectives
        self._channels, self._slice = cfg.channels, cfg.slice_bytes
        rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
        self._nvl_num, self._nvl_den = rate.numerator, rate.denominator
        self._nvl_free = [0] * self.layout.world_size
        self._nic = self.layout.nic_array(np.arange(self.layout.world_size)).tolist()
        self._node = self.layout.node_array(np.arange(self.layout.world_size)).tolist()
        self._calls: dict[int, CollectiveCall] = {}
        self._runs: dict[int, _CallRun] = {}
        self._msg_transfer: dict[int, tuple[_CallRun, int]] = {}
        self._out: list[tuple] = []       # messages to post at the end of the current event
        self._canonical = bool(canonical)
        self._instant: list[tuple] = []   # (canonical) the transfers launched at this instant
        self._call_key: dict[int, int] = {}
        self._nvlink: list[tuple] = []
        self._keep_nvlink = bool(keep_nvlink)
        self._timeline: list[tuple] = []
        self._keep_history = bool(keep_history)
        self._progs: dict[int, dict[int, list]] = {}    # iteration -> rank -> program, not taken
        self._iter_calls: dict[int, list[int]] = {}     # iteration -> its call ids
        self._iter_left: dict[int, int] = {}            # iteration -> ranks not done with it
        s = self.scenario
        pp = s.parallelism.pp
        self._times = [stage_times(s, st, self.scale) for st in range(pp)] if s.model else []
        self._shards = scenario_shards(s) if s.model else []
        self._seq_length = s.token_layout[1]       # a workload's: 1 (it carries no tokens)
        self._ranks = [_Rank(r, self._program(0, r)) for r in range(self.layout.world_size)]

    # ------------------------------------------------------------------ programs
    def _program(self, it: int, rank: int) -> list:
        """Rank ``rank``'s program of iteration ``it``; the first rank to ask builds every rank's
        (and registers the iteration's calls)."""
        progs = self._progs.get(it)
        if progs is None:
            lay = self.layout
            calls = list(self.plan.calls(it))       # sizes already at the plan's scale
            for c in calls:
                self._calls[c.call_id] = c
            if self._canonical:
                # the collective's key: its iteration and family instance (every group's)
                tab = self.plan.call_table(it)
                self._call_key.update(zip(tab.call_id().tolist(),
                                          (tab.family_inst() + (it << 40)).tolist()))
            self._iter_calls[it] = [c.call_id for c in calls]
            self._iter_left[it] = lay.world_size
            wl = self.scenario.workload
            if wl is not None and wl.flows is not None:
                raise InputError("the reference engine: got a flows workload, expected another "
                                 "kind (the compiled engine alone runs a flows workload)")
            progs = self._progs[it] = workload_programs(
                calls, range(lay.world_size), wl.start_offsets_ns, self.plan.scale) \
                if wl is not None else build_programs(
                calls, range(lay.world_size), lay.coords, self._shards, self._times,
                self.plan.microbatches, it, self.scenario.training.recompute,
                chunks=[chunk_layers(self.scenario, st) for st in range(lay.pp)],
                overlap=Overlap.of(self.scenario.training))
        prog = progs.pop(rank)
        if not progs:
            del self._progs[it]
        return prog

    def _next_iteration(self, rk: _Rank) -> bool:
        """Rank ``rk`` has run its program to the end: give it the next iteration's program
        (False after the last). The calls of an iteration every rank is done with are over (a
        blocking, received or stream call finishes before its rank moves on, and a pipeline send
        before its receiver does): without ``keep_history`` they are dropped."""
        if rk.it >= self.iterations:
            return False
        left = self._iter_left[rk.it] = self._iter_left[rk.it] - 1
        if left == 0:
            del self._iter_left[rk.it]
            ids = self._iter_calls.pop(rk.it)
            if not self._keep_history:
                for cid in ids:
                    del self._calls[cid]
        rk.it += 1
        if rk.it >= self.iterations:
            rk.prog, rk.pc = [], 0
            return False
        rk.prog, rk.pc = self._program(rk.it, rk.rank), 0
        return True

    # ------------------------------------------------------------------ running
    def run(self) -> Iterator[np.ndarray]:
        """Run to the end; yield the engine's transmitted-frame chunks
        (:data:`tokenpcap.schedule.engine.nic.TX_DTYPE`, time-ordered, bounded size).

        Raises:
            RuntimeError: a rank could not finish its program (a deadlock: an internal error).
        """
        for rk in self._ranks:
            self.engine.at(0, lambda t, rk=rk: self._event(self._step, rk, t))
        yield from self.engine.run()
        stuck = [rk.rank for rk in self._ranks
                 if rk.pc < len(rk.prog) or rk.blocked or rk.it < self.iterations]
        if stuck:
            rk = self._ranks[stuck[0]]
            raise RuntimeError(f"internal: ranks {stuck[:8]} did not finish; rank {rk.rank} at "
                               f"iteration {rk.it} instruction {rk.pc}: "
                               f"{rk.prog[rk.pc - 1] if rk.pc else None}")

    @property
    def messages(self) -> np.ndarray:
        """The RDMA message table so far (``tokenpcap.schedule.engine.nic.MSG_STATE_DTYPE``: MESSAGE_DTYPE plus
        the engine's times; clear-to-send messages have ``kind == KIND_CTS``)."""
        return self.engine.messages

    @property
    def nvlink(self) -> np.ndarray:
        """NVLink copies so far, :data:`NVLINK_DTYPE` ``(n,)``."""
        return np.array(self._nvlink, dtype=NVLINK_DTYPE) if self._nvlink else np.zeros(0, NVLINK_DTYPE)

    @property
    def timeline(self) -> np.ndarray:
        """Compute blocks of every rank so far, :data:`TIMELINE_DTYPE` ``(n,)`` (none recorded
        with ``keep_history=False``)."""
        return np.array(self._timeline, dtype=TIMELINE_DTYPE) if self._timeline else \
            np.zeros(0, TIMELINE_DTYPE)

    def call(self, call_id: int) -> CollectiveCall:
        """The call with this id (sizes at the plan's scale).

        Raises:
            KeyError: an iteration not reached yet, or (``keep_history=False``) already over.
        """
        return self._calls[call_id]

    def _event(self, fn, *args) -> None:
        fn(*args)
        if self._out:
            self._flush()

    def _step(self, rk: _Rank, t: int) -> None:
        """Run rank ``rk``'s program from ``pc`` at time ``t`` until it blocks or ends."""
        rk.blocked = False
        while rk.pc < len(rk.prog) or self._next_iteration(rk):
            ins = rk.prog[rk.pc]
            rk.pc += 1
            if isinstance(ins, Compute):
                rk.blocked = True
                self.engine.at(t + ins.ns, lambda t2, rk=rk: self._event(self._step, rk, t2))
                return
            if isinstance(ins, Mark):
                if ins.begin:
                    rk.marks[ins.what] = t
                elif self._keep_history:
                    self._timeline.append((rk.rank, ins.iteration, ins.what.encode(),
                                           ins.microbatch, rk.marks.pop(ins.what), t))
                continue
            if isinstance(ins, Wait):
                if rk.stream or rk.stream_busy:
                    rk.stream_wait = rk.blocked = True
                    return
                continue
            cid, mode = ins.call_id, ins.mode
            if mode == CallMode.ASYNC:
                rk.stream.append(cid)
                if not rk.stream_busy:
                    self._stream_next(rk, t)
                continue
            if mode == CallMode.SEND:
                self._start(cid, rk.rank, t, None)
                continue
            if mode == CallMode.WAIT:       # a part started earlier (SEND): wait for its end
                run = self._runs.get(cid)
                if run is not None and run.pending[rk.rank] > 0:
                    run.waiters[rk.rank] = rk
                    rk.blocked = True
                    return
                continue
            rk.blocked = True
            if not self._start(cid, rk.rank, t, rk):
                return
            rk.blocked = False

    def _stream_next(self, rk: _Rank, t: int) -> None:
        while rk.stream:
            cid = rk.stream.pop(0)
            rk.stream_busy = True
            if not self._start(cid, rk.rank, t, ("stream", rk)):
                return
        rk.stream_busy = False
        if rk.stream_wait:
            rk.stream_wait = False
            self._step(rk, t)

    def _start(self, cid: int, rank: int, t: int, waiter) -> bool:
        """Rank ``rank`` starts call ``cid`` at ``t``; True when its part is already finished."""
        run = self._runs.get(cid)
        if run is None:
            call = self._calls[cid]
            run = self._runs[cid] = _CallRun(call, self.plan.call_transfers(call), self._channels,
                                                 LINE_PROTOCOLS[self.plan.protocol(call)])
        run.started.add(rank)
        tr = run.tr
        for x in tr.by_src[rank]:
            self._release(run, x, t)
        for x in tr.by_dst[rank]:
            self._release(run, x, t)
        if run.pending[rank] == 0:
            self._finish_rank(run, rank, t)
            return True
        if waiter is not None:
            run.waiters[rank] = waiter
        return False

    def _release(self, run: _CallRun, x: int, t: int) -> None:
        run.wait[x] -= 1
        if run.wait[x] == 0:
            self._launch(run, x, t)

    def _launch(self, run: _CallRun, x: int, t: int) -> None:
        if self._canonical:
            if not self._instant:
                self.engine.at_instant_end(t, self._end_of_instant)
            self._instant.append((run, x))
            return
        self._launch_now(run, x, t)

    def _end_of_instant(self, t: int) -> None:
        """(canonical) The instant's launches, in the compiled engine's canonical order
        (:func:`tokenpcap.schedule.engine.canon.canon_less`): the collective's key, the
        sender's rank without its data-parallel index, its index in the sender's send list,
        then the data-parallel index."""
        lay = self.layout
        stride, D = lay.tp * lay.cp, lay.dp

        def key(item):
            run, x = item
            src = run.tr.rows[x][2]
            d = src // stride % D
            return (self._call_key[run.call.call_id], src - d * stride,
                    run.tr.by_src[src].index(x), d)

        items, self._instant = sorted(self._instant, key=key), []
        for run, x in items:
            self._launch_now(run, x, t)
        if self._out:
            self._flush()

    def _launch_now(self, run: _CallRun, x: int, t: int) -> None:
        _, step, src, dst, _, channel, _, nbytes, offset, nic = run.tr.rows[x]
        c = run.call
        if nic:
            tok = token_range(c, offset, nbytes, run.size, self._seq_length, run.line)
            src_nic, dst_nic = run.tr.nics[x]           # the channel's NICs (rails)
            self._out.append((run, x, t, src_nic, dst_nic,
                              run.qp_base + channel, nbytes, step, src, dst, tok))
            return
        start = max(t, self._nvl_free[src])
        end = start + -(-(nbytes * 8 * self._nvl_den) // self._nvl_num)
        self._nvl_free[src] = end
        arrive = end + NVLINK_LATENCY_NS
        if self._keep_nvlink:
            self._nvlink.append((src, dst, nbytes, start, arrive, run.codes[0], run.codes[1],
                                 run.codes[2], c.call_id, step))
        self.engine.at(arrive, lambda t2, run=run, x=x: self._event(self._arrived, run, x, t2))

    def _flush(self) -> None:
        out, self._out = self._out, []
        rows = np.zeros(len(out), MESSAGE_DTYPE)
        cols = list(zip(*[o[2:] for o in out]))
        start, src_nic, dst_nic, qp, size, step, rsrc, rdst, tok = cols
        rows["start_ns"], rows["src_nic"], rows["dst_nic"], rows["qp"] = start, src_nic, dst_nic, qp
        rows["size_bytes"], rows["step"], rows["rank_src"], rows["rank_dst"] = size, step, rsrc, rdst
        rows["verb"], rows["kind"] = VERB_WRITE, KIND_DATA
        tk = np.array(tok, dtype=np.int64).reshape(-1, 2)
        rows["token_start"], rows["token_end"] = tk[:, 0], tk[:, 1]
        calls = [o[0].call for o in out]
        codes = np.array([o[0].codes for o in out], np.int64).reshape(-1, 3)
        rows["phase"], rows["dim"], rows["collective"] = codes[:, 0], codes[:, 1], codes[:, 2]
        rows["iteration"] = [c.iteration for c in calls]
        rows["layer"] = [c.layer for c in calls]
        rows["microbatch"] = [c.microbatch for c in calls]
        rows["call_id"] = [c.call_id for c in calls]
        ids = self.engine.add_messages(rows, self._on_arrival, qps_first=self._canonical)
        for mid, o in zip(ids.tolist(), out):
            self._msg_transfer[mid] = (o[0], o[1])

    def _on_arrival(self, mid: int, t: int) -> None:
        run, x = self._msg_transfer.pop(mid)
        self._event(self._arrived, run, x, t)

    def _arrived(self, run: _CallRun, x: int, t: int) -> None:
        tr = run.tr
        for y in tr.dependents[x]:
            self._release(run, y, t)
        row = tr.rows[x]
        for r in (row[2], row[3]):
            run.pending[r] -= 1
            if run.pending[r] == 0 and r in run.started:
                self._finish_rank(run, r, t)

    def _finish_rank(self, run: _CallRun, rank: int, t: int) -> None:
        w = run.waiters.pop(rank, None)
        if all(v == 0 for v in run.pending.values()):
            self._runs.pop(run.call.call_id, None)
        if w is None:
            return
        if isinstance(w, tuple):
            self._stream_next(w[1], t)
        else:
            self._step(w, t)
