"""Hierarchical AllReduce (Jia et al. 2018, "Highly Scalable Deep Learning Training System with
Mixed-Precision"): intra-node ReduceScatter, inter-node AllReduce among the ranks with the same
local index, intra-node AllGather, all as rings.

Needs the same number ``k`` of group ranks on every one of the ``M`` nodes, else it runs as a
ring. Closed form ``2M(k-1)S + 2(M-1)S`` (intra RS and AG on every node, one inter-node
AllReduce per chunk). The inter-node phase does not say which sub-chunk of its chunk a hop
carries, so its byte offset is the whole chunk's (an enclosing range).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.algorithms.base import Algorithm, register
from tokenpcap.collectives.algorithms.ring import ring_hops
from tokenpcap.collectives.hops import HOP_DTYPE, chunk_starts, nodes_in_order, ranks_per_node, ring_chunk_bytes
from tokenpcap.collectives.layout import RankLayout

__all__ = ["Hierarchical"]


@register
class Hierarchical(Algorithm):
    name = "hierarchical"
    runs = frozenset({"AllReduce"})
    source = "Jia et al. 2018, Sec. 4.2"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        nodes = nodes_in_order(group, layout)
        k = len(nodes[0])
        if any(len(r) != k for r in nodes):
            return ring_hops("AllReduce", group, s, e)
        m = len(nodes)
        c = ring_chunk_bytes(s, k, e)
        parts = []
        for ranks in nodes:                                    # intra-node ReduceScatter
            parts.append(ring_hops("ReduceScatter", tuple(ranks), s, e))
        for j in range(k):                                     # inter-node AllReduce of chunk j
            h = ring_hops("AllReduce", tuple(r[j] for r in nodes), int(c[j]), e)
            h["step"] += k - 1
            h["chunk"] = j
            parts.append(h)
        for ranks in nodes:                                    # intra-node AllGather
            h = ring_hops("AllGather", tuple(ranks), s, e)
            h["step"] += (k - 1) + 2 * (m - 1)
            parts.append(h)
        return np.concatenate(parts) if parts else np.zeros(0, HOP_DTYPE)

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        # k intra-node chunks, each cut into M by the inter-node ring: k * M = N sub-chunks,
        # the smallest of (elements // k) // M = elements // N elements; N ring chunks otherwise
        return len(group) if len(group) > 1 else 0

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        nodes = nodes_in_order(group, layout)
        k = len(nodes[0])
        if all(len(r) == k for r in nodes):
            m = len(nodes)
            return 2 * m * (k - 1) * s + 2 * (m - 1) * s
        return 2 * (len(group) - 1) * s

    def chunk_offsets(self, h: np.ndarray, collective: str, group: tuple[int, ...], s: int,
                      e: int, layout: RankLayout) -> np.ndarray:
        k = ranks_per_node(group, layout)
        if k is None or len(h) == 0:
            return super().chunk_offsets(h, collective, group, s, e, layout)
        return chunk_starts(s, k, e)[h["chunk"] % k]
