"""The compiled event loop: every rank's program, every call's transfers and every NIC's QPs, timed
per message (numba; no Python work per message or per packet).

Parts: :mod:`~tokenpcap.schedule.engine.events` (event types, state columns, :class:`State`, the
heap), :mod:`~tokenpcap.schedule.engine.link` (one NIC's transmit side),
:mod:`~tokenpcap.schedule.engine.fabric` (the queued fabric's links and switches, with
``fabric_mmu``, ``fabric_stats``, its fast path ``fabric_fast`` and a NIC's side of PFC,
``nicpfc``; off with an ideal fabric),
:mod:`~tokenpcap.schedule.engine.progs` (programs, calls, transfers),
:mod:`~tokenpcap.schedule.engine.ring` (the message table's rows); this module is the loop.

Semantics are those of the schedule and NIC model documented in :mod:`tokenpcap.schedule.runner`
and :mod:`tokenpcap.schedule.engine.port` (1F1B programs, blocking TP, DP buckets on a stream,
NCCL rendezvous, ring/tree dependencies per slice, clear-to-send before data, ACKs with strict
priority, round-robin one packet per turn over a NIC's eligible QPs at link rate with layer-1
overhead), computed so that the cost of a message does not depend on its packet count:

* **Epochs in closed form.** Between two events the eligible QPs of a NIC are fixed, so slot ``j``
  of the rotation (``k`` QPs, the one after the last served first) is packet ``next + j // k`` of
  QP ``j % k``. Every slot before the first one with consequences elsewhere (the last packet of a
  message, a packet with AckReq: the *stop slot* ``s``) is a MIDDLE packet except each QP's first,
  so the start time of any slot follows from one round of durations: ``O(k)`` work per epoch
  instead of ``O(slots)``.
* **Events** are those of the discrete-event engine, in the same total order: a 4-ary heap keyed
  by ``(time, type, key, insertion)`` with types READY < ACK < ARRIVE < TIMER < WAKE, READY keyed
  by message id, ACK by (message, packet), ARRIVE by message, WAKE by NIC, timers by insertion.
  The READYs an event creates at its own instant sort before everything left at that instant and
  in id order, so they are handled right after it without the heap. With ``cf[CANON]`` the
  transfers launched at one instant become messages (and NVLink copies) only after the instant's
  last event before its wakes, sorted by a key invariant under the translation of the
  data-parallel index (:func:`~tokenpcap.schedule.engine.canon.canon_less`), so that a run whose
  replicas are translates of each other is itself one (:mod:`tokenpcap.schedule.replicas`).
  A WAKE comes at the start of a NIC's predicted stop slot; arrivals and ACKs are pushed when
  their packet is committed. The same inputs therefore give the same message times, ids, QP
  rotation orders and packets as the Python engine.
* **Packets only where asked.** A NIC with ``p_sel`` set writes a row per frame it sends into the
  output buffer as its slots are committed (the slots of an epoch are walked one by one there);
  the others only advance their clocks. A selected NIC's wake is also capped at ``gap`` shortest
  frames after its clock, so its rows are committed (and handed out) in bounded batches.

The parts are compiled without numba's reference counting and without a CPython wrapper
(:func:`~tokenpcap.schedule.engine.compiled.part`): they never allocate, every call that passes
the :class:`State` would otherwise pay two atomic operations per array of it, and only this
module's functions are called from Python. The parts that take the :class:`State` and are not
small (``advance``, ``ready``, ``step``, ``arrived``, ...) are inlined into :func:`run`
(:func:`~tokenpcap.schedule.engine.compiled.inline_part`): an ordinary call copies every array
of the State onto the stack. With an ideal fabric (``fabric`` is ``None``) the
queued fabric's parts are not compiled at all (``QUEUED``,
:mod:`~tokenpcap.schedule.engine.events`). Numba's on-disk cache does not follow calls across
modules: after editing a part, delete ``tokenpcap/schedule/engine/__pycache__/*.nb[ic]``.

The buffers that grow with what is in progress (event heap, ACK queues, output rows, the
transfers launched by one event, the message table when it is a ring:
:mod:`~tokenpcap.schedule.engine.ring`) are plain arrays: :func:`run` returns to Python before an event
when one of them is near full (the caller grows it and calls again), when the output holds
``chunk`` rows (the caller commits the selected NICs up to the next event's time with
:func:`commit` and hands out every row before it: no later event can add an earlier frame), and
when the run is over.
"""

