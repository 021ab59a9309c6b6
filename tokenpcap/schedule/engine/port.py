"""One NIC's transmit arbiter, computed a whole epoch at a time with numpy (used by :mod:`tokenpcap.schedule.engine.nic`).

A :class:`Port` owns the send side of one NIC: the QPs that start there, the round-robin pointer,
the ACKs waiting to go out and the time its link is next free (``clock``). Between two events the
set of eligible QPs is fixed, so the next packets form a regular interleave: slot ``s`` goes to the
QP at rotation position ``s % k`` and is that QP's ``s // k``-th packet from now. An *epoch* is such
a run of slots, cut at the first slot whose packet has consequences for another NIC (the last packet
of a message, or a packet carrying AckReq) or at the time horizon the engine allows, and it is
materialised with ``arange``/``cumsum`` instead of a Python loop per packet.

Arbitration (what RC NIC QP schedulers do; e.g. the per-QP round-robin of the ConnectX send
scheduler as NVIDIA documents it for its "QP rate limit"/ETS arbitration, and IBTA vol.1 9.5 for the
in-order processing of one QP's work requests):

* ACKs have strict priority over data; pending ACKs go out back to back at the next packet boundary.
* Otherwise the next QP after the last one served, in the fixed cyclic order of QP creation on this
  NIC, that has an eligible head message sends one packet (one packet per turn).
* The messages of one QP go out in the order they were posted (FIFO); a QP whose head message is
  done continues with its next posted message, or leaves the rotation until one is posted.
"""
from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque

import numpy as np

from tokenpcap.records import PKT_ACK

__all__ = ["TX_DTYPE", "QP", "Port"]

#: One row per transmitted frame, what :meth:`tokenpcap.schedule.engine.nic.Engine.run` yields. Shape ``(n,)``.
#:
#: ============ ====== ===========================================================================
#: time_ns      int64  first bit of the frame leaves the NIC (ns)
#: nic          int32  sending NIC (global index)
#: peer_nic     int32  receiving NIC
#: msg          int64  message id; for an ACK the id of the message it acknowledges
#: index        int64  packet index inside the message (0 = first); for an ACK the acknowledged one
#: kind         uint8  PKT_DATA, PKT_CTS, PKT_ACK or PKT_PFC (a switch port's 802.1Qbb frame: nic
#:                     = -1 - P for switch port P, msg = pause quanta (0 = XON), index =
#:                     class-enable vector, frame_bytes = 60; tokenpcap.records.PKT_PFC)
#: frame_bytes  uint32 frame length without FCS (what a capture shows; LRH..VCRC for InfiniBand)
#: ============ ====== ===========================================================================
TX_DTYPE = np.dtype([
    ("time_ns", "<i8"),
    ("nic", "<i4"),
    ("peer_nic", "<i4"),
    ("msg", "<i8"),
    ("index", "<i8"),
    ("kind", "u1"),
    ("frame_bytes", "<u4"),
])

_I8 = np.int64


class QP:
    """The send queue of one QP on its NIC and the message at its head.

    ``d``/``fb`` are the layer-1 durations (ns) and frame lengths (bytes) of the head message's
    FIRST, MIDDLE and LAST packet (all three the ONLY packet for a one-packet message).
    """

    __slots__ = ("index", "peer", "fifo", "head", "n", "next", "d", "dmin", "fb", "kind",
                 "psn_next", "count", "bytes_next")

    def __init__(self, index: int, peer: int):
        self.index = index          # position in the port's fixed cyclic order
        self.peer = peer            # destination NIC
        self.fifo: deque = deque()  # posted messages behind the head: (msg, n, d, fb, kind)
        self.head = -1              # msg id being sent, -1 when none
        self.n = 0
        self.next = 0               # index of the head's next packet
        self.d = (0, 0, 0)
        self.dmin = 0
        self.fb = (0, 0, 0)
        self.kind = 0
        self.psn_next = 0           # packets posted on this QP so far (PSN offset of the next one)
        self.count = 0              # messages posted on this QP so far
        self.bytes_next = 0         # payload bytes posted so far

    def load(self, msg: int, n: int, d: tuple, fb: tuple, kind: int) -> None:
        self.head, self.n, self.next, self.d, self.fb, self.kind = msg, n, 0, d, fb, kind
        self.dmin = min(d)


