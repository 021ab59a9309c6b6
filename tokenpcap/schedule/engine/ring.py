"""The compiled engine's message table as a ring of rows (part of
:mod:`tokenpcap.schedule.engine.kernel`, grown by :class:`tokenpcap.schedule.engine.state.Engine`).

Message ids stay what they are (dense, in creation order; they key the heap's READY, ACK and
ARRIVE events and so define the order of events). Message ``id`` lives at row ``id & mask`` of
``S.ms`` (``mask = sc[MMASK]``, the row count minus one, a power of two); ``M_ID`` says whose the
row is. With ``mask == -1`` the table is not a ring: one row per message of the run, allocated
up front (what a caller that reads the whole table after the run needs), without the ring's
columns (``M_ID``, ``M_NACK``, ``M_TLAST``: the engine touches them only for a ring, so a kept
table costs what it did before the ring, 136 B per message, and no extra memory traffic).

**When a row is free again.** The engine reads a message's row until

* its arrival is processed (``M_ARR >= 0``; the arrival of the last packet is queued when the
  last packet is committed, so every packet has been sent; a clear-to-send write's arrival posts
  its data message, named by the event, :func:`arrival_words`), and
* every ACK it asked for whose frame is made is settled (``M_NACK == 0``): counted up when an
  AckReq packet is committed towards a NIC whose frames are made (or with a queued fabric,
  whose ACKs hold the row in flight: module fabric), counted down when the ACK leaves the
  receiver's queue (the frame names the message's sender, read from the row). An ACK queued on
  a NIC whose frames are not made is not counted: neither its event nor its queue entry reads
  the message's row (the entry carries the message id only, which such a NIC never reads), so
  the row may be reused before such an ACK is queued.

The arrival's event carries what it does (:func:`arrival_words`: the data message a
clear-to-send write posts, or the transfer a data message delivers), read from the row with the
receiving NIC when the message becomes its QP's head (``X_DST``, ``X_ARRA``, ``X_ARRB`` of its
rotation row, :mod:`~tokenpcap.schedule.engine.link`); its last packet's commit and the event
only write the row (``M_LAST``, ``M_ARR``). A large job's message rows span more memory than the
caches hold: each read of a row that has left them stalls the loop (on DeepSeek-V3 the reads of
a message's row at its ACK and at its arrival took about a sixth of the loop's samples in a line
profile, ``benchmarks/README.md``).

No event, heap entry, ACK-queue entry or rotation row reads the message's row after that (an ACK
not counted carries its id, never read for the row). Python reads the row for every frame naming
the message (:meth:`tokenpcap.schedule.runner.Schedule.message_rows` per handed-out chunk), and
it hands out the frames with ``time_ns < FRONT`` at a return of the kernel, once every frame
before ``FRONT`` is made. ``M_TLAST`` is the start of the last frame
made that names the message (data, clear-to-send or ACK; -1 when none is made: no NIC of it
selected). So a row is free when its message is done and ``M_TLAST < sc[HANDED]``, the ``FRONT``
of the last hand-out Python has finished (it sets ``sc[HANDED]`` before calling the kernel
again): every frame naming the message was made, handed out and read. No queue of retired
messages is kept: a row's state says it.

**Allocation.** The messages an event creates (its launched transfers' data messages, then their
clear-to-send writes: ``n`` new ids from ``sc[NMSG]``) are written at the end of the event, in
:func:`tokenpcap.schedule.engine.progs.flush_out`; :func:`room` runs just before it and resets
their rows. When one of those rows is still held, the kernel returns before creating them (the
event is otherwise over, the launched transfers wait in the launch list, and the next call of
the kernel creates them first, at the same instant): 1 (hand the frames out up to now: rows of
done messages waiting for that are freed) when at least half a ring of ids was created since the
last hand-out, else 3 (grow: :func:`grow` doubles the ring, each row moving to ``id & new_mask``,
which no other held row shares: two ids equal modulo the new size were equal modulo the old one,
one row). So the ring holds what is in progress: the messages not yet done, those whose frames
are not yet handed out, and the span of ids between the oldest of them and the newest.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import (EV_ARRIVE, HAND_ID, HANDED, M_ARR, M_COLS, M_ID,
                                              M_KIND, M_NACK, M_PEER, M_TLAST, M_TR, MASK24, MMASK,
                                              MNEED, NMSG, NOW, push)

__all__ = ["room", "grow", "table", "is_free", "arrival_words", "push_arrival"]


@part
def _free(ms, r, handed):
    return ms[r, M_ID] < 0 or (ms[r, M_ARR] >= 0 and ms[r, M_NACK] == 0 and ms[r, M_TLAST] < handed)


@part
def room(S, sc, n):
    """Reset the rows of the next ``n`` message ids (``sc[NMSG] ..``) when all are free (0);
    otherwise 1 (a hand-out up to ``sc[NOW]`` frees rows) or 3 (the ring must grow), with
    ``sc[MNEED] = n``."""
    mk = sc[MMASK]
    if mk < 0 or n == 0:
        return 0
    sc[MNEED] = 0
    ms = S.ms
    j0 = sc[NMSG]
    blocked = n > mk + 1
    if not blocked:
        for j in range(j0, j0 + n):
            if not _free(ms, j & mk, sc[HANDED]):
                blocked = True
                break
    if blocked:
        sc[MNEED] = n
        if n <= mk + 1 and j0 - sc[HAND_ID] >= (mk + 1) >> 1 and sc[NOW] > sc[HANDED]:
            return 1
        return 3
    for j in range(j0, j0 + n):
        r = j & mk
        for c in range(M_COLS):
            ms[r, c] = -1
        ms[r, M_ID] = j
        ms[r, M_NACK] = 0
    return 0


def table(rows: int, ring: bool = True) -> np.ndarray:
    """A message table of ``rows`` free rows: int64 ``(rows, M_COLS)`` for a ring, else
    ``(rows, M_ID)``, row ``i`` message ``i`` (a run that keeps every message)."""
    ms = np.full((rows, M_COLS if ring else M_ID), -1, np.int64)
    if ring:
        ms[:, M_NACK] = 0
    return ms


def grow(ms: np.ndarray, need: int) -> np.ndarray:
    """The ring ``ms`` doubled (or more, to at least ``need`` rows), each used row at
    ``M_ID & (new size - 1)``."""
    rows = 2 * ms.shape[0]
    while rows < need:
        rows *= 2
    new = table(rows)
    used = np.flatnonzero(ms[:, M_ID] >= 0)
    new[ms[used, M_ID] & (rows - 1)] = ms[used]
    return new


def is_free(ms: np.ndarray, handed: int) -> np.ndarray:
    """bool ``(rows,)``: which rows of the ring are free (module docstring)."""
    return (ms[:, M_ID] < 0) | ((ms[:, M_ARR] >= 0) & (ms[:, M_NACK] == 0) & (ms[:, M_TLAST] < handed))


@part
def arrival_words(ms, sc, msg):
    """The two words of message ``msg``'s arrival event (module docstring): ``(1, the data
    message it posts)`` for a clear-to-send write (``M_KIND`` 1, ``M_PEER``), ``(0, the
    transfer it delivers)`` for data (``M_TR``)."""
    r = msg & sc[MMASK]
    if ms[r, M_KIND] == 1:
        return 1, ms[r, M_PEER]
    return 0, ms[r, M_TR]


@part
def push_arrival(h, sc, ms, t, msg):
    """Queue message ``msg``'s arrival at ``t`` (``EV_ARRIVE`` keyed by its id) with its
    :func:`arrival_words`."""
    a, b = arrival_words(ms, sc, msg)
    push(h, sc, t, EV_ARRIVE, msg * (MASK24 + 1), a, b)
