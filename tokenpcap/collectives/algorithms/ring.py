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

__all__ = ["Ring", "ring_hops"]


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


@register
class Ring(Algorithm):
    name = "ring"
    runs = frozenset({"AllReduce", "ReduceScatter", "AllGather", "Broadcast"})
    source = "Patarasuk & Yuan 2009; NCCL src/device/all_reduce.h runRing"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        return ring_hops(collective, group, s, e)

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        n = len(group)
        if n == 1:
            return 0
        return 1 if collective == "Broadcast" else n   # Broadcast sends S whole at every hop

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        n = len(group)
        return (2 if collective == "AllReduce" else 1) * (n - 1) * s
