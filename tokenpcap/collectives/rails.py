"""Which NIC carries each channel of a collective between nodes (NCCL's rings and trees on rails).

NCCL builds one ring (and one tree) channel per NIC a node's GPUs can use: its graph search
(``src/graph/search.cc``) lays each channel out as ``NET n -> GPU a -> GPU b -> .. -> GPU x ->
NET n``, so channel ``c`` enters and leaves the node through its own NIC, and
``ncclTopoPostset`` (``src/graph/connect.cc``) then doubles the channels ("Duplication should
be complete now": ``nChannels * 2``, at most ``MAXCHANNELS`` = 64, ``src/include/device.h``).
On a rail-optimised node (one NIC per GPU) the inter-node traffic of a collective whose group
holds ``k`` GPUs of every node is therefore spread evenly over those GPUs' ``k`` NICs. A ring
AllReduce of ``S`` bytes over ``N`` ranks sends ``2(N-1)/N·S`` out of every node, so each of
the ``k`` NICs carries ``2(N-1)/N·S/k`` when the channel count is a multiple of ``k``.

The model keeps each hop of :func:`tokenpcap.collectives.traffic.hops` where the algorithm puts
it (its source and destination rank: the ring position), and sends the bytes of channel ``c``
of a hop between nodes through NIC ``c mod g`` of the group's NICs on the sending node and into
NIC ``c mod g'`` of the group's NICs on the receiving node, where a node's *group NICs* are the
distinct NICs of the group's GPUs on that node in ascending order (``g`` of them). The GPU that
holds the data reaches a NIC other than its own over NVLink, as NCCL's PXN does (``PATH_PXN``,
``src/graph/paths.cc``). This applies to the ``ring`` and ``tree`` algorithms (every collective
that runs as a ring, :func:`tokenpcap.collectives.traffic.effective_algorithm`). The other
algorithms send on the sender's own NIC: ``hierarchical`` already runs its inter-node phase
among the GPUs of one local index (one rail per sub-ring), ``direct`` AllToAll and ``p2p``
SendRecv are point-to-point connections of one GPU pair.

The channel count NCCL picks on a cluster, ``min(64, 2 * nics_per_node)``, is the default of
``collectives.channels`` (:func:`tokenpcap.config.profiles.default_channels`).
"""
from __future__ import annotations

import functools

import numpy as np

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.hops import group_positions
from tokenpcap.collectives.traffic import (CallLike, CallShape, check_call, effective_algorithm,
                                           nonempty_hops, ring_chunk_bytes)

__all__ = ["RAIL_ALGORITHMS", "group_nics", "hop_channel_nics", "rank_nic_bytes"]

#: Algorithms whose channels cross nodes on the group's NICs in turn (module docstring).
RAIL_ALGORITHMS = ("ring", "tree")
@functools.lru_cache(maxsize=4096)
def group_nics(group: tuple[int, ...], layout: RankLayout) -> dict[int, tuple[int, ...]]:
    """Per node holding members of ``group``: the distinct global NIC indices of those members,
    ascending (the NICs the group's channels cross that node on)."""
    out: dict[int, set[int]] = {}
    nic = layout.nic_array(np.asarray(group, dtype=np.int64)).tolist()
    for r, n in zip(group, nic):
        out.setdefault(r // layout.gpus_per_node, set()).add(n)
    return {node: tuple(sorted(v)) for node, v in out.items()}


def hop_channel_nics(collective: str, algorithm: str, group: tuple[int, ...], src: int, dst: int,
                     channel: int, layout: RankLayout) -> tuple[int, int]:
    """``(sending NIC, receiving NIC)``, global indices, of channel ``channel`` of a hop from rank
    ``src`` to rank ``dst`` on different nodes (module docstring)."""
    if effective_algorithm(collective, algorithm) not in RAIL_ALGORITHMS:
        return layout.nic(src), layout.nic(dst)
    rails = group_nics(tuple(group), layout)
    a = rails[src // layout.gpus_per_node]
    b = rails[dst // layout.gpus_per_node]
    return a[channel % len(a)], b[channel % len(b)]


@functools.lru_cache(maxsize=4096)
def _rank_nic_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                     layout: RankLayout, channels: int) -> np.ndarray:
    h = nonempty_hops(CallShape(collective, group, s, e), algorithm, layout)[0]
    npn, gpn = layout.nics_per_node, layout.gpus_per_node
    out = np.zeros((len(group), npn), dtype=np.int64)
    src_node, dst_node = h["src"] // gpn, h["dst"] // gpn
    cross = np.flatnonzero(src_node != dst_node)
    if len(cross):
        src_pos = group_positions(group, h["src"][cross])
        if effective_algorithm(collective, algorithm) in RAIL_ALGORITHMS:
            rails = group_nics(group, layout)
            # hops of one (sender, size) split alike: each distinct pair once, times its hops
            b = h["bytes"][cross].astype(np.int64)
            pairs, first, times = np.unique(src_pos * (int(b.max()) + 1) + b,
                                            return_index=True, return_counts=True)
            parts_of = {int(x): ring_chunk_bytes(int(x), channels, e) for x in np.unique(b)}
            for p, node, x, k in zip(src_pos[first].tolist(), src_node[cross][first].tolist(),
                                     b[first].tolist(), times.tolist()):
                r = rails[node]
                local = np.asarray(r, np.int64) % npn
                per = np.bincount(np.arange(channels) % len(r), weights=parts_of[x],
                                  minlength=len(r)).astype(np.int64)
                out[p, local] += per * k
        else:
            local = layout.nic_array(h["src"][cross]) % npn
            np.add.at(out, (src_pos, local), h["bytes"][cross])
    out.setflags(write=False)
    return out


def rank_nic_bytes(call: CallLike, algorithm: str, layout: RankLayout,
                   channels: int) -> np.ndarray:
    """Bytes each rank of ``call.group`` sends between nodes through each NIC of its node:
    int64 ``(N, nics_per_node)`` (row ``i``: ``group[i]``; column: the local NIC index on that
    rank's node), read-only and cached. Rows sum to
    :func:`tokenpcap.collectives.traffic.per_rank_bytes` ``.nic_bytes``; with a ``ring`` or
    ``tree`` algorithm channel ``c`` of every hop goes through the ``c mod g``-th of the group's
    NICs on the sending node (module docstring), else through the sender's own NIC.

    Raises:
        ValueError: ``channels < 1``; as :func:`tokenpcap.collectives.traffic.hops`.
    """
    if channels < 1:
        raise ValueError(f"channels: got {channels}, expected an integer >= 1")
    check_call(call, algorithm)
    return _rank_nic_cached(call.collective, tuple(call.group), int(call.message_bytes),
                            int(call.elem_bytes), algorithm, layout, int(channels))
