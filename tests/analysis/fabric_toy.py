"""A toy queued fabric in plain Python, to give the fabric analysis a log with the shape of a
real one: ``senders`` NICs send to one receiver through one switch (an incast), with PFC.

Time runs in slots of one frame time (``frame_bytes * 8 / gbps`` ns). In every slot each
sender that is not paused and has frames left puts one frame into its ingress port
``i`` (= its NIC index), and the egress port ``senders`` (to the receiver, NIC ``senders``)
sends the frame at the head of its queue. When the bytes from ingress ``i`` waiting in the
switch exceed ``xoff_bytes`` the switch sends XOFF out of port ``i`` and sender ``i`` stops
from the next slot; when they fall to ``xon_bytes`` or below, XON. This is the threshold rule
of HPCC ns-3 ``switch-mmu.cc`` (``CheckShouldPause``/``CheckShouldResume``) with fixed
thresholds and no propagation delay."""
from __future__ import annotations

from collections import deque

import numpy as np

from tokenpcap.records.fabric import FABRIC_TABLES, FabricSummary, empty_log


def incast(senders: int = 3, frames_each: int = 40, frame_bytes: int = 1000, gbps: float = 100.0,
           xoff_bytes: int = 6000, xon_bytes: int = 3000, sample_ns: int = 400,
           quanta: int = 65535, priority: int = 3) -> tuple[dict, FabricSummary]:
    slot = int(frame_bytes * 8 / gbps)
    left = [frames_each] * senders
    paused = [False] * senders
    paused_since = [0] * senders
    paused_ns = [0] * senders
    held = [0] * senders                   # bytes of ingress i in the switch
    queue: deque[int] = deque()            # ingress of each frame waiting at the egress
    pfc, depth = [], {}
    sent = 0
    t = 0
    while any(left) or queue:
        for i in range(senders):
            if left[i] and not paused[i]:
                left[i] -= 1
                queue.append(i)
                held[i] += frame_bytes
        q = len(queue) * frame_bytes
        if q:
            b = t // sample_ns * sample_ns
            depth[b] = max(depth.get(b, 0), q)
        if queue:
            i = queue.popleft()
            held[i] -= frame_bytes
            sent += 1
        for i in range(senders):
            if not paused[i] and held[i] > xoff_bytes:
                paused[i], paused_since[i] = True, t
                pfc.append((t, 0, i, priority, 1, quanta))
            elif paused[i] and held[i] <= xon_bytes:
                paused[i] = False
                paused_ns[i] += t - paused_since[i]
                pfc.append((t, 0, i, priority, 0, 0))
        t += slot
    log = empty_log()
    log["pfc"] = np.array(pfc, FABRIC_TABLES["pfc"])
    log["queues"] = np.array([(b, 0, senders, priority, v) for b, v in sorted(depth.items())],
                             FABRIC_TABLES["queues"])
    n_pfc = [sum(1 for e in pfc if e[2] == i) for i in range(senders)]
    log["links"] = np.array(
        [(0, i, i, -1, -1, gbps, 0, 0, n_pfc[i], 0, 0, 0) for i in range(senders)]
        + [(0, senders, senders, -1, -1, gbps, sent, sent * frame_bytes, 0, 0, 0,
            max(depth.values(), default=0))], FABRIC_TABLES["links"])
    log["nics"] = np.array([(i, n_pfc[i], paused_ns[i], 0, 0) for i in range(senders)]
                           + [(senders, 0, 0, sent, sent * frame_bytes)], FABRIC_TABLES["nics"])
    return log, FabricSummary(("tor0",), sent, 0, 0, "toy", "single-switch", (priority,),
                              sample_ns)


def several_incasts(k: int = 10, sample_ns: int = 400) -> tuple[dict, FabricSummary]:
    """``k`` independent incasts of different sizes, incast ``j`` on switch ``tor<j>`` (so ``k``
    queued ports of different peaks), as one fabric log."""
    logs = []
    for j in range(k):
        log, _ = incast(senders=2 + j % 4, frames_each=20 + 7 * j,
                        xoff_bytes=4000 + 1000 * (j % 3), sample_ns=sample_ns)
        for t in ("pfc", "queues", "links", "drops"):
            log[t]["switch"] = j
        logs.append(log)
    out = {t: np.concatenate([g[t] for g in logs]) for t in FABRIC_TABLES}
    out["pfc"] = np.sort(out["pfc"], order="time_ns", kind="stable")
    out["queues"] = np.sort(out["queues"], order="time_ns", kind="stable")
    out["nics"] = logs[0]["nics"]
    hops = int(sum(g["links"]["tx_frames"].sum() for g in logs))
    return out, FabricSummary(tuple(f"tor{j}" for j in range(k)), hops, 0, 0, "toy",
                              "single-switch", (3,), sample_ns)
