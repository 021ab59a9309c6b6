"""What a schedule's run holds, as rows with their provenance (stage 5, :class:`ScheduleResults`).

The compiled engine (:mod:`tokenpcap.schedule.engine.kernel`) keeps its messages, NVLink copies
and compute blocks as integer columns of its state and its transfers in their calls' templates
(:mod:`tokenpcap.schedule.engine.access`); :class:`ScheduleResults` reads them back as
``MSG_STATE_DTYPE``, :data:`NVLINK_DTYPE` and :data:`TIMELINE_DTYPE` rows, and a run's data
messages as columns before it runs (:meth:`ScheduleResults.nic_transfers`).

Provenance: every message carries phase, dim, collective, iteration, layer, microbatch, step (the
algorithm step), call_id, rank_src, rank_dst; a message of a call that carries per-token data
(activations, TP buffers, cross-entropy values) has ``token_start``/``token_end``: the corpus token
of its first byte and one past the token of its last byte in Megatron's ``[s, b, h]`` layout
(:func:`tokenpcap.records.tokenspans.piece_bounds`; with micro-batch 1 the half-open range of the
tokens it holds, with ``b > 1`` :func:`~tokenpcap.records.tokenspans.held_spans` gives the range it
holds of each sample).

:class:`ScheduleResults` is a part of :class:`tokenpcap.schedule.runner.Schedule`, which sets
what it reads: ``_eng`` (the engine's state, :func:`tokenpcap.schedule.engine.state.build_state`),
``_call_attr`` (int64 ``(C, 9)`` per call of the run, :func:`call_columns`), ``_call_line``
(uint8 ``(C,)`` NCCL protocol code per call), ``_seq_length``, ``engine``
(:class:`~tokenpcap.schedule.engine.frames.NicModel`), ``keep_messages``, ``plan`` and
``iterations``; and ``replica_view`` when the run is timed through its quotient
(:mod:`tokenpcap.schedule.replicaview`: the rows are then the whole job's).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.calltable import CallTable
from tokenpcap.records import KIND_CTS, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine.access import HANDLE_SHIFT
from tokenpcap.schedule.engine.table import MSG_STATE_DTYPE
from tokenpcap.schedule.flat import MARK_CODES
from tokenpcap.schedule.replicaview import RECEIVER_VIEW
from tokenpcap.schedule.spans import token_ranges

__all__ = ["ScheduleResults", "MessageIndex", "TIMELINE_DTYPE", "NVLINK_DTYPE", "call_columns"]

#: One row per compute block of a rank: forward ``F``, backward ``B``, recomputed forward ``R``,
#: optimizer ``O`` (``what`` as a one-byte string), including the blocking collectives inside it.
TIMELINE_DTYPE = np.dtype([("rank", "<i4"), ("iteration", "<i2"), ("what", "S1"),
                           ("microbatch", "<i2"), ("start_ns", "<i8"), ("end_ns", "<i8")])
#: One row per NVLink copy (off the wire): provenance as MESSAGE_DTYPE plus times.
NVLINK_DTYPE = np.dtype([("rank_src", "<i4"), ("rank_dst", "<i4"), ("size_bytes", "<i8"),
                         ("start_ns", "<i8"), ("arrival_ns", "<i8"), ("phase", "u1"), ("dim", "u1"),
                         ("collective", "u1"), ("call_id", "<i8"), ("step", "<i4")])


class MessageIndex:
    """``index[ids]``: ``MSG_STATE_DTYPE`` rows of a schedule's message ids (int array)."""

    dtype = MSG_STATE_DTYPE

    def __init__(self, schedule: "ScheduleResults"):
        self._schedule = schedule

    def __len__(self) -> int:
        return self._schedule.n_messages

    def __getitem__(self, ids) -> np.ndarray:
        return self._schedule.message_rows(ids)


