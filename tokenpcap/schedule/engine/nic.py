"""The NIC timing engine: RDMA messages in, time-ordered transmitted frames out (stages 5 and 6).

A discrete-event simulation of the NICs of a cluster. Each NIC sends one frame at a time at its
link rate; a frame occupies the link for its layer-1 time (:func:`layer1_time_ns`). A connection
(sender NIC, receiver NIC, connection index) owns one RC QP pair, as an NCCL net_ib send/receive
communicator pair does (docs/lower.md): data messages are posted on the sender's QP, and in the
NCCL-like clear-to-send mode every data message first waits for a small RDMA WRITE posted on the
receiver's QP of the same pair. Messages become eligible at their ``start_ns``, and a NIC serves
its eligible QPs round-robin, one packet per turn, ACKs first (:mod:`tokenpcap.schedule.engine.port` holds the
arbiter and its numpy epochs). Receivers answer packets that carry AckReq with an ACK after
:data:`ACK_DELAY_NS`. The arrival of a message (last bit at the
receiver = end of its last packet + ``network.latency_ns``) calls its ``on_arrival`` callback, which
may add messages or timers: that is how the schedule chains ring steps, pipeline sends and compute.

Time is integer nanoseconds (int64) throughout. Events are processed in time order; before an
event changes a NIC, the NIC's packets up to that time are committed, so an addition at or after
the current event time is always legal. Output memory is bounded: :meth:`Engine.run` yields chunks.

Layer-1 timing (C12, and the InfiniBand choice) is in :mod:`tokenpcap.wire.layer1`, re-exported here.
"""
from __future__ import annotations

import heapq
from typing import Callable, Iterator

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.wire.layer1 import (
    ETH_L1_OVERHEAD_BYTES,
    IB_L1_OVERHEAD_BYTES,
    layer1_overhead_bytes,
    layer1_time_ns,
    layer1_time_ps,
)
from tokenpcap.records import KIND_CTS, KIND_DATA, MESSAGE_DTYPE, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.records import CTS_BYTES, PKT_ACK, PKT_CTS, PKT_DATA, PKT_PFC
from tokenpcap.schedule.engine.port import TX_DTYPE, Port
from tokenpcap.schedule.engine.table import MSG_STATE_DTYPE, MessageTable, MessageWindow
from tokenpcap.config.profiles import ClusterProfile, GenerationConfig
from tokenpcap.wire import rdma

__all__ = [
    "Engine", "TX_DTYPE", "MSG_STATE_DTYPE", "MessageWindow", "PKT_DATA", "PKT_CTS", "PKT_ACK", "PKT_PFC",
    "ACK_DELAY_NS",
    "CTS_BYTES", "ETH_L1_OVERHEAD_BYTES", "IB_L1_OVERHEAD_BYTES", "layer1_overhead_bytes",
    "layer1_time_ps", "layer1_time_ns",
]

#: Time from an AckReq'd packet's arrival (last bit) to its ACK being ready to send at the
#: responder (ns). A modelling choice of the order of RoCE NIC responder turnaround (a few
#: hundred ns); every ACK is delayed by exactly this much.
ACK_DELAY_NS = 200

_READY, _ACK, _ARRIVE, _TIMER, _WAKE = range(5)
#: Provenance fields of MESSAGE_DTYPE (in its order) and their values when not given.
_PROVENANCE = {"phase": 0, "dim": 0, "collective": 0, "iteration": 0, "layer": -1, "microbatch": -1,
               "step": -1, "call_id": -1, "rank_src": -1, "rank_dst": -1, "token_start": -1, "token_end": -1}
_NEVER = 1 << 62
_VERBS = (VERB_WRITE, VERB_WRITE_IMM, VERB_SEND)


