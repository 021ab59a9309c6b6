"""Bytes each rank sends in one collective, per algorithm, split into NIC and NVLink (one place).

The plan (stage 3) and the collectives stage (stage 4) both use this module so that their totals
agree to the byte. A collective on a group of ``N`` ranks with buffer size ``S`` bytes (nccl-tests
convention: the AllReduce buffer; the *total* buffer for ReduceScatter, AllGather and AllToAll;
the message for SendRecv and Broadcast) becomes a table of hops (:data:`HOP_DTYPE`): one row per
point-to-point transfer ``src → dst`` of ``bytes`` at algorithm ``step``. A hop between ranks on
different nodes goes over the sender's NIC, between ranks of one node over NVLink.

Algorithms (``algorithm`` argument; NCCL uses trees only for AllReduce, so the others fall back to
ring, direct or P2P whatever is asked, see :func:`effective_algorithm`):

* ``ring`` (Patarasuk & Yuan 2009; NCCL): ``S`` is cut into ``N`` chunks of whole elements
  (:func:`ring_chunk_bytes`). Rank ``i`` sends to ``i+1 mod N``. ReduceScatter: ``N-1`` steps, in
  step ``k`` rank ``i`` sends chunk ``(i-1-k) mod N`` and ends owning chunk ``i``. AllGather:
  ``N-1`` steps, chunk ``(i-k) mod N``. AllReduce: ReduceScatter then AllGather (``2(N-1)``
  steps); per rank ``2(N-1)/N·S`` when ``S`` divides into ``N`` equal chunks. Broadcast: pipeline
  along the ring from ``group[0]``, every rank but the last sends ``S``.
* ``tree`` (NCCL double binary tree, Sanders, Speck & Träff 2009): ranks of one node form a chain
  whose first rank joins an inter-node binary tree of the nodes; a second tree is the mirror
  (even node count) or a shift by one (odd). Each tree carries half of ``S``: reduce up (every
  non-root sends its half once), broadcast down (every rank sends its half to each child).
* ``hierarchical`` (intra-node ReduceScatter, inter-node AllReduce among the ranks with the same
  local index, intra-node AllGather; Jia et al. 2018, "Highly Scalable Deep Learning Training
  System with Mixed-Precision"): needs the same number of group ranks on every node, else ring.
* ``direct`` AllToAll: rank ``i`` sends chunk ``j`` of its buffer to rank ``j`` (``(N-1)/N·S``).
* ``p2p`` SendRecv: ``group = (src, dst)``, ``src`` sends ``S``.

nccl-tests "bus bandwidth" factors (:func:`bus_bandwidth_factor`): ``2(n-1)/n`` AllReduce,
``(n-1)/n`` AllGather / ReduceScatter / AllToAll, ``1`` SendRecv / Broadcast
(nccl-tests ``doc/PERFORMANCE.md``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple, Protocol

import numpy as np

from tokenpcap.collectives.layout import RankLayout

__all__ = [
    "HOP_DTYPE",
    "CallLike",
    "CallShape",
    "ALGORITHMS",
    "RankBytes",
    "ring_chunk_bytes",
    "effective_algorithm",
    "bus_bandwidth_factor",
    "hops",
    "per_rank_bytes",
    "total_traffic_bytes",
    "nic_hop_sizes",
    "btree_parents",
]

#: One row per point-to-point transfer of a collective. ``src``/``dst`` are global ranks,
#: ``chunk`` the ring chunk (or tree index 0/1, or AllToAll destination position), ``bytes`` >= 0.
HOP_DTYPE = np.dtype([("step", "<i4"), ("src", "<i4"), ("dst", "<i4"), ("chunk", "<i4"),
                      ("bytes", "<i8")])

ALGORITHMS = ("ring", "tree", "hierarchical", "direct", "p2p")


class CallLike(Protocol):
    collective: str
    group: tuple[int, ...]
    message_bytes: int
    elem_bytes: int


@dataclass(frozen=True)
class CallShape:
    """The minimal :class:`CallLike`: what a collective's byte accounting depends on (hashable,
    so results can be cached per shape). ``message_bytes`` is ``S`` in bytes, ``elem_bytes`` the
    element size in bytes."""

    collective: str
    group: tuple[int, ...]
    message_bytes: int
    elem_bytes: int


class RankBytes(NamedTuple):
    """Bytes each rank of a group sends, aligned with ``group``: int64 arrays of shape ``(N,)``."""

    nic_bytes: np.ndarray
    nvlink_bytes: np.ndarray


def ring_chunk_bytes(message_bytes: int, n: int, elem_bytes: int) -> np.ndarray:
    """Split ``S`` bytes into ``n`` chunks of whole elements: int64 ``(n,)`` summing to ``S``.

    ``S // elem_bytes`` elements are dealt as evenly as possible, the first ``elements % n``
    chunks one element larger; bytes that do not fill a whole element go to the last chunk.

    Raises:
        ValueError: ``n < 1``, ``elem_bytes < 1`` or ``S < 0``.
    """
    if n < 1 or elem_bytes < 1 or message_bytes < 0:
        raise ValueError(f"ring_chunk_bytes({message_bytes}, {n}, {elem_bytes})")
    elems = message_bytes // elem_bytes
    out = np.full(n, elems // n, dtype=np.int64)
    out[: elems % n] += 1
    out *= elem_bytes
    out[-1] += message_bytes - elems * elem_bytes
    return out


def effective_algorithm(collective: str, algorithm: str) -> str:
    """The algorithm that actually runs: trees and hierarchical only for AllReduce (as NCCL)."""
    if collective == "SendRecv":
        return "p2p"
    if collective == "AllToAll":
        return "direct"
    if collective == "AllReduce" and algorithm in ("ring", "tree", "hierarchical"):
        return algorithm
    return "ring"


def bus_bandwidth_factor(collective: str, n: int) -> Fraction:
    """nccl-tests bus bandwidth factor: busbw = algbw * factor (``doc/PERFORMANCE.md``)."""
    if collective == "AllReduce":
        return Fraction(2 * (n - 1), n)
    if collective in ("ReduceScatter", "AllGather", "AllToAll"):
        return Fraction(n - 1, n)
    return Fraction(1)


def _ring_hops(collective: str, group: tuple[int, ...], s: int, e: int) -> np.ndarray:
    n = len(group)
    g = np.asarray(group, dtype=np.int64)
    if n == 1:
        return np.zeros(0, HOP_DTYPE)
    c = ring_chunk_bytes(s, n, e)
    i = np.arange(n)
    if collective == "Broadcast":
        k = np.arange(n - 1)
        return _table(k, g[k], g[k + 1], np.zeros(n - 1, np.int64), np.full(n - 1, s))
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
    return _table(steps.ravel(), src.ravel(), dst.ravel(), chunk.ravel(), c[chunk.ravel()])


def _table(step, src, dst, chunk, nbytes) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.empty(len(step), HOP_DTYPE)
    out["step"], out["src"], out["dst"], out["chunk"], out["bytes"] = step, src, dst, chunk, nbytes
    return out


def btree_parents(n: int, tree: int = 0) -> np.ndarray:
    """Parent of each of ``n`` positions in NCCL's double binary tree (``-1`` at the root).

    Tree 0: position ``r`` with lowest set bit ``b`` has parent ``(r ^ b) | (b << 1)``, or ``r ^ b``
    when that is ``>= n``; position 0 is the root (in-order binary tree, leaves at odd positions).
    Tree 1 is tree 0 mirrored (``r -> n-1-r``) when ``n`` is even, shifted by one when odd, so that
    most leaves of one tree are inner nodes of the other. Returns int64 ``(n,)``.
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


