"""Direct AllToAll (NCCL ``ncclAllToAll`` as grouped send/receive): rank ``i`` sends chunk ``j`` of
its buffer to rank ``j`` at step ``(j-i) mod N``; per rank ``(N-1)/N·S``, closed form ``(N-1)S``.
No hop waits for another."""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.algorithms.base import Algorithm, register
from tokenpcap.collectives.hops import hop_table, ring_chunk_bytes
from tokenpcap.collectives.layout import RankLayout

__all__ = ["Direct"]


@register
class Direct(Algorithm):
    name = "direct"
    runs = frozenset({"AllToAll"})
    exclusive = True
    source = "NCCL src/collectives.cc ncclAllToAll (grouped ncclSend/ncclRecv)"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        n = len(group)
        g = np.asarray(group, dtype=np.int64)
        c = ring_chunk_bytes(s, n, e)
        i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        mask = i != j
        i, j = i[mask], j[mask]
        return hop_table((j - i) % n, g[i], g[j], j, c[j])

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        return len(group) if len(group) > 1 else 0    # chunk j of every rank's buffer to rank j

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        return (len(group) - 1) * s

    def predecessors(self, h: np.ndarray) -> list[list[int]]:
        return [[] for _ in range(len(h))]