import numpy as np
from numba import njit

from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - the kernel's vocabulary, re-exported
from tokenpcap.schedule.engine.events import State, pop, push
from tokenpcap.schedule.engine.fabric import free_event, hop, pfc_event
from tokenpcap.schedule.engine.fabric_fast import drain
from tokenpcap.schedule.engine.link import advance, queue_ack, ready, rewake
from tokenpcap.schedule.engine.nicpfc import nic_pause_end, nic_pfc
from tokenpcap.schedule.engine.rpoint import cc_arrival, cc_timer
from tokenpcap.schedule.engine.canon import instant_over
from tokenpcap.schedule.engine.progs import ab_done, arrived, flush_out, instant_copies, step
from tokenpcap.schedule.engine.ring import room

__all__ = ["State", "run", "commit", "push", "NEVER"]


@njit(cache=True, nogil=True)
def commit(S, cf, sc, h, a, o, port, limit, fabric):
    """Commit ``port``'s frames that start before ``limit`` (and queue its next wake);
    ``fabric``: as :func:`run`."""
    advance(S, cf, sc, h, a, o, port, limit, fabric)
    if limit < NEVER:
        rewake(S, cf, sc, h, port, fabric)


@njit(cache=True, nogil=True)
def run(S, cf, sc, h, a, o, lst, fabric):
    """Process events in order. Returns 1 when the output holds ``cf[CHUNK]`` rows (``sc[FRONT]``
    is then the time of the next event: the caller commits the selected NICs up to it with
    :func:`commit` and hands out the rows before it), 3 when a buffer needs to grow before the
    next event (heap or launch list within ``cf[HEAD]`` of full, the countdown pool within
    ``cf[SLAB_HEAD]`` words of full: :mod:`~tokenpcap.schedule.engine.slabs`; also in the middle of an
    NVLink-only call's end: :func:`~tokenpcap.schedule.engine.progs.ab_done`; ACK pool, output rows within
    ``cf[GAP]`` + 64 of full, or the message ring: :func:`~tokenpcap.schedule.engine.ring.room`,
    which may also return 1 with ``sc[FRONT] = sc[NOW]``), 2 on an internal error (``sc[ERR]``),
    0 when every event is done.

    The messages an event posts (``sc[RDY_NEXT] .. sc[RDY_END] - 1``, in id order) are the next
    events in the heap's order; they are posted here one by one, before the next pop, without
    going through the heap. The messages of the transfers an event launches are created after
    it, before anything else (the launch list keeps them across a return).

    ``fabric``: ``QUEUED`` with a queued fabric, ``None`` with an ideal one (then the fabric's
    events never come and their code is not compiled: ``QUEUED`` in
    :mod:`~tokenpcap.schedule.engine.events`).

    It runs without the GIL (``nogil``), so that a thread of the caller reads ``sc`` while it
    runs (the message count ``sc[NMSG]``: the progress of :class:`tokenpcap.pipeline.Timing`);
    nothing but the caller's thread writes the arrays."""
    row = np.empty(5, np.int64)
    while sc[HN] > 0 or sc[RDY_NEXT] < sc[RDY_END] or sc[NLAUNCH] > 0 or sc[AB_CALL] >= 0:
        if sc[AB_CALL] >= 0:
            # the rest of an NVLink-only call's end, once the buffers have grown (progs.ab_done)
            if (sc[NLAUNCH] + cf[HEAD] > lst.shape[0] or sc[HN] + cf[HEAD] > h.shape[0]
                    or sc[SLAB_TOP] + cf[SLAB_HEAD] > S.tw.shape[0]):
                return 3
            c = sc[AB_CALL]
            sc[AB_CALL] = -1
            ab_done(S, cf, sc, h, lst, c, sc[NOW], sc[AB_POS])
            if sc[ERR]:
                return 2
            continue
        if sc[NLAUNCH] > 0 and instant_over(cf, sc, h):
            # the messages of the transfers the last event launched (with cf[CANON]: the
            # instant's events), at its instant, once their rows are free (module ring) and the
            # heap has room for the NVLink copies among them
            if sc[HN] + sc[NLAUNCH] + cf[HEAD] > h.shape[0]:
                return 3
            instant_copies(S, cf, sc, h, lst, sc[NOW])
            got = room(S, sc, sc[NLAUNCH] * (2 if cf[CTS] else 1))
            if got == 1:
                sc[FRONT] = sc[NOW]
                return 1
            if got:
                return 3
            flush_out(S, cf, sc, h, lst, sc[NOW])
        pending = sc[RDY_NEXT] < sc[RDY_END]
        if sc[NOUT] >= cf[CHUNK]:
            sc[FRONT] = sc[NOW] if pending else h[0, 0] >> 3
            return 1
        if (sc[HN] + cf[HEAD] > h.shape[0] or sc[NLAUNCH] + cf[HEAD] > lst.shape[0]
                or (sc[ACKFREE] < 0 and sc[ACKTOP] + 64 > a.shape[0])
                or sc[NOUT] + cf[GAP] + 64 > o.shape[0]
                or sc[SLAB_TOP] + cf[SLAB_HEAD] > S.tw.shape[0]):
            return 3
        if cf[FAB] and (sc[PKUSED] + cf[HEAD] > S.pk.shape[0] or sc[NLGP] + 1024 > S.lgp.shape[0]
                        or sc[NLGQ] + 1024 > S.lgq.shape[0] or sc[NLGN] + 1024 > S.lgn.shape[0]
                        or sc[NLGR] + 1024 > S.lgr.shape[0]):
            return 3
        if pending:
            mid = sc[RDY_NEXT]
            sc[RDY_NEXT] = mid + 1
            sc[NINLINE] += 1
            ready(S, cf, sc, h, a, o, mid, sc[NOW], fabric)
            if sc[ERR]:
                return 2
            continue
        pop(h, sc, row)
        t = row[0] >> 3
        typ = row[0] & 7
        sc[NOW] = t
        sc[NPOP + typ] += 1
        if typ == EV_WAKE:
            port = row[3]
            if t == S.pt[port, P_WAKE]:
                S.pt[port, P_WAKE] = NEVER
                stops = sc[NSTOP]
                advance(S, cf, sc, h, a, o, port, t + 1, fabric)
                if sc[NSTOP] == stops:
                    sc[NEMPTY] += 1
                rewake(S, cf, sc, h, port, fabric)
            else:
                sc[NSTALE] += 1
        elif fabric is not None and typ == EV_HOP:
            nic, k = hop(S, cf, sc, h, o, row[3], t)
            if nic >= 0 and S.pk[k, PK_KIND] == PKT_PFC:
                nic_pfc(S, cf, sc, h, a, o, nic, k, t)
            elif nic >= 0:
                cc_arrival(S, cf, sc, h, a, o, nic, k, t)
        elif fabric is not None and typ == EV_FREE:
            free_event(S, cf, sc, h, o, row[3], t)
        elif fabric is not None and typ == EV_PFC:
            if row[3] == 2:
                nic_pause_end(S, cf, sc, h, a, o, row[4], t)
            elif row[3] >= EV_CC_RP:
                cc_timer(S, cf, sc, h, a, o, row[3], row[4], t)
            else:
                pfc_event(S, cf, sc, h, o, row[3], row[4], t)
        elif typ == EV_ACK:
            port = row[3]
            advance(S, cf, sc, h, a, o, port, t, fabric)
            queue_ack(S, cf, sc, a, port, row[1] >> 24, (row[1] & MASK24) + (row[4] << 24), t)
            if cf[FAB]:
                rewake(S, cf, sc, h, port, fabric)
        elif typ == EV_ARRIVE:
            # what the arrival does came with the event (module ring, push_arrival)
            S.ms[(row[1] >> 24) & sc[MMASK], M_ARR] = t
            if row[3] == 1:
                ready(S, cf, sc, h, a, o, row[4], t, fabric)
            else:
                arrived(S, cf, sc, h, lst, row[4], t)
        else:
            if row[3] == 0:
                step(S, cf, sc, h, lst, row[4], t)
            elif row[3] == 1:
                arrived(S, cf, sc, h, lst, row[4], t)
            else:
                # an NVLink-only call's end: taken up at the top of the loop, where a resumed
                # one is (one call site: the part is inlined, module compiled)
                sc[AB_CALL] = row[4]
                sc[AB_POS] = S.call_pbase[row[4]]
        if sc[ERR]:
            return 2
    if fabric is not None:
        drain(S, cf, sc)
    sc[FRONT] = NEVER
    return 0