def _nodes_in_order(group: tuple[int, ...], layout: RankLayout) -> list[list[int]]:
    by_node: dict[int, list[int]] = {}
    for r in group:
        by_node.setdefault(r // layout.gpus_per_node, []).append(r)
    return list(by_node.values())


def _tree_hops(group: tuple[int, ...], s: int, e: int, layout: RankLayout) -> np.ndarray:
    nodes = _nodes_in_order(group, layout)
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
    return _table(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4])


def _hierarchical_hops(group: tuple[int, ...], s: int, e: int, layout: RankLayout) -> np.ndarray:
    nodes = _nodes_in_order(group, layout)
    k = len(nodes[0])
    if any(len(r) != k for r in nodes):
        return _ring_hops("AllReduce", group, s, e)
    m = len(nodes)
    c = ring_chunk_bytes(s, k, e)
    parts = []
    for ranks in nodes:                                    # intra-node ReduceScatter
        parts.append(_ring_hops("ReduceScatter", tuple(ranks), s, e))
    for j in range(k):                                     # inter-node AllReduce of chunk j
        h = _ring_hops("AllReduce", tuple(r[j] for r in nodes), int(c[j]), e)
        h["step"] += k - 1
        h["chunk"] = j
        parts.append(h)
    for ranks in nodes:                                    # intra-node AllGather
        h = _ring_hops("AllGather", tuple(ranks), s, e)
        h["step"] += (k - 1) + 2 * (m - 1)
        parts.append(h)
    return np.concatenate(parts) if parts else np.zeros(0, HOP_DTYPE)


def _direct_alltoall(group: tuple[int, ...], s: int, e: int) -> np.ndarray:
    n = len(group)
    g = np.asarray(group, dtype=np.int64)
    c = ring_chunk_bytes(s, n, e)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    mask = i != j
    i, j = i[mask], j[mask]
    return _table((j - i) % n, g[i], g[j], j, c[j])