class ScheduleResults:
    """The message table, NVLink copies, compute timeline and transfers of a run, read from the
    engine's state (module docstring); a part of :class:`tokenpcap.schedule.runner.Schedule`."""

    #: The whole job's view of a run timed through its quotient
    #: (:class:`~tokenpcap.schedule.replicaview.ReplicaView`); None: every rank timed.
    replica_view = None

    def message_rows(self, ids) -> np.ndarray:
        """``MSG_STATE_DTYPE`` rows of the message ids ``ids`` (int array; ids are dense, in order
        of creation: each event's data messages, then their clear-to-send writes). Times not yet
        reached are -1. With ``keep_messages=False`` only the messages the engine still holds:
        those named by the frames :meth:`run` just yielded (until it resumes), those in progress.
        A run timed through its quotient (``replica_view``) answers ids plus
        :data:`~tokenpcap.schedule.replicaview.RECEIVER_VIEW` too: the receiving side's view of
        a message (:mod:`tokenpcap.schedule.replicaview`).

        Raises:
            ValueError: (``keep_messages=False``) an id whose row was reused or not yet made.
        """
        ids = np.asarray(ids, np.int64)
        view = self.replica_view
        if view is None:
            return self._engine_rows(ids)
        rv = ids >= RECEIVER_VIEW
        out = view.message_rows(self._engine_rows(np.where(rv, ids - RECEIVER_VIEW, ids)), rv)
        out["msg_id"] = ids
        return out

    def _real_peers(self, got: np.ndarray) -> None:
        """The frame rows ``got`` (int64 ``(n, 7)``, the engine's) of a run timed through its
        quotient with their real peers and views, in place
        (:meth:`~tokenpcap.schedule.replicaview.ReplicaView.frames`)."""
        eng = self._eng
        at = got[:, 3] & int(eng.sc[K.MMASK])
        ms = eng.S.ms                       # the two columns read, not every frame's whole row
        recv = eng.tr.columns(ms[at, K.M_TR], ("dst",))["dst"]
        self.replica_view.frames(got, recv, ms[at, K.M_KIND])

    def _engine_rows(self, ids: np.ndarray) -> np.ndarray:
        """:meth:`message_rows` as the engine holds them (a quotient's NICs)."""
        eng = self._eng
        mask = int(eng.sc[K.MMASK])
        ms = eng.S.ms[ids & mask]
        if mask >= 0 and (ms[..., K.M_ID] != ids).any():
            bad = ids[ms[..., K.M_ID] != ids].reshape(-1)[0]
            raise ValueError(f"message id {int(bad)}: not held by the engine any more (keep_messages"
                             "=False keeps the messages in progress and those of the chunk just "
                             "handed out)")
        x = ms[..., K.M_TR]
        cts = ms[..., K.M_KIND] == KIND_CTS
        tr = eng.tr.columns(x, ("call", "src", "dst", "step", "conn", "bytes", "offset"))
        c = tr["call"]
        ca = self._call_attr[c]
        codes = eng.codes[c]
        tok0, tok1 = self._tokens(c, tr["offset"], tr["bytes"])
        out = np.zeros(ids.shape, MSG_STATE_DTYPE)
        out["msg_id"] = ids
        out["start_ns"] = ms[..., K.M_START]
        out["src_nic"], out["dst_nic"] = ms[..., K.M_SRC], ms[..., K.M_DST]
        out["qp"] = tr["conn"]
        out["size_bytes"] = ms[..., K.M_SIZE]
        data_verb = VERB_WRITE_IMM if self.engine.clear_to_send else VERB_WRITE
        out["verb"] = np.where(cts, VERB_WRITE, data_verb)
        out["kind"] = ms[..., K.M_KIND]
        out["phase"], out["dim"], out["collective"] = codes[..., 0], codes[..., 1], codes[..., 2]
        out["iteration"], out["layer"], out["microbatch"] = ca[..., 0], ca[..., 1], ca[..., 2]
        out["step"] = tr["step"]
        out["call_id"] = ca[..., 3]
        rs, rd = tr["src"], tr["dst"]
        out["rank_src"], out["rank_dst"] = np.where(cts, rd, rs), np.where(cts, rs, rd)
        out["token_start"], out["token_end"] = tok0, tok1
        out["n_packets"] = eng.S.sh_n[ms[..., K.M_SHAPE]]
        out["psn_offset"], out["qp_seq"] = ms[..., K.M_PSN], ms[..., K.M_QSEQ]
        out["byte_offset"], out["peer_msg"] = ms[..., K.M_BOFF], ms[..., K.M_PEER]
        out["ready_ns"], out["first_tx_ns"] = ms[..., K.M_READY], ms[..., K.M_FIRST]
        out["last_tx_end_ns"], out["arrival_ns"] = ms[..., K.M_LAST], ms[..., K.M_ARR]
        return out

    @property
    def message_index(self) -> "MessageIndex":
        """The message table indexed by id arrays without building all of it
        (``index[ids]`` is :meth:`message_rows`), what the lowering reads per chunk."""
        return MessageIndex(self)

    def _tokens(self, c: np.ndarray, offset: np.ndarray, nbytes: np.ndarray):
        """Token ranges of transfers of calls ``c`` (run-global) at ``offset`` of ``nbytes``."""
        t0, t1 = token_ranges(self._call_attr[c.reshape(-1), 4:9], offset.reshape(-1),
                              nbytes.reshape(-1), self._seq_length, self._call_line[c.reshape(-1)])
        return t0.reshape(c.shape), t1.reshape(c.shape)

    def calls_meeting(self, nics=None, ranks=None) -> np.ndarray:
        """bool ``(C,)`` per call of the run: True when one of its RDMA messages is sent or
        received by one of ``nics`` (global NIC indices; None: any) and one of them (the same
        or another) is sent or received by one of ``ranks`` (None: any). Read per canonical
        call shape and shift (:mod:`tokenpcap.schedule.engine.access`), not per transfer: a
        call's NICs are its shape's moved up by its node shift, its ranks likewise."""
        eng = self._eng
        S = eng.S
        ok = np.ones(self.n_calls, bool)
        for want, names, shift in ((nics, ("snic", "dnic"), S.c_nshift),
                                   (ranks, ("src", "dst"), S.c_shift)):
            if want is not None:
                ok &= self._calls_with(np.asarray(sorted(int(v) for v in want), np.int64),
                                       names, shift)
        return ok

    def _calls_with(self, want: np.ndarray, names, shift: np.ndarray) -> np.ndarray:
        """bool ``(C,)``: the call has an RDMA message whose canonical column ``names[0]`` or
        ``names[1]`` (:meth:`TransferView.canonical`) plus its ``shift`` is in ``want`` (sorted
        int64)."""
        eng = self._eng
        C = self.n_calls
        first = eng.S.c_row                                   # each call's first canonical row
        ntr = np.diff(eng.tr.tr_base)
        used = ntr > 0
        starts, shape = np.unique(first[used], return_inverse=True)
        rows = np.flatnonzero(eng.tr.canonical(("nic",))["nic"] == 1)
        owner = np.searchsorted(starts, rows, side="right") - 1
        vals = eng.tr.canonical(names, rows)
        # each shape's distinct values, as CSR over shapes
        span = int(max((int(v.max(initial=0)) for v in vals.values()), default=0)) + 1
        key = np.unique(np.concatenate([owner * span + vals[n] for n in names]))
        ptr = np.searchsorted(key // span, np.arange(starts.size + 1))
        # each distinct (shape, shift) of the calls: any of its values moved by the shift wanted?
        sh = shift[used].astype(np.int64)
        top = int(sh.max(initial=0)) + 1
        pair, inv = np.unique(shape.reshape(-1) * top + sh, return_inverse=True)
        p_shape, p_shift = pair // top, pair % top
        k = ptr[p_shape + 1] - ptr[p_shape]
        at = np.repeat(ptr[p_shape] - np.cumsum(k) + k, k) + np.arange(int(k.sum()))
        moved = key[at] % span + np.repeat(p_shift, k)
        hit = np.zeros(moved.size, bool)
        if want.size:
            i = np.minimum(np.searchsorted(want, moved), want.size - 1)
            hit = want[i] == moved
        p_ok = np.bincount(np.repeat(np.arange(pair.size), k), weights=hit,
                           minlength=pair.size) > 0
        out = np.zeros(C, bool)
        out[used] = p_ok[inv.reshape(-1)]
        return out

    def nic_transfer_chunks(self, iterations, rows: int = 1 << 20,
                            calls: np.ndarray | None = None) -> Iterator[dict[str, np.ndarray]]:
        """:meth:`nic_transfers` in pieces of whole calls of about ``rows`` transfers each (one
        call's transfers may be more), in the same order: what a caller aggregates without holding
        a row per message of an iteration. ``calls``: bool ``(C,)``, only the calls it marks
        (e.g. :meth:`calls_meeting`); None: every call."""
        eng = self._eng
        ca = self._call_attr
        pick = np.isin(ca[:, 0], np.asarray(list(iterations), np.int64))
        calls = np.flatnonzero(pick if calls is None else pick & calls)
        calls = calls[np.argsort(ca[calls, 3], kind="stable")]
        first = eng.tr.tr_base[calls]
        n = eng.tr.tr_base[calls + 1] - first
        piece = (np.cumsum(n) - 1) // max(1, int(rows))
        for part in np.split(np.arange(calls.size), np.flatnonzero(np.diff(piece)) + 1):
            k = n[part]
            # the handles (module engine.access) of the calls' transfers, in id order
            at = ((np.repeat(calls[part], k) << HANDLE_SHIFT)
                  + np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k))
            x = at[eng.tr.columns(at, ("nic",))["nic"] == 1]
            if not x.size:
                continue
            tr = eng.tr.columns(x, ("call", "src", "dst", "step", "bytes", "offset", "snic", "dnic"))
            if self.replica_view is not None:
                tr = self.replica_view.transfers(tr)
            c = tr["call"]
            codes = eng.codes[c]
            tok0, tok1 = self._tokens(c, tr["offset"], tr["bytes"])
            yield dict(rank_src=tr["src"], rank_dst=tr["dst"], phase=codes[:, 0], dim=codes[:, 1],
                       collective=codes[:, 2], iteration=ca[c, 0], call_id=ca[c, 3],
                       step=tr["step"], layer=ca[c, 1], microbatch=ca[c, 2], token_start=tok0,
                       token_end=tok1, size_bytes=tr["bytes"], src_nic=tr["snic"],
                       dst_nic=tr["dnic"])

    def nic_transfers(self, iterations) -> dict[str, np.ndarray]:
        """The data messages the run posts in ``iterations`` (ints), known before it runs: int64
        ``(n,)`` columns ``rank_src``, ``rank_dst``, ``phase``, ``dim``, ``collective``,
        ``iteration``, ``call_id``, ``step``, ``layer``, ``microbatch``, ``token_start``,
        ``token_end``, ``size_bytes``, ``src_nic``, ``dst_nic`` (the NICs the transfer's channel
        uses, :mod:`tokenpcap.collectives.rails`), in order of call id, then transfer. A row per
        message: :meth:`nic_transfer_chunks` gives them in pieces."""
        parts = list(self.nic_transfer_chunks(iterations))
        names = ("rank_src", "rank_dst", "phase", "dim", "collective", "iteration", "call_id",
                 "step", "layer", "microbatch", "token_start", "token_end", "size_bytes",
                 "src_nic", "dst_nic")
        return {k: np.concatenate([p[k] for p in parts]).astype(np.int64) if parts
                else np.zeros(0, np.int64) for k in names}

    @property
    def n_calls(self) -> int:
        """Collective calls of the run (every iteration's; ids ``0 .. n_calls - 1``)."""
        return int(self._call_attr.shape[0])

    @property
    def n_messages(self) -> int:
        """RDMA messages created so far (data and clear-to-send)."""
        return int(self._eng.sc[K.NMSG])

    @property
    def messages(self) -> np.ndarray:
        """The RDMA message table so far (``MSG_STATE_DTYPE (n,)``, indexed by message id:
        MESSAGE_DTYPE plus the engine's times; clear-to-send messages have ``kind == KIND_CTS``).
        A new array at each access: use :meth:`message_rows` for a few ids.

        Raises:
            RuntimeError: the schedule was made with ``keep_messages=False``.
        """
        if not self.keep_messages:
            raise RuntimeError("Schedule.messages: the schedule was made with keep_messages=False "
                               "(it holds only the messages in progress); expected "
                               "keep_messages=True to read the whole table")
        return self.message_rows(np.arange(self.n_messages, dtype=np.int64))

    @property
    def nvlink(self) -> np.ndarray:
        """NVLink copies so far, :data:`NVLINK_DTYPE` ``(n,)`` (none with ``keep_nvlink=False``)."""
        eng = self._eng
        nv = eng.S.nv[: int(eng.sc[K.NNV])]
        tr = eng.tr.columns(nv[:, 0], ("call", "src", "dst", "bytes", "step"))
        c = tr["call"]
        out = np.zeros(len(nv), NVLINK_DTYPE)
        out["rank_src"], out["rank_dst"] = tr["src"], tr["dst"]
        out["size_bytes"] = tr["bytes"]
        out["start_ns"], out["arrival_ns"] = nv[:, 1], nv[:, 2]
        codes = eng.codes[c]
        out["phase"], out["dim"], out["collective"] = codes[:, 0], codes[:, 1], codes[:, 2]
        out["call_id"] = self._call_attr[c, 3]
        out["step"] = tr["step"]
        if self.replica_view is not None:
            return self.replica_view.every_rank(out, ("rank_src", "rank_dst"), "start_ns")
        return out

    @property
    def timeline(self) -> np.ndarray:
        """Compute blocks of every rank so far, :data:`TIMELINE_DTYPE` ``(n,)`` (none recorded
        with ``keep_history=False``)."""
        eng = self._eng
        tl = eng.S.tl[: int(eng.sc[K.NTL])]
        out = np.zeros(len(tl), TIMELINE_DTYPE)
        out["rank"], out["iteration"] = tl[:, 0], tl[:, 1]
        out["what"] = np.asarray(MARK_CODES, "S1")[tl[:, 2]]
        out["microbatch"], out["start_ns"], out["end_ns"] = tl[:, 3], tl[:, 4], tl[:, 5]
        if self.replica_view is not None:
            return self.replica_view.every_rank(out, ("rank",), "end_ns")
        return out

    @property
    def whole_call_ns(self) -> dict[int, int]:
        """``{call_id: ns}`` of the NVLink-only calls timed as a whole (``nvlink_mode ==
        "collectives"``, module docstring): each one's α–β time, from the moment it starts (every
        rank of it started, its GPUs' NVLink free) to its end. Empty in ``"copies"`` mode."""
        ab = self._eng.S.call_ab
        x = np.flatnonzero(ab >= 0)
        return dict(zip(self._call_attr[x, 3].tolist(), ab[x].tolist()))

    def calls(self) -> Iterator[CollectiveCall]:
        """Every call of the run in call id order, made from the plan a chunk at a time
        (:meth:`tokenpcap.plan.build.Plan.calls` of each iteration)."""
        for it in range(self.iterations):
            yield from self.plan.calls(it)

    def call(self, call_id: int) -> CollectiveCall:
        """The call with this id (sizes at the plan's scale), made from the plan
        (:meth:`tokenpcap.plan.build.Plan.call`).

        Raises:
            KeyError: a call id not in the run.
        """
        if not 0 <= call_id < self.n_calls:
            raise KeyError(call_id)
        return self.plan.call(call_id)


def call_columns(table: CallTable) -> np.ndarray:
    """int64 ``(C, 9)`` columns of ``Schedule._call_attr`` of one iteration's calls."""
    ts, te, s0, s1 = table.tokens()
    return np.stack([np.full(len(table), table.iteration, np.int64), table.layer(),
                     table.microbatch(), table.call_id(), ts, te, s0, s1, table.message_bytes()],
                    axis=1).reshape(-1, 9)
