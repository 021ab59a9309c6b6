"""Shards of a generate run: sets of NICs whose files one task writes, balanced by bytes.

A run split by NIC (one file per NIC) can be written by independent tasks, each writing the
files of a set of NICs (:mod:`tokenpcap.generate.distributed`). The sets are balanced by the
bytes each NIC's file will hold (:attr:`tokenpcap.generate.size.CaptureSize.nic_record_bytes`,
exact before anything runs) with the longest-processing-time rule: NICs in order of decreasing
bytes, each to the shard holding fewest bytes so far (Graham, "Bounds on multiprocessing timing
anomalies", SIAM J. Appl. Math. 17(2), 1969: the largest shard is at most 4/3 − 1/(3m) of the
optimum for m shards).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["Shard", "describe_nics", "plan_shards"]


@dataclass(frozen=True)
class Shard:
    """One task's NICs (sorted, global NIC indices) and the bytes their files will hold."""

    index: int
    nics: tuple[int, ...]
    predicted_bytes: int

    def name(self) -> str:
        """``shard 3 (NICs 0-7,12)``: how messages name it."""
        return f"shard {self.index} (NICs {describe_nics(self.nics)})"


def plan_shards(nics: np.ndarray, nic_bytes: np.ndarray, shards: int) -> list[Shard]:
    """Split ``nics`` into at most ``shards`` sets balanced by ``nic_bytes``.

    Args:
        nics: int64 ``(k,)`` distinct global NIC indices (the files of the run).
        nic_bytes: int64 ``(n_nics,)`` predicted bytes per NIC (indexed by global NIC).
        shards: the number of sets wanted (>= 1); fewer when there are fewer NICs.

    Returns:
        Non-empty shards, numbered 0.. in order of their first NIC; every NIC of ``nics`` is in
        exactly one. Deterministic: ties go to the lower NIC, and to the shard with fewer NICs, then the
        lower one (NICs of equal or no bytes are spread evenly).

    Raises:
        InputError: ``shards`` < 1.
    """
    if shards < 1:
        raise InputError(f"shards: got {shards}, expected an integer >= 1")
    nics = np.unique(np.asarray(nics, np.int64))
    size = np.asarray(nic_bytes, np.int64)[nics] if nics.size else np.zeros(0, np.int64)
    m = min(shards, int(nics.size))
    order = np.lexsort((nics, -size))            # bytes descending, then NIC ascending
    heap = [(0, 0, j) for j in range(m)]       # (bytes, NICs, shard): ties go to fewer NICs
    members: list[list[int]] = [[] for _ in range(m)]
    totals = [0] * m
    for i in order.tolist():
        load, count, j = heapq.heappop(heap)
        members[j].append(int(nics[i]))
        totals[j] = load + int(size[i])
        heapq.heappush(heap, (totals[j], count + 1, j))
    sets = sorted((sorted(ms), t) for ms, t in zip(members, totals) if ms)
    return [Shard(k, tuple(ms), t) for k, (ms, t) in enumerate(sets)]


def describe_nics(nics) -> str:
    """``(0, 1, 2, 3, 8)`` → ``"0-3,8"`` (the ``--nics`` syntax)."""
    out, run = [], []
    for n in sorted(int(x) for x in nics):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ",".join(out)