@functools.lru_cache(maxsize=4096)
def _hops_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                 layout: RankLayout) -> np.ndarray:
    alg = effective_algorithm(collective, algorithm)
    if alg == "p2p":
        if len(group) != 2:
            raise ValueError(f"SendRecv needs a group (src, dst), got {group}")
        out = _table(np.zeros(1), np.array([group[0]]), np.array([group[1]]), np.zeros(1),
                     np.array([s]))
    elif alg == "direct":
        out = _direct_alltoall(group, s, e)
    elif alg == "tree":
        out = _tree_hops(group, s, e, layout)
    elif alg == "hierarchical":
        out = _hierarchical_hops(group, s, e, layout)
    else:
        out = _ring_hops(collective, group, s, e)
    out.setflags(write=False)
    return out


def hops(call: CallLike, algorithm: str, layout: RankLayout) -> np.ndarray:
    """Point-to-point transfers of one collective call: :data:`HOP_DTYPE` array ``(n_hops,)``.

    ``algorithm`` is the scenario's choice; :func:`effective_algorithm` says what runs. The
    returned array is shared (cached) and read-only.

    Raises:
        ValueError: unknown collective or algorithm, or a SendRecv group that is not a pair.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r}, expected one of {', '.join(ALGORITHMS)}")
    if call.collective not in ("AllReduce", "ReduceScatter", "AllGather", "AllToAll",
                               "SendRecv", "Broadcast"):
        raise ValueError(f"collective {call.collective!r}")
    return _hops_cached(call.collective, tuple(call.group), int(call.message_bytes),
                        int(call.elem_bytes), algorithm, layout)


@functools.lru_cache(maxsize=4096)
def _per_rank_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                     layout: RankLayout) -> RankBytes:
    h = _hops_cached(collective, group, s, e, algorithm, layout)
    pos = {r: i for i, r in enumerate(group)}
    src_pos = np.fromiter((pos[int(r)] for r in h["src"]), dtype=np.int64, count=len(h))
    cross = layout.node_array(h["src"]) != layout.node_array(h["dst"])
    n = len(group)
    nic = np.zeros(n, dtype=np.int64)
    nvl = np.zeros(n, dtype=np.int64)
    np.add.at(nic, src_pos[cross], h["bytes"][cross])
    np.add.at(nvl, src_pos[~cross], h["bytes"][~cross])
    nic.setflags(write=False)
    nvl.setflags(write=False)
    return RankBytes(nic, nvl)


def per_rank_bytes(call: CallLike, algorithm: str, layout: RankLayout) -> RankBytes:
    """Bytes each rank of ``call.group`` sends on its NIC and on NVLink (int64 ``(N,)`` each,
    aligned with ``call.group``), summed over :func:`hops`. Arrays are cached and read-only.

    Raises:
        ValueError: as :func:`hops`.
    """
    hops(call, algorithm, layout)   # validates
    return _per_rank_cached(call.collective, tuple(call.group), int(call.message_bytes),
                            int(call.elem_bytes), algorithm, layout)


@functools.lru_cache(maxsize=4096)
def _nic_sizes_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                      layout: RankLayout) -> tuple[tuple[int, int], ...]:
    h = _hops_cached(collective, group, s, e, algorithm, layout)
    cross = layout.node_array(h["src"]) != layout.node_array(h["dst"])
    sizes, counts = np.unique(h["bytes"][cross], return_counts=True)
    return tuple((int(a), int(b)) for a, b in zip(sizes, counts))


def nic_hop_sizes(call: CallLike, algorithm: str, layout: RankLayout) -> tuple[tuple[int, int], ...]:
    """Sizes of the hops of one call that cross nodes (go over a NIC): ``((bytes, hops), ...)``.

    Raises:
        ValueError: as :func:`hops`.
    """
    hops(call, algorithm, layout)
    return _nic_sizes_cached(call.collective, tuple(call.group), int(call.message_bytes),
                             int(call.elem_bytes), algorithm, layout)


def total_traffic_bytes(collective: str, algorithm: str, message_bytes: int,
                        group: tuple[int, ...], layout: RankLayout) -> int:
    """Closed-form bytes all ranks of a group send together in one collective (NIC + NVLink).

    ring/tree AllReduce ``2(N-1)S``; ReduceScatter, AllGather, AllToAll, Broadcast ``(N-1)S``;
    SendRecv ``S``; hierarchical AllReduce over ``M`` nodes of ``k`` ranks
    ``2M(k-1)S + 2(M-1)S`` (intra RS and AG on every node, one inter-node AllReduce per chunk).
    Independent of how ``S`` is chunked; a check on :func:`per_rank_bytes`.
    """
    n, s = len(group), message_bytes
    alg = effective_algorithm(collective, algorithm)
    if alg == "p2p":
        return s
    if collective != "AllReduce":
        return (n - 1) * s
    if alg == "hierarchical":
        nodes = _nodes_in_order(group, layout)
        k = len(nodes[0])
        if all(len(r) == k for r in nodes):
            m = len(nodes)
            return 2 * m * (k - 1) * s + 2 * (m - 1) * s
    return 2 * (n - 1) * s
