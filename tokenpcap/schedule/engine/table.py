"""The NIC engine's message table (used by :mod:`tokenpcap.schedule.engine.nic`): one row per RDMA message.

Rows are indexed by message id (dense, in order of creation). By default the table keeps every
message, and :attr:`tokenpcap.schedule.engine.nic.Engine.messages` is a plain ``MSG_STATE_DTYPE`` array. A long run
that only lowers packets as they come (``tokenpcap generate``) does not need messages that are
over, so with ``keep_messages=False`` the engine *retires* a message once nothing will refer to it
again — its last ACK (the ACK of its last packet, always the last frame that names it) has been
handed to the consumer of :meth:`tokenpcap.schedule.engine.nic.Engine.run` and the consumer asked for the next
chunk — and drops the oldest retired rows in blocks. The table then holds about the messages in
flight (of the order of one training iteration), not the whole run: memory stays flat over
``--iterations``. ``Engine.messages`` is then a :class:`MessageWindow`, indexable by message id
(an int or an int array) like the array, for the rows still held.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records import MESSAGE_DTYPE

__all__ = ["MSG_STATE_DTYPE", "MessageTable", "MessageWindow"]

#: The engine's message table: MESSAGE_DTYPE plus what the lowering and tests need. Times are -1
#: until they happen. ``psn_offset`` counts the packets posted before this message on its QP (the
#: lowering adds the QP's initial PSN, modulo 2**24); ``qp_seq`` counts the messages before it
#: (the responder's MSN after it is ``qp_seq + 1``); ``byte_offset`` its payload bytes before it;
#: ``peer_msg`` links a data message and its clear-to-send (-1 without one).
MSG_STATE_DTYPE = np.dtype(MESSAGE_DTYPE.descr + [
    ("n_packets", "<i8"),
    ("psn_offset", "<i8"),
    ("qp_seq", "<i8"),
    ("byte_offset", "<i8"),
    ("peer_msg", "<i8"),
    ("ready_ns", "<i8"),
    ("first_tx_ns", "<i8"),
    ("last_tx_end_ns", "<i8"),
    ("arrival_ns", "<i8"),
])

#: Fewest retired rows dropped at once (and the smallest capacity): drops are amortised.
_BLOCK = 1024


class MessageTable:
    """Rows of ``MSG_STATE_DTYPE`` for message ids ``[lo, n)`` in a growing buffer.

    Args:
        keep: keep every row (``lo`` stays 0); otherwise drop retired rows (module docstring).
    """

    def __init__(self, keep: bool = True):
        self.keep = bool(keep)
        self.buf = np.zeros(_BLOCK, MSG_STATE_DTYPE)
        self.done = np.zeros(_BLOCK, bool)        # retired, by row (unused when keeping all)
        self.lo = 0                               # id of row 0
        self.n = 0                                # ids assigned so far

    def __len__(self) -> int:
        return self.n

    def append(self, m: int) -> np.ndarray:
        """Assign ids ``n .. n + m - 1``; returns their (zeroed) rows, a view to fill in."""
        need = self.n + m - self.lo
        if need > self.buf.size:
            cap = max(need, 2 * self.buf.size)
            for name in ("buf", "done"):
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: self.n - self.lo] = old[: self.n - self.lo]
                setattr(self, name, new)
        block = self.buf[self.n - self.lo: need]
        self.n += m
        return block

    def column(self, name: str) -> np.ndarray:
        """Field ``name`` of rows ``lo .. n - 1`` (a view; index it with ``id - lo``)."""
        return self.buf[name][: self.n - self.lo]

    def rows(self, ids) -> np.ndarray:
        """Rows of the message ids ``ids`` (int or int array; a copy for arrays, as numpy does).

        Raises:
            IndexError: an id never assigned, or (``keep=False``) already dropped.
        """
        local = np.asarray(ids) - self.lo
        if local.size and (np.min(local) < 0 or np.max(local) >= self.n - self.lo):
            bad = np.asarray(ids).reshape(-1)[(local.reshape(-1) < 0) | (local.reshape(-1) >= self.n - self.lo)][0]
            raise IndexError(f"message id {int(bad)}: held ids are {self.lo} .. {self.n - 1}"
                             + (" (earlier ones are over and were dropped: keep_messages=False)"
                                if bad < self.lo else ""))
        return self.buf[: self.n - self.lo][local]

    def view(self) -> np.ndarray | MessageWindow:
        """What :attr:`tokenpcap.schedule.engine.nic.Engine.messages` returns: the array of all rows (keep) or a
        :class:`MessageWindow`."""
        if self.keep:
            return self.buf[: self.n]
        return MessageWindow(self)

    def retire(self, ids: np.ndarray) -> None:
        """Mark messages over (nothing refers to them again) and drop the oldest retired rows when
        at least a block of them leads the table and they are at least half of it (``keep=False``
        only; amortised O(1) per message)."""
        if self.keep or not len(ids):
            return
        self.done[np.asarray(ids, np.int64) - self.lo] = True
        live = self.n - self.lo
        if live < _BLOCK or not self.done[_BLOCK - 1]:
            return                                  # fewer than a block of retired rows lead
        busy = np.flatnonzero(~self.done[:live])
        k = int(busy[0]) if busy.size else live     # retired rows leading the table
        if k < _BLOCK or 2 * k < live:
            return
        rest = live - k
        cap = self.buf.size if self.buf.size <= max(_BLOCK, 4 * rest) else max(_BLOCK, 2 * rest)
        for name in ("buf", "done"):
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[:rest] = old[k:live]
            setattr(self, name, new)
        self.lo += k


class MessageWindow:
    """The message table of an engine with ``keep_messages=False``: rows by message id.

    ``window[ids]`` (an int or an int64 array of message ids) gives ``MSG_STATE_DTYPE`` rows like
    indexing the full array would, for every message not yet dropped (all messages named by the
    chunk :meth:`tokenpcap.schedule.engine.nic.Engine.run` last yielded, and any message still in flight).
    ``len(window)`` counts every message created; ``first_id`` is the oldest one still held.

    Raises:
        IndexError: an id already dropped or never assigned.
        TypeError: an index that is not an id or an integer array of ids.
    """

    def __init__(self, table: MessageTable):
        self._table = table

    dtype = MSG_STATE_DTYPE

    def __len__(self) -> int:
        return self._table.n

    @property
    def first_id(self) -> int:
        return self._table.lo

    def __getitem__(self, ids):
        a = np.asarray(ids)
        if a.dtype.kind not in "iu":
            raise TypeError(f"message window index: got {a.dtype} {type(ids).__name__}, expected a message id "
                            "or an integer array of ids (the window holds only messages still needed)")
        return self._table.rows(a)
