"""Ring (Patarasuk & Yuan 2009; NCCL ``runRing``): the default, and every non-AllReduce collective
a tree or hierarchical scenario makes.

``S`` is cut into ``N`` chunks of whole elements (:func:`~tokenpcap.collectives.hops.ring_chunk_bytes`).
Rank ``i`` sends to ``i+1 mod N``. ReduceScatter: ``N-1`` steps, in step ``k`` rank ``i`` sends
chunk ``(i-1-k) mod N`` and ends owning chunk ``i``. AllGather: ``N-1`` steps, chunk
``(i-k) mod N``. AllReduce: ReduceScatter then AllGather (``2(N-1)`` steps); per rank
``2(N-1)/N·S`` when ``S`` divides into ``N`` equal chunks. Broadcast: pipeline along the ring
from ``group[0]``, every rank but the last sends ``S``. Closed form: AllReduce ``2(N-1)S``, the
others ``(N-1)S``.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.algorithms.base import Algorithm, register
from tokenpcap.collectives.hops import HOP_DTYPE, hop_table, ring_chunk_bytes
from tokenpcap.collectives.layout import RankLayout

__all__ = ["Ring", "ring_hops", "ring_nonempty_hops"]


def ring_hops(collective: str, group: tuple[int, ...], s: int, e: int) -> np.ndarray:
    """The ring's hops of one call (module docstring): :data:`HOP_DTYPE` ``(n_hops,)``."""
    n = len(group)
    g = np.asarray(group, dtype=np.int64)
    if n == 1:
        return np.zeros(0, HOP_DTYPE)
    c = ring_chunk_bytes(s, n, e)
    i = np.arange(n)
    if collective == "Broadcast":
        k = np.arange(n - 1)
        return hop_table(k, g[k], g[k + 1], np.zeros(n - 1, np.int64), np.full(n - 1, s))
    if collective == "ReduceScatter":
        k = np.arange(n - 1)[:, None]
        chunk = (i[None, :] - 1 - k) % n
    elif collective == "AllGather":
        k = np.arange(n - 1)[:, None]
        chunk = (i[None, :] - k) % n
    else:  # AllReduce: ReduceScatter phase (chunk i-k), then AllGather phase (chunk i+1-k')
        k = np.arange(2 * (n - 1))[:, None]
        chunk = np.where(k < n - 1, i[None, :] - k, i[None, :] + 1 - (k - (n - 1))) % n
    steps = np.broadcast_to(k, chunk.shape)
    src = np.broadcast_to(g[None, :], chunk.shape)
    dst = np.broadcast_to(g[(i + 1) % n][None, :], chunk.shape)
    return hop_table(steps.ravel(), src.ravel(), dst.ravel(), chunk.ravel(), c[chunk.ravel()])


def ring_nonempty_hops(collective: str, group: tuple[int, ...], s: int, e: int
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """The hops of :func:`ring_hops` that carry bytes and their rows there, made from the chunks
    that hold data alone: ``(HOP_DTYPE (k,), int64 (k,))``, rows ascending; None when every
    chunk holds data (every hop carries bytes: :func:`ring_hops` itself).

    A chunk is one of ``N``, so a message of fewer than ``N`` elements leaves chunks empty and
    most of the ``N (N-1)`` (``2 N (N-1)``) hops with 0 bytes: a 4-byte AllReduce over 16,384
    ranks has 536,838,144 hops of which 32,766 carry its element. Chunk ``j`` is sent at step
    ``k`` by the rank at position ``i``: ReduceScatter ``i = j + 1 + k``, AllGather ``i = j + k``,
    AllReduce ``j + k`` in its first ``N - 1`` steps and ``j - 1 + (k - (N - 1))`` after (mod
    ``N``; :func:`ring_hops`' chunk of rank ``i`` at step ``k`` solved for ``i``); its row in
    :func:`ring_hops` is ``k N + i``.
    """
    n = len(group)
    if n == 1 or collective == "Broadcast":
        return None
    c = ring_chunk_bytes(s, n, e)
    full = np.flatnonzero(c)
    if full.size == n:
        return None
    steps = 2 * (n - 1) if collective == "AllReduce" else n - 1
    k = np.arange(steps, dtype=np.int64)[None, :]
    j = full.astype(np.int64)[:, None]
    if collective == "ReduceScatter":
        i = j + 1 + k
    elif collective == "AllGather":
        i = j + k
    else:
        i = np.where(k < n - 1, j + k, j - 1 + (k - (n - 1)))
    row = (k * n + i % n).ravel()
    order = np.argsort(row, kind="stable")
    row = row[order]
    chunk = np.broadcast_to(j, (j.size, steps)).ravel()[order]
    g = np.asarray(group, dtype=np.int64)
    pos = row % n
    return hop_table(row // n, g[pos], g[(pos + 1) % n], chunk, c[chunk]), row


@register
class Ring(Algorithm):
    name = "ring"
    runs = frozenset({"AllReduce", "ReduceScatter", "AllGather", "Broadcast"})
    source = "Patarasuk & Yuan 2009; NCCL src/device/all_reduce.h runRing"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        return ring_hops(collective, group, s, e)

    def nonempty_hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
                      layout: RankLayout) -> tuple[np.ndarray, np.ndarray] | None:
        return ring_nonempty_hops(collective, group, s, e)

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        n = len(group)
        if n == 1:
            return 0
        return 1 if collective == "Broadcast" else n   # Broadcast sends S whole at every hop

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        n = len(group)
        return (2 if collective == "AllReduce" else 1) * (n - 1) * s
