"""Bytes each rank sends in one collective, split into NIC and NVLink (one place).

The plan (stage 3) and the transfers the schedule times (:mod:`tokenpcap.collectives.transfers`)
both use this module so that their totals agree to the byte. The algorithms themselves, each with
its hops and closed form, are the registered modules of :mod:`tokenpcap.collectives.algorithms`
(ring, double binary tree, hierarchical, direct AllToAll, point to point); NCCL uses trees and
the hierarchical scheme only for AllReduce, so the others fall back to ring, direct or P2P
whatever is asked (:func:`effective_algorithm`). Hop tables are :data:`HOP_DTYPE`.

nccl-tests "bus bandwidth" factors (:func:`bus_bandwidth_factor`): ``2(n-1)/n`` AllReduce,
``(n-1)/n`` AllGather / ReduceScatter / AllToAll, ``1`` SendRecv / Broadcast
(nccl-tests ``doc/PERFORMANCE.md``).
"""
from __future__ import annotations

import functools
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.collectives.algorithms import ALGORITHMS, effective_algorithm
from tokenpcap.collectives.algorithms.tree import btree_parents
from tokenpcap.collectives.hops import (COLLECTIVE_NAMES, HOP_DTYPE, CallLike, CallShape,
                                        group_positions, ring_chunk_bytes)
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
    "check_call",
    "hops",
    "nonempty_hops",
    "per_rank_bytes",
    "total_traffic_bytes",
    "nic_hop_sizes",
    "btree_parents",
]


class RankBytes(NamedTuple):
    """Bytes each rank of a group sends, aligned with ``group``: int64 arrays of shape ``(N,)``."""

    nic_bytes: np.ndarray
    nvlink_bytes: np.ndarray


def bus_bandwidth_factor(collective: str, n: int) -> Fraction:
    """nccl-tests bus bandwidth factor: busbw = algbw * factor (``doc/PERFORMANCE.md``)."""
    if collective == "AllReduce":
        return Fraction(2 * (n - 1), n)
    if collective in ("ReduceScatter", "AllGather", "AllToAll"):
        return Fraction(n - 1, n)
    return Fraction(1)


@functools.lru_cache(maxsize=4096)
def _hops_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                 layout: RankLayout) -> np.ndarray:
    alg = effective_algorithm(collective, algorithm)
    out = ALGORITHMS[alg].hops(collective, group, s, e, layout)
    out.setflags(write=False)
    return out


def check_call(call: CallLike, algorithm: str) -> None:
    """Check a call's collective and the scenario's algorithm by name.

    Raises:
        InputError: an unknown algorithm or collective.
    """
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm {algorithm!r}, expected one of {', '.join(ALGORITHMS)}")
    if call.collective not in COLLECTIVE_NAMES:
        raise InputError(f"collective {call.collective!r}")


def hops(call: CallLike, algorithm: str, layout: RankLayout) -> np.ndarray:
    """Point-to-point transfers of one collective call: :data:`HOP_DTYPE` array ``(n_hops,)``.

    ``algorithm`` is the scenario's choice; :func:`effective_algorithm` says what runs. The
    returned array is shared (cached) and read-only.

    Raises:
        InputError: unknown collective or algorithm, or a SendRecv group that is not a pair.
    """
    check_call(call, algorithm)
    return _hops_cached(call.collective, tuple(call.group), int(call.message_bytes),
                        int(call.elem_bytes), algorithm, layout)


@functools.lru_cache(maxsize=4096)
def _nonempty_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                     layout: RankLayout) -> tuple[np.ndarray, np.ndarray | None]:
    """The table and its rows in hops(); None for the rows when it is all of hops()."""
    got = ALGORITHMS[effective_algorithm(collective, algorithm)].nonempty_hops(
        collective, group, s, e, layout)
    if got is None:
        h = _hops_cached(collective, group, s, e, algorithm, layout)
        idx = np.flatnonzero(h["bytes"] > 0)
        got = (h, None) if idx.size == len(h) else (h[idx], idx)
    for x in got:
        if x is not None:
            x.setflags(write=False)
    return got


def nonempty_hops(call: CallLike, algorithm: str, layout: RankLayout
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The hops of :func:`hops` that carry bytes and their rows there: :data:`HOP_DTYPE`
    ``(k,)`` and int64 ``(k,)`` (ascending), shared (cached) and read-only. What every sum of
    bytes reads: a ring call of fewer elements than ranks makes them without the empty hops
    (:meth:`~tokenpcap.collectives.algorithms.Algorithm.nonempty_hops`), so a 4-byte AllReduce
    over every rank of a 16,384-GPU job is 32,766 rows, not 536,838,144.

    Raises:
        InputError: as :func:`hops`.
    """
    check_call(call, algorithm)
    table, rows = _nonempty_cached(call.collective, tuple(call.group), int(call.message_bytes),
                                   int(call.elem_bytes), algorithm, layout)
    return table, np.arange(len(table), dtype=np.int64) if rows is None else rows


@functools.lru_cache(maxsize=4096)
def _per_rank_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                     layout: RankLayout) -> RankBytes:
    h = _nonempty_cached(collective, group, s, e, algorithm, layout)[0]
    src_pos = group_positions(group, h["src"])
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
        InputError: as :func:`hops`.
    """
    check_call(call, algorithm)
    return _per_rank_cached(call.collective, tuple(call.group), int(call.message_bytes),
                            int(call.elem_bytes), algorithm, layout)


@functools.lru_cache(maxsize=4096)
def _nic_sizes_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                      layout: RankLayout) -> tuple[tuple[int, int], ...]:
    h = _nonempty_cached(collective, group, s, e, algorithm, layout)[0]
    cross = layout.node_array(h["src"]) != layout.node_array(h["dst"])
    sizes, counts = np.unique(h["bytes"][cross], return_counts=True)
    return tuple((int(a), int(b)) for a, b in zip(sizes, counts))


def nic_hop_sizes(call: CallLike, algorithm: str, layout: RankLayout) -> tuple[tuple[int, int], ...]:
    """Sizes of the hops of one call that cross nodes (go over a NIC) and carry bytes:
    ``((bytes, hops), ...)``, sizes ascending (a hop of 0 bytes sends no message).

    Raises:
        InputError: as :func:`hops`.
    """
    check_call(call, algorithm)
    return _nic_sizes_cached(call.collective, tuple(call.group), int(call.message_bytes),
                             int(call.elem_bytes), algorithm, layout)


def total_traffic_bytes(collective: str, algorithm: str, message_bytes: int,
                        group: tuple[int, ...], layout: RankLayout) -> int:
    """Closed-form bytes all ranks of a group send together in one collective (NIC + NVLink).

    Each algorithm's :meth:`~tokenpcap.collectives.algorithms.Algorithm.total_bytes` (ring/tree
    AllReduce ``2(N-1)S``; ReduceScatter, AllGather, AllToAll, Broadcast ``(N-1)S``; SendRecv
    ``S``; hierarchical AllReduce over ``M`` nodes of ``k`` ranks ``2M(k-1)S + 2(M-1)S``).
    Independent of how ``S`` is chunked; a check on :func:`per_rank_bytes`.
    """
    alg = effective_algorithm(collective, algorithm)
    return ALGORITHMS[alg].total_bytes(collective, group, message_bytes, layout)