class Port:
    """Transmit side of one NIC. The engine calls :meth:`advance` before every change of state.

    Args:
        nic: global NIC index.
        ack_every: AckReq every this many packets of a message (0: only on the last packet).
        ack_ns: layer-1 duration of one ACK frame (ns), ack_bytes its length without FCS.
        max_slots: most slots materialised in one epoch (bounds the memory of one step).
    """

    def __init__(self, nic: int, ack_every: int, ack_ns: int, ack_bytes: int, max_slots: int):
        self.nic = nic
        self.ack_every = ack_every
        self.ack_ns = ack_ns
        self.ack_bytes = ack_bytes
        self.max_slots = max_slots
        self.qps: list[QP] = []
        self.by_key: dict[tuple[int, int, int], QP] = {}   # (peer, connection index, role)
        self.active: list[int] = []     # sorted local indices of QPs with an eligible head
        self.pointer = -1               # local index of the QP served last
        self.acks: list[tuple[int, int, int]] = []   # (msg, packet index, data sender)
        self.clock: int | None = None   # next packet boundary (link free); None before any work
        self.buf = np.empty(256, TX_DTYPE)    # committed rows not yet taken, time-sorted
        self.out_rows = 0
        self.wake_at: int | None = None       # earliest wake of this port queued in the engine
        self._mut = 0                         # counts changes of state (keys the plan cache)
        self._cache: tuple | None = None

    # -- state changes (the engine has advanced the port to the event time t first) ----------

    def qp(self, peer: int, qp: int, role: int = 0) -> QP:
        """This NIC's QP towards ``peer`` with connection index ``qp``, created on first use.

        ``role`` 0: the sender's QP of connection (this NIC, peer, qp), which carries its data;
        1: the receiver's QP of connection (peer, this NIC, qp), which carries its clear-to-send
        writes. The two are different QPs (one RC QP pair per connection, docs/lower.md)."""
        key = (peer, qp, role)
        q = self.by_key.get(key)
        if q is None:
            q = QP(len(self.qps), peer)
            self.qps.append(q)
            self.by_key[key] = q
        return q

    def busy(self) -> bool:
        return bool(self.active) or bool(self.acks)

    def _touch(self, t: int) -> None:
        if self.clock is None or self.clock < t:
            self.clock = t

    def post(self, q: QP, t: int, msg: int, n: int, d: tuple, fb: tuple, kind: int) -> bool:
        """Post message ``msg`` (``n`` packets) on ``q`` at time ``t``: it joins the QP's FIFO.

        Returns True when the rotation changed (the QP had no message and joins it)."""
        if q.head < 0:
            q.load(msg, n, d, fb, kind)
            insort(self.active, q.index)
            self._touch(t)
            self._mut += 1
            return True
        q.fifo.append((msg, n, d, fb, kind))
        return False

    def queue_ack(self, t: int, msg: int, index: int, data_sender: int) -> None:
        """An ACK for packet ``index`` of ``msg`` is ready at ``t`` (strict priority)."""
        self.acks.append((msg, index, data_sender))
        self._touch(t)
        self._mut += 1

    # -- the vectorized epoch ----------------------------------------------------------------

    def _plan(self) -> tuple[list[QP], int, int, int]:
        """``(qs, k, s, dmin)``: the QPs in rotation order (the one after the last served first),
        their count, the stop slot (the first slot whose packet has consequences elsewhere) and
        the shortest frame time (ns). Slot ``s`` goes to position ``s % k``; head ``i``'s last
        packet is slot ``(n - next - 1) * k + i``, its next AckReq'd one ``j * k + i`` with
        ``j = -(next + 1) mod N``. One Python step per QP, cached until the port's state changes."""
        if self._cache is not None and self._cache[0] == self._mut:
            return self._cache[1]
        k = len(self.active)
        cut = bisect_right(self.active, self.pointer)
        qs = [self.qps[i] for i in self.active[cut:] + self.active[:cut]]
        every = self.ack_every
        s = dmin = 1 << 62
        for i, q in enumerate(qs):
            last = q.n - q.next - 1
            if every:
                j = -(q.next + 1) % every
                if j < last:
                    last = j
            if last * k + i < s:
                s = last * k + i
            if q.dmin < dmin:
                dmin = q.dmin
        plan = (qs, k, s, dmin)
        self._cache = (self._mut, plan)
        return plan

    def next_wake(self, gap_slots: int) -> int | None:
        """Start time of the next packet with consequences, assuming nothing else happens.

        Capped at ``clock + gap_slots`` shortest frame times, so that the engine commits a busy
        port at least that often (bounded memory per step). ``None`` when no data is eligible.
        The time of slot ``s`` is the sum over rotation positions ``i`` of the MIDDLE time times
        the number of slots ``< s`` at ``i`` (``ceil((s - i) / k)``), plus FIRST - MIDDLE where
        that includes a head's first packet (no slot before the stop slot is a LAST).
        """
        if not self.active:
            return None
        qs, k, s, dmin = self._plan()
        base = self.clock + len(self.acks) * self.ack_ns
        t = base
        for i, q in enumerate(qs[: min(k, s)]):
            d = q.d
            t += (s - i + k - 1) // k * d[1] + (d[0] - d[1] if q.next == 0 else 0)
        return min(t, base + gap_slots * dmin)

    def advance(self, limit: int, cons: list, max_rows: int | None = None) -> None:
        """Commit every packet whose first bit leaves before ``limit`` (ns), at most ``max_rows``.

        Appends ``("ack", receiver, msg, index, end_ns)`` for each committed packet with AckReq,
        ``("done", msg, end_ns)`` for each committed last packet and ``("first", msg, start_ns)``
        for each committed first packet to ``cons``; committed rows go to the output buffer.
        """
        left = max_rows if max_rows is not None else 1 << 62
        while left > 0 and self.clock is not None and self.clock < limit:
            if self.acks:
                left -= self._send_acks(limit, left)
            elif self.active:
                left -= self._epoch(limit, left, cons)
            else:
                break

    def _send_acks(self, limit: int, left: int) -> int:
        """Pending ACKs back to back from ``clock`` (one row per ACK event: a loop per event)."""
        d, t, nic, fb = self.ack_ns, self.clock, self.nic, self.ack_bytes
        fit = min(len(self.acks), (limit - 1 - t) // d + 1, left)
        acks, self.acks = self.acks[:fit], self.acks[fit:]
        self._reserve(fit)[:] = [(t + j * d, nic, a[2], a[0], a[1], PKT_ACK, fb) for j, a in enumerate(acks)]
        self.clock = t + fit * d
        self._mut += 1
        return fit

    def _epoch(self, limit: int, left: int, cons: list) -> int:
        """Commit the next slots of the rotation up to the stop slot, ``limit`` or ``left`` rows."""
        qs, k, s, dmin = self._plan()
        clock = self.clock
        slots = min(s + 1, (limit - 1 - clock) // dmin + 1, left, self.max_slots)
        if slots <= min(k, _SMALL):
            return self._round(qs, k, s, slots, limit, cons)
        a = np.array([(q.next, q.n) + q.d + q.fb + (q.head, q.peer, q.kind) for q in qs], _I8)
        slot = _POS[:slots] if slots <= _POS.size else np.arange(slots, dtype=_I8)
        g = a[slot % k]                                       # (slots, 11) the head of each slot
        idx = g[:, 0] + slot // k
        which = np.where(idx == g[:, 1] - 1, 4, np.where(idx == 0, 2, 3))   # column FIRST/MIDDLE/LAST
        rowpos = slot if slots <= _POS.size else np.arange(slots, dtype=_I8)
        dur = g[rowpos, which]
        end = clock + np.cumsum(dur)
        start = end - dur
        if start[-1] >= limit:
            slots = int(np.searchsorted(start, limit))       # start < limit; >= 1 as clock < limit
            g, idx, which, start, rowpos = g[:slots], idx[:slots], which[:slots], start[:slots], rowpos[:slots]
        rows = self._reserve(slots)
        rows["time_ns"] = start
        rows["nic"] = self.nic
        rows["peer_nic"] = g[:, 9]
        rows["msg"] = g[:, 8]
        rows["index"] = idx
        rows["kind"] = g[:, 10]
        rows["frame_bytes"] = g[rowpos, which + 3]
        for i in range(min(k, slots)):
            q = qs[i]
            if q.next == 0:
                cons.append(("first", q.head, int(start[i])))
            q.next += (slots - i + k - 1) // k
        self._close(qs, k, s, slots, int(end[slots - 1]), cons)
        return slots

    def _round(self, qs: list[QP], k: int, s: int, slots: int, limit: int, cons: list) -> int:
        """:meth:`_epoch` when at most one slot per QP remains before the next event (a step per
        QP of the rotation, like :meth:`_plan`): cheaper than numpy for a handful of rows."""
        t, nic, out = self.clock, self.nic, []
        for q in qs[:slots]:
            if t >= limit:
                break
            i = q.next
            w = 2 if i == q.n - 1 else 0 if i == 0 else 1
            out.append((t, nic, q.peer, q.head, i, q.kind, q.fb[w]))
            if i == 0:
                cons.append(("first", q.head, t))
            q.next = i + 1
            t += q.d[w]
        self._reserve(len(out))[:] = out
        self._close(qs, k, s, len(out), t, cons)
        return len(out)

    def _close(self, qs: list[QP], k: int, s: int, slots: int, end: int, cons: list) -> None:
        """After ``slots`` slots ending at ``end``: move the pointer; if the stop slot went out,
        report its AckReq (and completion) and load the QP's next message or retire the QP."""
        self.clock = end
        self.pointer = qs[(slots - 1) % k].index
        self._mut += 1
        if slots == s + 1:
            q = qs[s % k]
            cons.append(("ack", q.peer, q.head, q.next - 1, end))
            if q.next == q.n:
                cons.append(("done", q.head, end))
                if q.fifo:
                    q.load(*q.fifo.popleft())
                else:
                    q.head = -1
                    self.active.remove(q.index)

    # -- committed rows ------------------------------------------------------------------------

    def _reserve(self, rows: int) -> np.ndarray:
        need = self.out_rows + rows
        if need > self.buf.size:
            grown = np.empty(max(need, 2 * self.buf.size), TX_DTYPE)
            grown[: self.out_rows] = self.buf[: self.out_rows]
            self.buf = grown
        view = self.buf[self.out_rows: need]
        self.out_rows = need
        return view

    def take(self, before: int) -> np.ndarray | None:
        """Remove and return (a copy of) the committed rows with ``time_ns < before``, time-sorted."""
        n = self.out_rows
        cut = int(np.searchsorted(self.buf["time_ns"][:n], before))
        if not cut:
            return None
        rows = self.buf[:cut].copy()
        self.buf[: n - cut] = self.buf[cut:n]
        self.out_rows = n - cut
        if self.buf.size > 4096 and self.out_rows < self.buf.size // 8:
            self.buf = self.buf[: max(4096, 2 * self.out_rows)].copy()
        return rows


_POS = np.arange(1 << 16, dtype=_I8)
#: Epochs of at most this many slots (and at most one per QP) are built without numpy.
_SMALL = 8