class Engine:
    """Discrete-event engine over the NICs of ``cluster`` (global index node*nics_per_node + i).

    Args:
        cluster: link rate, transport, PMTU, ``network`` (latency, IP version, VLAN).
        generation: ``ack_every_packets`` (0: one ACK per message) and ``clear_to_send``.
        ack_delay_ns: responder delay before an ACK is ready (default :data:`ACK_DELAY_NS`).
        cts_bytes: payload of a clear-to-send WRITE (default :data:`CTS_BYTES`).
        chunk_rows: most rows in one chunk :meth:`run` yields (and the memory bound per step).
        ib_grh: native InfiniBand packets carry a GRH (frame lengths; as ``WireContext.ib_grh``).
        keep_messages: keep every message's row (default); False drops the rows of messages that
            are over (:mod:`tokenpcap.schedule.engine.table`), so that a long run's memory stays flat, and
            :attr:`messages` is then a :class:`~tokenpcap.schedule.engine.table.MessageWindow`.

    Raises:
        InputError: impossible settings (rate <= 0, negative latency, chunk_rows < 1 ...).
    """

    def __init__(self, cluster: ClusterProfile, generation: GenerationConfig | None = None, *,
                 ack_delay_ns: int = ACK_DELAY_NS, cts_bytes: int = CTS_BYTES,
                 chunk_rows: int = 1 << 18, ib_grh: bool = False, keep_messages: bool = True):
        gen = generation if generation is not None else GenerationConfig()
        self.cluster = cluster
        self.n_nics = int(cluster.nodes) * int(cluster.nics_per_node)
        net = cluster.network
        self.latency_ns = int(net.latency_ns)
        self.ack_delay_ns = int(ack_delay_ns)
        self.cts_bytes = int(cts_bytes)
        self.chunk_rows = int(chunk_rows)
        self.clear_to_send = bool(gen.clear_to_send)
        self.ack_every = int(gen.ack_every_packets)
        for key, val, low in (("network.latency_ns", self.latency_ns, 0), ("ack_delay_ns", self.ack_delay_ns, 0),
                              ("cts_bytes", self.cts_bytes, 0), ("chunk_rows", self.chunk_rows, 1),
                              ("generation.ack_every_packets", self.ack_every, 0), ("nics", self.n_nics, 1)):
            if val < low:
                raise InputError(f"{key}: got {val}, expected an integer >= {low}")
        self._transport = cluster.transport
        self._link = float(cluster.link_gbps)
        self._pmtu = int(cluster.pmtu_bytes)
        self._wire = dict(transport=cluster.transport, ip_version=int(net.ip_version),
                          vlan=net.vlan_id is not None, grh=bool(ib_grh))
        self._seq_ops = {v: (rdma.OPCODE_SEQUENCE[v, :rdma.ONLY].tolist(),
                             int(rdma.OPCODE_SEQUENCE[v, rdma.ONLY])) for v in _VERBS}
        ack_fb = int(rdma.frame_bytes(rdma.ACKNOWLEDGE, 0, **self._wire))
        ack_ns = int(self.l1_ns(ack_fb))
        gap = max(64, self.chunk_rows // 2)
        self._gap_slots = gap
        self._ports = [Port(i, self.ack_every, ack_ns, ack_fb, gap) for i in range(self.n_nics)]
        self._frames_cache: dict[tuple[int, int], tuple] = {}
        self._table = MessageTable(keep_messages)
        self._info: dict[int, tuple] = {}          # msg -> (src, dst, qp, size, verb, kind) until posted
        self._callbacks: dict[int, Callable[[int, int], None]] = {}
        self._heap: list[tuple] = []
        self._seq = 0
        self._now: int | None = None
        self._buffered = 0

    # -- timing helpers ---------------------------------------------------------------------

    def l1_ns(self, frame_bytes) -> np.ndarray:
        """Layer-1 time (ns, ceiling) of frames on this cluster's links."""
        return layer1_time_ns(frame_bytes, self._link, self._transport)

    def frames(self, size_bytes: int, verb: int) -> tuple[int, tuple, tuple]:
        """``(packets, (ns FIRST, MIDDLE, LAST), (bytes FIRST, MIDDLE, LAST))`` of one message.

        Segmentation and frame lengths come from :mod:`tokenpcap.wire.rdma` (C5); a one-packet
        message has its ONLY packet in all three places.
        """
        key = (size_bytes, verb)
        hit = self._frames_cache.get(key)
        if hit is None:
            n = int(rdma.packets_per_message(size_bytes, self._pmtu))
            (first, middle, last), only = self._seq_ops[verb]
            if n == 1:
                ops, pay = [only] * 3, [size_bytes] * 3
            else:
                ops, pay = [first, middle, last], [self._pmtu, self._pmtu, size_bytes - (n - 1) * self._pmtu]
            fb = rdma.frame_bytes(np.array(ops, np.uint8), np.array(pay, np.int64), **self._wire)
            hit = (n, tuple(int(x) for x in self.l1_ns(fb)), tuple(int(x) for x in fb))
            if len(self._frames_cache) >= 1 << 16:          # bounded: sizes usually repeat
                self._frames_cache.clear()
            self._frames_cache[key] = hit
        return hit

    # -- building the workload ----------------------------------------------------------------

    @property
    def now_ns(self) -> int | None:
        """Time of the event being processed (or where the last :meth:`run` stopped); None before."""
        return self._now

    @property
    def messages(self) -> np.ndarray | MessageWindow:
        """The message table, ``MSG_STATE_DTYPE (n,)`` indexed by msg id (a view: copy to keep).

        With ``keep_messages=False`` a :class:`~tokenpcap.schedule.engine.table.MessageWindow`: indexed by msg
        id (int or int array) for the messages still held, which include every message named in
        the chunk :meth:`run` yielded last."""
        return self._table.view()

    def add_message(self, src_nic: int, dst_nic: int, qp: int, size_bytes: int, start_ns: int, *,
                    verb: int = VERB_WRITE, kind: int = KIND_DATA, imm: int = 0,
                    on_arrival: Callable[[int, int], None] | None = None, **provenance) -> int:
        """Add one RDMA message; returns its msg id (dense, in order of creation).

        ``provenance`` sets other MESSAGE_DTYPE fields (phase, dim, collective, iteration, layer,
        microbatch, step, call_id, rank_src, rank_dst, token_start, token_end); unset ones are 0
        (phase, dim, collective, iteration) or -1. ``on_arrival(msg_id, arrival_ns)`` is called
        when the last bit of the message reaches ``dst_nic``. See :meth:`add_messages`.

        Raises:
            InputError: see :meth:`add_messages`; also an unknown provenance field.
        """
        prov = dict(_PROVENANCE)
        for name, value in provenance.items():
            if name not in prov:
                raise InputError(f"add_message: got field {name!r}, expected a MESSAGE_DTYPE field "
                                 f"({', '.join(prov)})")
            prov[name] = int(value)
        src, dst, qp, size, start, verb, kind = (
            int(x) for x in (src_nic, dst_nic, qp, size_bytes, start_ns, verb, kind))
        now = 0 if self._now is None else self._now
        for key, got, bad, expected in (
            ("src_nic", src, not 0 <= src < self.n_nics, f"0 .. {self.n_nics - 1}"),
            ("dst_nic", dst, not 0 <= dst < self.n_nics, f"0 .. {self.n_nics - 1}"),
            ("dst_nic", dst, dst == src, "a NIC other than src_nic"),
            ("qp", qp, qp < 0, ">= 0"), ("size_bytes", size, size < 0, ">= 0"),
            ("verb", verb, verb not in _VERBS, "VERB_WRITE, VERB_WRITE_IMM or VERB_SEND"),
            ("kind", kind, kind not in (KIND_DATA, KIND_CTS), "KIND_DATA or KIND_CTS"),
            ("start_ns", start, start < now, f">= {now} (the engine's current time)"),
        ):
            if bad:
                raise InputError(f"add_message: {key}: got {got}, expected {expected}")
        cts = self.clear_to_send and kind == KIND_DATA
        verb = VERB_WRITE_IMM if cts else verb
        mid = len(self._table)
        cid = mid + 1 if cts else -1
        head = tuple(prov.values())
        tail_ranks = (prov["rank_src"], prov["rank_dst"])
        try:
            row = ((mid, start, src, dst, qp, size, verb, kind, int(imm)) + head
                   + (self.frames(size, verb)[0], -1, -1, -1, cid, -1, -1, -1, -1))
            if cts:
                cprov = head[:8] + tail_ranks[::-1] + head[10:]
                crow = ((cid, start, dst, src, qp, self.cts_bytes, VERB_WRITE, KIND_CTS, 0) + cprov
                        + (self.frames(self.cts_bytes, VERB_WRITE)[0], -1, -1, -1, mid, -1, -1, -1, -1))
            new = np.array([row, crow] if cts else [row], MSG_STATE_DTYPE)
        except (OverflowError, ValueError) as err:
            raise InputError(f"add_message: a field does not fit MESSAGE_DTYPE: {err}") from None
        self._table.append(new.size)[:] = new
        self._info[mid] = (src, dst, qp, size, verb, kind)
        self._ports[src].qp(dst, qp, int(kind == KIND_CTS))
        if on_arrival is not None:
            self._callbacks[mid] = on_arrival
        if cts:
            self._info[cid] = (dst, src, qp, self.cts_bytes, VERB_WRITE, KIND_CTS)
            self._ports[dst].qp(src, qp, 1)
            self._push(start, _READY, cid, 0, cid)
        else:
            self._push(start, _READY, mid, 0, mid)
        return mid

    def add_messages(self, rows: np.ndarray, on_arrival: Callable[[int, int], None] | None = None,
                     qps_first: bool = False) -> np.ndarray:
        """Add messages (``MESSAGE_DTYPE (m,)``; ``msg_id`` is ignored and assigned here).

        Each message is posted on its QP ``(src_nic, dst_nic, qp)`` at ``start_ns`` (FIFO order of
        posting = time order, ties in order of addition). With ``clear_to_send``, every KIND_DATA
        message is sent as VERB_WRITE_IMM and gets a KIND_CTS message of ``cts_bytes`` from
        ``dst_nic`` to ``src_nic`` on the receiver's QP of the data's connection (one RC QP pair
        per connection; the reverse direction's data has its own pair), posted at ``start_ns``;
        the data is posted when that CTS arrives. CTS ids follow the ids of this call's data
        messages. A QP takes its place in its NIC's rotation when a message first names it, in
        row order, each data message's QP before its CTS's; ``qps_first``: every data message's
        QP first, then the CTS's (the compiled engine's canonical order, ``CANON``).

        Returns:
            int64 ``(m,)`` ids of the given messages.

        Raises:
            InputError: a NIC index out of range or src == dst, negative size or qp, unknown
                verb or kind, or ``start_ns`` before the current engine time (``now_ns``).
        """
        rows = np.array(rows, dtype=MESSAGE_DTYPE, ndmin=1, copy=True)
        self._validate(rows)
        m = rows.size
        n0 = len(self._table)
        ids = np.arange(n0, n0 + m, dtype=np.int64)
        rows["msg_id"] = ids
        cts = None
        if self.clear_to_send:
            data = rows["kind"] == KIND_DATA
            rows["verb"][data] = VERB_WRITE_IMM
            cts = rows[data].copy()
            cts["msg_id"] = np.arange(n0 + m, n0 + m + cts.size, dtype=np.int64)
            cts["src_nic"], cts["dst_nic"] = rows["dst_nic"][data], rows["src_nic"][data]
            cts["size_bytes"], cts["verb"], cts["kind"], cts["imm"] = self.cts_bytes, VERB_WRITE, KIND_CTS, 0
            cts["rank_src"], cts["rank_dst"] = rows["rank_dst"][data], rows["rank_src"][data]
        new = rows if cts is None or cts.size == 0 else np.concatenate([rows, cts])
        block = self._append(new)
        peer = np.full(m, -1, np.int64)
        if cts is not None and cts.size:
            peer[np.flatnonzero(rows["kind"] == KIND_DATA)] = cts["msg_id"]
            block["peer_msg"][m:] = ids[rows["kind"] == KIND_DATA]
            block["peer_msg"][:m] = peer
        cols = [new[f].tolist() for f in ("msg_id", "src_nic", "dst_nic", "qp", "size_bytes", "verb", "kind")]
        for mid, src, dst, qp, size, verb, kind in zip(*cols):
            self._info[mid] = (src, dst, qp, size, verb, kind)
        if qps_first:
            for mid in ids.tolist():
                src, dst, qp, _, _, kind = self._info[mid]
                self._ports[src].qp(dst, qp, int(kind == KIND_CTS))
        for i, (mid, start, pm) in enumerate(zip(ids.tolist(), rows["start_ns"].tolist(), peer.tolist())):
            src, dst, qp, _, _, kind = self._info[mid]
            self._ports[src].qp(dst, qp, int(kind == KIND_CTS))   # sets the QP's place in the rotation
            if on_arrival is not None:
                self._callbacks[mid] = on_arrival
            if pm >= 0:
                self._ports[dst].qp(src, qp, 1)
                self._push(start, _READY, pm, 0, pm)
            else:
                self._push(start, _READY, mid, 0, mid)
        return ids

    def at(self, t_ns: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(t_ns)`` at ``t_ns`` (compute, NVLink ...); it may add messages or timers.

        Raises:
            InputError: ``t_ns`` before the current engine time.
        """
        t = int(t_ns)
        if self._now is not None and t < self._now:
            raise InputError(f"at: t_ns: got {t}, expected >= {self._now} (the engine's current time)")
        self._push(t, _TIMER, 0, 0, callback)

    def at_instant_end(self, t_ns: int, callback: Callable[[int], None]) -> None:
        """Call ``callback(t_ns)`` after every other event of ``t_ns`` but its wakes (a timer
        keyed after the others of its instant); it may add messages (posted at ``t_ns``,
        before the wakes) or timers of later instants."""
        self._push(int(t_ns), _TIMER, 1, 0, callback)

    def _validate(self, rows: np.ndarray) -> None:
        checks = (
            ("src_nic", (rows["src_nic"] < 0) | (rows["src_nic"] >= self.n_nics), f"0 .. {self.n_nics - 1}"),
            ("dst_nic", (rows["dst_nic"] < 0) | (rows["dst_nic"] >= self.n_nics), f"0 .. {self.n_nics - 1}"),
            ("dst_nic", rows["dst_nic"] == rows["src_nic"], "a NIC other than src_nic"),
            ("qp", rows["qp"] < 0, ">= 0"),
            ("size_bytes", rows["size_bytes"] < 0, ">= 0"),
            ("verb", rows["verb"] > max(_VERBS), "VERB_WRITE, VERB_WRITE_IMM or VERB_SEND"),
            ("kind", rows["kind"] > max(KIND_DATA, KIND_CTS), "KIND_DATA or KIND_CTS"),
            ("start_ns", rows["start_ns"] < (0 if self._now is None else self._now),
             f">= {0 if self._now is None else self._now} (the engine's current time)"),
        )
        for key, bad, expected in checks:
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(f"message {i}: {key}: got {rows[key][i]}, expected {expected}")

    def _append(self, rows: np.ndarray) -> np.ndarray:
        block = self._table.append(rows.size)
        for name in MESSAGE_DTYPE.names:
            block[name] = rows[name]
        for name in ("psn_offset", "qp_seq", "byte_offset", "ready_ns", "first_tx_ns", "last_tx_end_ns",
                     "arrival_ns", "peer_msg"):
            block[name] = -1
        block["n_packets"] = rdma.packets_per_message(rows["size_bytes"], self._pmtu)
        return block

    def _push(self, t: int, typ: int, k1: int, k2: int, *args) -> None:
        """Queue an event. Equal times run in the order (type, k1, k2, insertion): READY by msg id,
        ACK by (msg, packet), ARRIVE by msg id, timers by insertion, WAKEs last; a canonical
        order that does not depend on the history of the heap."""
        if self._now is not None and t < self._now:
            raise RuntimeError(f"internal: event at {t} ns before the current time {self._now} ns")
        self._seq += 1
        heapq.heappush(self._heap, (t, typ, k1, k2, self._seq, args))

    # -- the event loop -----------------------------------------------------------------------

    def run(self, until_ns: int | None = None) -> Iterator[np.ndarray]:
        """Process events (before ``until_ns``) and yield transmitted frames in time order.

        Yields ``TX_DTYPE`` chunks of at most ``chunk_rows`` rows; across chunks and NICs rows are
        sorted by ``time_ns`` (ties: lower NIC first). With ``until_ns`` the run stops there (frames
        starting before it are yielded) and a later ``run()`` continues.
        """
        stop = _NEVER if until_ns is None else int(until_ns)
        heap = self._heap
        while heap and heap[0][0] < stop:
            t = heap[0][0]
            if self._buffered >= self.chunk_rows:
                yield from self._flush(t)
            _, typ, _, _, _, args = heapq.heappop(heap)
            self._now = t
            self._dispatch(t, typ, args)
        yield from self._flush(stop)
        if until_ns is not None:
            self._now = stop if self._now is None else max(self._now, stop)

    def _dispatch(self, t: int, typ: int, args: tuple) -> None:
        if typ == _WAKE:
            port = self._ports[args[0]]
            if t == port.wake_at:
                port.wake_at = None
                self._advance(port, t + 1)
                self._rewake(port)
        elif typ == _READY:
            self._ready(args[0], t)
        elif typ == _ACK:
            port = self._ports[args[0]]
            self._advance(port, t)
            port.queue_ack(t, args[1], args[2], args[3])
            # an ACK only delays this port's data: its queued wake (if any) comes early, which is
            # harmless, so no new one is needed
        elif typ == _ARRIVE:
            mid = args[0]
            tab, i = self._table, args[0] - self._table.lo
            tab.column("arrival_ns")[i] = t
            if tab.column("kind")[i] == KIND_CTS and tab.column("peer_msg")[i] >= 0:
                self._ready(int(tab.column("peer_msg")[i]), t)
            cb = self._callbacks.pop(mid, None)
            if cb is not None:
                cb(mid, t)
        else:
            args[0](t)

    def _ready(self, mid: int, t: int) -> None:
        src, dst, qpi, size, verb, kind = self._info.pop(mid)
        port = self._ports[src]
        self._advance(port, t)
        q = port.qp(dst, qpi, int(kind == KIND_CTS))
        n, d, fb = self.frames(size, verb)
        tab, i = self._table, mid - self._table.lo
        tab.column("psn_offset")[i], tab.column("qp_seq")[i], tab.column("byte_offset")[i], \
            tab.column("ready_ns")[i] = (q.psn_next, q.count, q.bytes_next, t)
        q.psn_next += n
        q.count += 1
        q.bytes_next += size
        if port.post(q, t, mid, n, d, fb, PKT_CTS if kind == KIND_CTS else PKT_DATA):
            self._rewake(port)

    def _advance(self, port: Port, limit: int, max_rows: int | None = None) -> None:
        if port.clock is None or port.clock >= limit:
            return
        before = port.out_rows
        cons: list = []
        port.advance(limit, cons, max_rows)
        self._buffered += port.out_rows - before
        lo = self._table.lo
        for c in cons:
            if c[0] == "first":
                self._table.column("first_tx_ns")[c[1] - lo] = c[2]
            elif c[0] == "ack":
                self._push(c[4] + self.latency_ns + self.ack_delay_ns, _ACK, c[2], c[3], c[1], c[2], c[3], port.nic)
            else:
                self._table.column("last_tx_end_ns")[c[1] - lo] = c[2]
                self._push(c[2] + self.latency_ns, _ARRIVE, c[1], 0, c[1])

    def _retire(self, chunk: np.ndarray) -> None:
        """The consumer is done with ``chunk``: messages whose last ACK it held are over (the ACK
        of the last packet is the last frame naming a message; keep_messages=False drops them)."""
        if self._table.keep:
            return
        acks = chunk[chunk["kind"] == PKT_ACK]
        if acks.size:
            last = acks["index"] == self._table.rows(acks["msg"])["n_packets"] - 1
            self._table.retire(acks["msg"][last])

    def _rewake(self, port: Port) -> None:
        """Make sure a wake is queued at or before the port's next packet with consequences.

        A wake that comes early is harmless (it commits up to its time and predicts again), so a
        new one is queued only when the prediction is earlier than the one already queued."""
        w = port.next_wake(self._gap_slots)
        if w is not None and (port.wake_at is None or w < port.wake_at):
            port.wake_at = w
            self._push(w, _WAKE, port.nic, 0, port.nic)

    def _flush(self, horizon: int) -> Iterator[np.ndarray]:
        while True:
            frontier = horizon
            busy = [p for p in self._ports if p.clock is not None]
            budget = max(1024, self.chunk_rows // max(1, len(busy)))
            for port in busy:
                self._advance(port, horizon, budget)
                if port.busy() and port.clock < horizon:
                    frontier = min(frontier, port.clock)
            parts = [x for x in (p.take(frontier) for p in busy) if x is not None]
            self._buffered = sum(p.out_rows for p in busy)
            if parts:
                rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
                rows = rows[np.argsort(rows["time_ns"], kind="stable")]
                for i in range(0, rows.size, self.chunk_rows):
                    chunk = rows[i: i + self.chunk_rows]
                    yield chunk
                    self._retire(chunk)
            if frontier >= horizon or not any(p.busy() for p in busy):
                return
