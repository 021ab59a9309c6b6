"""What every collective algorithm shares: the hop table, the call shape, chunking, node groups.

A collective on a group of ``N`` ranks with buffer size ``S`` bytes (nccl-tests convention: the
AllReduce buffer; the *total* buffer for ReduceScatter, AllGather and AllToAll; the message for
SendRecv and Broadcast) becomes a table of hops (:data:`HOP_DTYPE`): one row per point-to-point
transfer ``src → dst`` of ``bytes`` at algorithm ``step``. A hop between ranks on different
nodes goes over the sender's NIC, between ranks of one node over NVLink.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.collectives.layout import RankLayout

__all__ = ["HOP_DTYPE", "COLLECTIVE_NAMES", "CallLike", "CallShape", "ring_chunk_bytes",
           "hop_table", "group_positions", "nodes_in_order", "ranks_per_node", "chunk_starts"]

#: One row per point-to-point transfer of a collective. ``src``/``dst`` are global ranks,
#: ``chunk`` the ring chunk (or tree index 0/1, or AllToAll destination position), ``bytes`` >= 0.
HOP_DTYPE = np.dtype([("step", "<i4"), ("src", "<i4"), ("dst", "<i4"), ("chunk", "<i4"),
                      ("bytes", "<i8")])

#: The collectives an algorithm may be asked to run.
COLLECTIVE_NAMES = ("AllReduce", "ReduceScatter", "AllGather", "AllToAll", "SendRecv", "Broadcast")


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


def ring_chunk_bytes(message_bytes: int, n: int, elem_bytes: int) -> np.ndarray:
    """Split ``S`` bytes into ``n`` chunks of whole elements: int64 ``(n,)`` summing to ``S``.

    ``S // elem_bytes`` elements are dealt as evenly as possible, the first ``elements % n``
    chunks one element larger; bytes that do not fill a whole element go to the last chunk.

    Raises:
        InputError: ``n < 1``, ``elem_bytes < 1`` or ``S < 0``.
    """
    if n < 1 or elem_bytes < 1 or message_bytes < 0:
        raise InputError(f"ring_chunk_bytes({message_bytes}, {n}, {elem_bytes})")
    elems = message_bytes // elem_bytes
    out = np.full(n, elems // n, dtype=np.int64)
    out[: elems % n] += 1
    out *= elem_bytes
    out[-1] += message_bytes - elems * elem_bytes
    return out


def chunk_starts(message_bytes: int, n: int, elem_bytes: int) -> np.ndarray:
    """Byte offset of each of the ``n`` chunks of :func:`ring_chunk_bytes`: int64 ``(n,)``."""
    return np.concatenate([[0], np.cumsum(ring_chunk_bytes(message_bytes, n, elem_bytes))[:-1]])


def hop_table(step, src, dst, chunk, nbytes) -> np.ndarray:  # type: ignore[no-untyped-def]
    """A :data:`HOP_DTYPE` array from equal-length columns."""
    out = np.empty(len(step), HOP_DTYPE)
    out["step"], out["src"], out["dst"], out["chunk"], out["bytes"] = step, src, dst, chunk, nbytes
    return out


def group_positions(group: tuple[int, ...], ranks: np.ndarray) -> np.ndarray:
    """The position in ``group`` of each rank of ``ranks`` (every one a member of ``group``):
    int64, the shape of ``ranks``."""
    g = np.asarray(group, np.int64)
    r = np.asarray(ranks, np.int64)
    if r.size == 0:
        return np.zeros(r.shape, np.int64)
    sort = np.argsort(g, kind="stable")
    return sort[np.searchsorted(g, r, sorter=sort)]


def nodes_in_order(group: tuple[int, ...], layout: RankLayout) -> list[list[int]]:
    """The group's ranks per node, nodes in order of first appearance, ranks in group order."""
    by_node: dict[int, list[int]] = {}
    for r in group:
        by_node.setdefault(r // layout.gpus_per_node, []).append(r)
    return list(by_node.values())


def ranks_per_node(group: tuple[int, ...], layout: RankLayout) -> int | None:
    """Ranks of the group on each node when that number is the same on every node, else None."""
    sizes = {len(r) for r in nodes_in_order(group, layout)}
    return sizes.pop() if len(sizes) == 1 else None
