"""NCCL's double binary tree for AllReduce (Sanders, Speck & Träff 2009; NCCL ``runTreeSplit``).

Ranks of one node form a chain whose first rank joins an inter-node binary tree of the nodes; a
second tree is the mirror (even node count) or a shift by one (odd) (:func:`btree_parents`). Each
tree carries half of ``S``: reduce up (step 0: every non-root sends its half once), broadcast down
(step 1: every rank sends its half to each child). Closed form ``2(N-1)S``. A reduce hop waits for
every reduce hop into its sender of the same tree; a broadcast hop for the broadcast hop into its
sender, or at the root for every reduce hop into it.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.algorithms.base import Algorithm, carriers, register
from tokenpcap.collectives.hops import HOP_DTYPE, chunk_starts, hop_table, nodes_in_order, ring_chunk_bytes
from tokenpcap.collectives.layout import RankLayout

__all__ = ["Tree", "btree_parents"]


def btree_parents(n: int, tree: int = 0) -> np.ndarray:
    """Parent of each of ``n`` positions in NCCL's double binary tree (``-1`` at the root).

    Tree 0: position ``r`` with lowest set bit ``b`` has parent ``(r ^ b) | (b << 1)``, or ``r ^ b``
    when that is ``>= n``; position 0 is the root (in-order binary tree, leaves at odd positions).
    Tree 1 is tree 0 mirrored (``r -> n-1-r``) when ``n`` is even, shifted by one when odd, so that
    most leaves of one tree are inner nodes of the other (NCCL ``src/graph/trees.cc``).
    Returns int64 ``(n,)``.
    """
    par0 = np.full(n, -1, dtype=np.int64)
    for r in range(1, n):
        low = r & -r
        up = (r ^ low) | (low << 1)
        par0[r] = up if up < n else r ^ low
    if tree == 0:
        return par0
    out = np.full(n, -1, dtype=np.int64)
    for r in range(n):
        if n % 2 == 0:
            p = par0[n - 1 - r]
            out[r] = -1 if p < 0 else n - 1 - p
        else:
            p = par0[(r - 1) % n]
            out[r] = -1 if p < 0 else (p + 1) % n
    return out


@register
class Tree(Algorithm):
    name = "tree"
    runs = frozenset({"AllReduce"})
    source = "Sanders, Speck & Träff 2009; NCCL src/graph/trees.cc, runTreeSplit"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        nodes = nodes_in_order(group, layout)
        halves = ring_chunk_bytes(s, 2, e)
        rows = []
        for t in (0, 1):
            npar = btree_parents(len(nodes), t)
            for u, ranks in enumerate(nodes):
                parents = [ranks[j - 1] for j in range(1, len(ranks))]
                children = ranks[1:]
                if npar[u] >= 0:
                    parents.insert(0, nodes[int(npar[u])][0])
                    children = [ranks[0]] + children
                for child, parent in zip(children, parents):
                    rows.append((0, child, parent, t, int(halves[t])))    # reduce: child -> parent
                    rows.append((1, parent, child, t, int(halves[t])))    # broadcast: parent -> child
        if not rows:
            return np.zeros(0, HOP_DTYPE)
        a = np.array(rows, dtype=np.int64)
        return hop_table(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4])

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        return 2 if len(group) > 1 else 0             # each tree carries its half whole

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        return 2 * (len(group) - 1) * s

    def predecessors(self, h: np.ndarray) -> list[list[int]]:
        step = h["step"].tolist()
        preds: list[list[int]] = []
        for i, cand in enumerate(carriers(h)):
            if step[i] == 0:
                preds.append([g for g in cand if step[g] == 0])
            else:
                down = [g for g in cand if step[g] == 1]
                preds.append(down if down else [g for g in cand if step[g] == 0])
        return preds

    def chunk_offsets(self, h: np.ndarray, collective: str, group: tuple[int, ...], s: int,
                      e: int, layout: RankLayout) -> np.ndarray:
        return chunk_starts(s, 2, e)[h["chunk"]]
