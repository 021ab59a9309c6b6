"""Stage 4: collective calls → point-to-point transfers in NCCL-like channels and slices.

A :class:`tokenpcap.plan.calls.CollectiveCall` becomes the hops of :func:`tokenpcap.collectives.traffic.hops` (the
one place byte accounting lives, so the capture matches the plan to the byte), and every hop is cut
further as NCCL does:

* **Channels.** NCCL runs a collective on ``collectives.channels`` channels (``NCCL_MIN_NCHANNELS``
  / ``NCCL_MAX_NCHANNELS``); each channel moves its own contiguous part of every chunk over its own
  connection (one RC QP per channel and peer in NCCL's IB transport, ``net_ib``). A hop of ``B``
  bytes is split over the channels in whole elements (:func:`tokenpcap.collectives.traffic.ring_chunk_bytes`);
  a channel part of 0 bytes sends nothing.
* **Slices.** A channel part goes out as RDMA messages of at most ``collectives.slice_bytes``
  (rounded down to whole elements), the last one shorter. NCCL's default for the Simple protocol is
  one slice = ``NCCL_BUFFSIZE`` (4 MiB) / ``NCCL_STEPS`` (8) × ``ALLREDUCE_SLICESTEPS`` (2) =
  1 MiB, the default of ``slice_bytes``.
* **Dependencies** (what a rank must have received before it may forward): a hop from rank ``x``
  carrying chunk ``c`` depends on the hop(s) that last brought chunk ``c`` to ``x``:

  - ring, hierarchical, broadcast (pipelined chain): the hop ``g`` with ``g.dst == x``,
    ``g.chunk == c`` and the largest ``g.step < step`` (for a ring that is the predecessor's hop of
    the previous step: step ``k+1`` of a rank needs step ``k``'s data from its predecessor);
  - double binary tree: a reduce hop (step 0) from ``x`` needs every reduce hop into ``x`` of the
    same tree; a broadcast hop (step 1) needs the broadcast hop into ``x`` of the same tree, or at
    the root every reduce hop into it;
  - direct AllToAll and P2P: none.

  When the hop and its predecessor have the same size (the same chunk moving on: every step of a
  ring, every level of a tree) the dependency is per channel and slice: slice ``j`` of channel
  ``ch`` may go once slice ``j`` of channel ``ch`` of the predecessor has arrived (NCCL's pipeline
  over slices). Otherwise (the phase changes of the hierarchical algorithm) the transfer waits for
  every transfer of the predecessor hop.
* A hop between two GPUs of one node goes over NVLink (``nic == False``): it takes time but never
  reaches a NIC. A hop between nodes leaves and enters on the NICs
  :func:`tokenpcap.collectives.rails.hop_channel_nics` names for its channel (rings and trees:
  channel ``c`` on the ``c mod g``-th of the group's NICs of the node; otherwise the sender's and
  the receiver's own NIC).

``byte_offset`` locates a transfer's bytes in the collective's buffer (the chunk's offset among the
``N`` ring chunks, the tree's half, chunk ``j`` of an AllToAll buffer, plus the channel part and
slice offsets). The inter-node phase of the hierarchical AllReduce does not say which sub-chunk of
its chunk it carries, so there it is the offset of the whole chunk (an enclosing range).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.algorithms import ALGORITHMS
from tokenpcap.collectives.rails import hop_channel_nics
from tokenpcap.collectives.traffic import CallLike, CallShape, effective_algorithm, hops, ring_chunk_bytes

__all__ = ["TRANSFER_DTYPE", "Transfers", "transfers", "slice_elements_bytes"]

#: One row per RDMA message (or NVLink copy) of one collective call. Shape ``(n,)``.
#:
#: ============ ===== =================================================================
#: hop          int32 row of :func:`tokenpcap.collectives.traffic.hops` this transfer belongs to
#: step         int32 algorithm step of the hop
#: src, dst     int32 global ranks
#: chunk        int32 the hop's chunk (ring chunk, tree index, AllToAll destination)
#: channel      int32 NCCL-like channel (the connection index of the QP)
#: slice        int32 slice index inside the channel part (0-based)
#: bytes        int64 payload bytes (> 0)
#: byte_offset  int64 offset of the bytes inside the collective's buffer (module docstring)
#: nic          bool  the hop crosses nodes (on a NIC), else NVLink
#: src_nic      int32 global NIC the bytes leave on (-1 on NVLink)
#: dst_nic      int32 global NIC the bytes arrive on (-1 on NVLink)
#: ============ ===== =================================================================
TRANSFER_DTYPE = np.dtype([
    ("hop", "<i4"), ("step", "<i4"), ("src", "<i4"), ("dst", "<i4"), ("chunk", "<i4"),
    ("channel", "<i4"), ("slice", "<i4"), ("bytes", "<i8"), ("byte_offset", "<i8"),
    ("nic", "?"), ("src_nic", "<i4"), ("dst_nic", "<i4"),
])


@dataclass(frozen=True)
class Transfers:
    """The transfers of one collective call and their dependencies (read-only, cached).

    Attributes:
        table: :data:`TRANSFER_DTYPE` ``(n,)``, ordered by (step, hop, channel, slice).
        deps: per transfer, the indices (into ``table``) of the transfers that must have arrived
            before it may start (tuple of tuples of int).
        dependents: the reverse relation of ``deps``.
        by_src, by_dst: per rank of the group, the transfers it sends / receives.
        rows: ``table`` as tuples of Python ints in TRANSFER_DTYPE field order up to ``nic``
            (for the schedule's per-event code, which must not pay numpy's per-element access).
        nics: per transfer ``(src_nic, dst_nic)`` as Python ints (``(-1, -1)`` on NVLink).
    """

    table: np.ndarray
    deps: tuple[tuple[int, ...], ...]
    dependents: tuple[tuple[int, ...], ...]
    by_src: dict[int, tuple[int, ...]]
    by_dst: dict[int, tuple[int, ...]]
    rows: tuple[tuple, ...] = ()
    nics: tuple[tuple[int, int], ...] = ()

    def __len__(self) -> int:
        return len(self.table)


def slice_elements_bytes(slice_bytes: int, elem_bytes: int) -> int:
    """Largest slice in whole elements: ``max(elem, slice_bytes // elem * elem)`` bytes."""
    return max(elem_bytes, slice_bytes // elem_bytes * elem_bytes)


@functools.lru_cache(maxsize=8192)
def _transfers_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                      layout: RankLayout, channels: int, slice_bytes: int) -> Transfers:
    call = CallShape(collective, group, s, e)
    h = hops(call, algorithm, layout)
    alg = effective_algorithm(collective, algorithm)
    preds = ALGORITHMS[alg].predecessors(h)
    offsets = ALGORITHMS[alg].chunk_offsets(h, collective, group, s, e, layout)
    sl = slice_elements_bytes(slice_bytes, e)
    cross = (layout.node_array(h["src"]) != layout.node_array(h["dst"])).tolist()
    order = np.lexsort((np.arange(len(h)), h["step"])).tolist()   # by step, then hop index
    rows: list[tuple] = []
    index: dict[tuple[int, int, int], int] = {}     # (hop, channel, slice) -> transfer index
    per_hop: dict[int, list[int]] = {}
    hb = h["bytes"].tolist()
    for i in order:
        parts = ring_chunk_bytes(hb[i], channels, e).tolist()
        off = int(offsets[i])
        for ch, part in enumerate(parts):
            j = 0
            while part > 0:
                size = min(sl, part)
                index[(i, ch, j)] = len(rows)
                per_hop.setdefault(i, []).append(len(rows))
                rows.append((i, int(h["step"][i]), int(h["src"][i]), int(h["dst"][i]),
                             int(h["chunk"][i]), ch, j, size, off, cross[i]))
                off += size
                part -= size
                j += 1
    nics = [hop_channel_nics(collective, algorithm, group, r[2], r[3], r[5], layout) if r[9]
            else (-1, -1) for r in rows]
    table = np.array([r + n for r, n in zip(rows, nics)], dtype=TRANSFER_DTYPE) if rows else \
        np.zeros(0, TRANSFER_DTYPE)
    deps: list[tuple[int, ...]] = []
    for t, (i, _, _, _, _, ch, j, _, _, _) in enumerate(rows):
        d: list[int] = []
        for g in preds[i]:
            if hb[g] == hb[i]:
                x = index.get((g, ch, j))
                if x is not None:
                    d.append(x)
            else:
                d.extend(per_hop.get(g, ()))
        deps.append(tuple(d))
    rev: list[list[int]] = [[] for _ in rows]
    for t, d in enumerate(deps):
        for x in d:
            rev[x].append(t)
    by_src: dict[int, list[int]] = {r: [] for r in group}
    by_dst: dict[int, list[int]] = {r: [] for r in group}
    for t, row in enumerate(rows):
        by_src[row[2]].append(t)
        by_dst[row[3]].append(t)
    table.setflags(write=False)
    return Transfers(table, tuple(deps), tuple(tuple(x) for x in rev),
                     {r: tuple(v) for r, v in by_src.items()},
                     {r: tuple(v) for r, v in by_dst.items()}, tuple(rows), tuple(nics))


def transfers(call: CallLike, algorithm: str, layout: RankLayout, channels: int,
              slice_bytes: int) -> Transfers:
    """The transfers of one collective call (module docstring), cached per call shape.

    Args:
        call: ``collective``, ``group`` (ring order), ``message_bytes`` ``S``, ``elem_bytes``.
        algorithm: the scenario's ``collectives.algorithm`` (see
            :func:`tokenpcap.collectives.traffic.effective_algorithm`).
        layout: the rank layout (nodes decide NIC or NVLink).
        channels: NCCL-like channels (>= 1).
        slice_bytes: largest message (>= 1), rounded down to whole elements.

    Returns:
        :class:`Transfers`; summed per hop, ``table["bytes"]`` equals the hop's bytes exactly.

    Raises:
        InputError: ``channels`` or ``slice_bytes`` < 1; an unknown collective or algorithm, or a
            SendRecv group that is not a pair (:func:`tokenpcap.collectives.traffic.hops`).
    """
    if channels < 1:
        raise InputError(f"channels: got {channels}, expected an integer >= 1")
    if slice_bytes < 1:
        raise InputError(f"slice_bytes: got {slice_bytes}, expected an integer >= 1")
    return _transfers_cached(call.collective, tuple(call.group), int(call.message_bytes),
                             int(call.elem_bytes), algorithm, layout, int(channels),
                             int(slice_bytes))

