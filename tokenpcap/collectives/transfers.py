"""Stage 4: collective calls → point-to-point transfers in NCCL-like channels and slices.

A :class:`tokenpcap.plan.calls.CollectiveCall` becomes the hops of :func:`tokenpcap.collectives.traffic.hops` (the
one place byte accounting lives, so the capture matches the plan to the byte), and every hop is cut
further as NCCL does:

* **Channels.** NCCL runs a collective on ``collectives.channels`` channels (``NCCL_MIN_NCHANNELS``
  / ``NCCL_MAX_NCHANNELS``); each channel moves its own contiguous part of every chunk over its own
  connection (one RC QP per channel and peer in NCCL's IB transport, ``net_ib``). A hop of ``B``
  bytes is split over the channels in whole elements (:func:`tokenpcap.collectives.traffic.ring_chunk_bytes`);
  a channel part of 0 bytes sends nothing, except with ``empty_steps`` a ring AllReduce's empty
  step on a channel that carries some of the call's elements: one message of 0 bytes, as NCCL's
  ``runRing`` sends every step (:mod:`tokenpcap.collectives.empty_steps`).
* **Slices.** A channel part goes out as RDMA messages of at most ``collectives.slice_bytes``
  (rounded down to whole elements), the last one shorter. NCCL's default for the Simple protocol is
  one slice = ``NCCL_BUFFSIZE`` (4 MiB) / ``NCCL_STEPS`` (8) × ``ALLREDUCE_SLICESTEPS`` (2) =
  1 MiB, the default of ``slice_bytes``.
* **Protocols.** Under NCCL's LL and LL128 (:mod:`tokenpcap.collectives.protocols`) a message
  is one FIFO step: at most 32 KiB (LL) or 576,000 bytes (LL128) of data
  (:func:`protocol_slice_bytes`), and its ``bytes`` are the lines on the wire, flags included
  (:func:`tokenpcap.collectives.protocols.wire_bytes`). Simple keeps ``slice_bytes`` and the
  payload itself. A point-to-point call between nodes takes NCCL's network p2p path (the PXN
  proxy's NIC, :mod:`tokenpcap.collectives.pxn`) under every protocol: the connection is one
  for all three; Simple cuts it into ``NCCL_P2P_NET_CHUNKSIZE`` chunks, LL into its own
  (:func:`tokenpcap.collectives.p2p_chunks.ll_send_chunk_bytes`).
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
from tokenpcap.collectives.empty_steps import ring_empty_deps, ring_empty_steps
from tokenpcap.collectives.p2p_chunks import P2pNet, network_rows
from tokenpcap.collectives.protocols import PROTOCOLS, wire_bytes
from tokenpcap.collectives.rails import hop_channel_nics
from tokenpcap.collectives.window import window_pairs
from tokenpcap.collectives.traffic import (CallLike, CallShape, check_call, effective_algorithm,
                                           hops, ring_chunk_bytes)

#: Algorithms whose hops are NCCL point-to-point sends (SendRecv, AllToAll): their network
#: hops follow :mod:`tokenpcap.collectives.p2p_chunks` and :mod:`tokenpcap.collectives.pxn`.
P2P_ALGORITHMS = ("direct", "p2p")

__all__ = ["P2P_ALGORITHMS", "TRANSFER_DTYPE", "Transfers", "transfers", "drop_cached",
           "slice_elements_bytes", "smallest_message_elements", "protocol_slice_bytes"]

#: One row per RDMA message (or NVLink copy) of one collective call. Shape ``(n,)``.
#:
#: ============ ===== =================================================================
#: hop          int32 row of :func:`tokenpcap.collectives.traffic.hops` this transfer belongs to
#: step         int32 algorithm step of the hop
#: src, dst     int32 global ranks
#: chunk        int32 the hop's chunk (ring chunk, tree index, AllToAll destination)
#: channel      int32 NCCL-like channel (the connection index of the QP)
#: slice        int32 slice index inside the channel part (0-based)
#: bytes        int64 bytes on the wire (> 0; 0 for an empty step): the payload under Simple, its LL/LL128 lines else
#: byte_offset  int64 offset of the bytes inside the collective's buffer (module docstring)
#: nic          bool  the hop crosses nodes (on a NIC), else NVLink
#: src_nic      int32 global NIC the bytes leave on (-1 on NVLink)
#: dst_nic      int32 global NIC the bytes arrive on (-1 on NVLink)
#: via          int32 PXN proxy GPU (:mod:`tokenpcap.collectives.pxn`) of a network message
#:                    sent from another GPU's NIC, and of its NVLink copy to that GPU (a row
#:                    with ``nic`` False and ``via >= 0``, timed on the sender's NVLink); -1
#: ============ ===== =================================================================
TRANSFER_DTYPE = np.dtype([
    ("hop", "<i4"), ("step", "<i4"), ("src", "<i4"), ("dst", "<i4"), ("chunk", "<i4"),
    ("channel", "<i4"), ("slice", "<i4"), ("bytes", "<i8"), ("byte_offset", "<i8"),
    ("nic", "?"), ("src_nic", "<i4"), ("dst_nic", "<i4"), ("via", "<i4"),
])


def _lists(ptr: np.ndarray, flat: np.ndarray) -> list[tuple[int, ...]]:
    """The rows of a CSR pair as tuples of Python ints."""
    v, p = flat.tolist(), ptr.tolist()
    return [tuple(v[a:b]) for a, b in zip(p[:-1], p[1:])]


@dataclass(frozen=True)
class Transfers:
    """The transfers of one collective call and their dependencies (read-only, cached).

    Stored as arrays; the tuple forms are made on first use (for the Python reference engine's
    per-event code, which must not pay numpy's per-element access).

    Attributes:
        table: :data:`TRANSFER_DTYPE` ``(n,)``, ordered by (step, hop, channel, slice).
        group: the call's group (ring order).
        dep_ptr, dep_list: int64 CSR ``(n + 1,)``/``(d,)``: per transfer, the indices (into
            ``table``) of the transfers that must have arrived before it may start.
        rev_ptr, rev_list: the reverse relation (per transfer, the transfers that wait for it,
            ascending).
        src_ptr, src_list / dst_ptr, dst_list: int64 CSR ``(len(group) + 1,)``/``(n,)``: per
            position in ``group``, the transfers that rank sends / receives, ascending.

    Derived (tuples of Python ints, made once): ``deps``, ``dependents`` (per transfer),
    ``by_src``, ``by_dst`` (``{rank: transfers}`` in group order), ``rows`` (``table`` in
    TRANSFER_DTYPE field order up to ``nic``), ``nics`` (per transfer ``(src_nic, dst_nic)``,
    ``(-1, -1)`` on NVLink).
    """

    table: np.ndarray
    group: tuple[int, ...]
    dep_ptr: np.ndarray
    dep_list: np.ndarray
    rev_ptr: np.ndarray
    rev_list: np.ndarray
    src_ptr: np.ndarray
    src_list: np.ndarray
    dst_ptr: np.ndarray
    dst_list: np.ndarray

    def __len__(self) -> int:
        return len(self.table)

    @functools.cached_property
    def deps(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_lists(self.dep_ptr, self.dep_list))

    @functools.cached_property
    def dependents(self) -> tuple[tuple[int, ...], ...]:
        return tuple(_lists(self.rev_ptr, self.rev_list))

    @functools.cached_property
    def by_src(self) -> dict[int, tuple[int, ...]]:
        return dict(zip(self.group, _lists(self.src_ptr, self.src_list)))

    @functools.cached_property
    def by_dst(self) -> dict[int, tuple[int, ...]]:
        return dict(zip(self.group, _lists(self.dst_ptr, self.dst_list)))

    @functools.cached_property
    def rows(self) -> tuple[tuple, ...]:
        return tuple(zip(*(self.table[f].tolist() for f in TRANSFER_DTYPE.names[:10])))

    @functools.cached_property
    def nics(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.table["src_nic"].tolist(), self.table["dst_nic"].tolist()))


def smallest_message_elements(collective: str, group: tuple[int, ...], algorithm: str,
                              layout: RankLayout, channels: int) -> int:
    """Fewest elements of ``S`` with which every piece of the call carries data: ``pieces *
    channels`` (at least 1), where ``pieces`` is the algorithm's
    (:meth:`~tokenpcap.collectives.algorithms.Algorithm.pieces`: the parts its hops deal ``S``
    into) and every hop is split over ``channels`` in whole elements, as :func:`transfers` splits
    it. With fewer elements some channel part of some hop is empty and sends nothing (a peer,
    a chunk, a QP or a NIC of the call drops out of the capture); with at least this many every
    ``(hop, channel)`` of the call carries at least one element.

    Raises:
        InputError: ``channels < 1``; an unknown algorithm.
    """
    if channels < 1:
        raise InputError(f"channels: got {channels}, expected an integer >= 1")
    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm {algorithm!r}, expected one of {', '.join(ALGORITHMS)}")
    alg = ALGORITHMS[effective_algorithm(collective, algorithm)]
    return max(1, alg.pieces(collective, tuple(group), layout) * channels)


def slice_elements_bytes(slice_bytes: int, elem_bytes: int) -> int:
    """Largest slice in whole elements: ``max(elem, slice_bytes // elem * elem)`` bytes."""
    return max(elem_bytes, slice_bytes // elem_bytes * elem_bytes)


@functools.lru_cache(maxsize=8192)
def _transfers_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                      layout: RankLayout, channels: int, slice_bytes: int,
                      protocol: str = "Simple", p2p: P2pNet | None = None,
                      window: int = 0, empty_steps: bool = False) -> Transfers:
    shape = CallShape(collective, group, s, e)
    check_call(shape, algorithm)
    alg = effective_algorithm(collective, algorithm)
    # the hops that carry bytes alone, where the algorithm makes them (a hop of 0 bytes sends
    # nothing, and as its chunk is empty in every hop nothing waits for it: the same rows);
    # not where a ring AllReduce's empty steps are messages too
    got = None if empty_steps and alg == "ring" and collective == "AllReduce" else \
        ALGORITHMS[alg].nonempty_hops(collective, group, s, e, layout)
    h, rows_of = (hops(shape, algorithm, layout), None) if got is None else got
    preds = ALGORITHMS[alg].predecessors(h)
    offsets = np.asarray(ALGORITHMS[alg].chunk_offsets(h, collective, group, s, e, layout), np.int64)
    sl = slice_elements_bytes(protocol_slice_bytes(protocol, slice_bytes), e)
    nh = len(h)
    hb = h["bytes"].astype(np.int64)
    # channel parts of every hop (one split per distinct size), rows by step, hop, channel, slice
    sizes, inv = np.unique(hb, return_inverse=True)
    parts = (np.stack([ring_chunk_bytes(int(b), channels, e) for b in sizes.tolist()])[inv]
             if nh else np.zeros((0, channels), np.int64))
    order = np.lexsort((np.arange(nh), h["step"]))
    po = parts[order]
    count = -(-po // sl)                                        # slices per (hop, channel)
    empty = None
    if empty_steps and alg == "ring" and collective == "AllReduce" and nh:
        empty = ring_empty_steps(parts, layout.node_array(h["src"]) != layout.node_array(h["dst"]),
                                 protocol)
        count = count + empty[order]
    first_off = offsets[order][:, None] + np.cumsum(po, axis=1) - po
    pair = np.repeat(np.arange(nh * channels), count.ravel())
    n = pair.size
    j = np.arange(n) - (np.cumsum(count.ravel()) - count.ravel())[pair]
    hop = order[pair // channels]
    ch = pair % channels
    table = np.zeros(n, TRANSFER_DTYPE)
    table["hop"], table["channel"], table["slice"] = hop, ch, j
    for f in ("step", "src", "dst", "chunk"):
        table[f] = h[f][hop]
    table["bytes"] = wire_bytes(protocol, np.minimum(sl, po.ravel()[pair] - j * sl))
    table["byte_offset"] = first_off.ravel()[pair] + j * sl
    cross = layout.node_array(table["src"]) != layout.node_array(table["dst"])
    table["nic"] = cross
    table["src_nic"] = table["dst_nic"] = -1
    p2p_net = p2p is not None and alg in P2P_ALGORITHMS     # NCCL's network p2p path (PXN)
    if cross.any() and not p2p_net:       # the NICs of each distinct (src, dst, channel) between nodes
        x = np.flatnonzero(cross)
        w = layout.world_size
        key = (table["src"][x].astype(np.int64) * w + table["dst"][x]) * channels + ch[x]
        uk, ui = np.unique(key, return_inverse=True)
        nics = np.array([hop_channel_nics(collective, algorithm, group, k // channels // w,
                                          k // channels % w, k % channels, layout)
                         for k in uk.tolist()], np.int64).reshape(-1, 2)[ui.ravel()]
        table["src_nic"][x], table["dst_nic"][x] = nics[:, 0], nics[:, 1]
    table["via"] = -1
    extra_t = extra_x = np.zeros(0, np.int64)
    if p2p_net and cross.any():
        # NCCL's network p2p: its chunks on its channels (LL: its own chunk), through the PXN
        # proxy's NIC: the connection is the same for every protocol
        table, extra_t, extra_x = network_rows(table, offsets, layout, tuple(group), channels, p2p,
                                               protocol, hb)
        n = len(table)
        hop, ch = table["hop"].astype(np.int64), table["channel"].astype(np.int64)
    wt, wx = window_pairs(table, window)
    extra_t, extra_x = np.concatenate([extra_t, wt]), np.concatenate([extra_x, wx])
    # dependencies: slice j of channel ch of a same-size predecessor hop (the same position in
    # its rows), else every row of the predecessor hop
    per_hop = np.bincount(hop, minlength=nh)
    first = np.zeros(nh, np.int64)
    first[order] = np.cumsum(per_hop[order]) - per_hop[order]
    dep_len = np.zeros(n, np.int64)
    pairs_t: list[np.ndarray] = []
    pairs_x: list[np.ndarray] = []
    for i in order.tolist():
        k = int(per_hop[i])
        if not k or not preds[i] or (empty is not None and hb[i] == 0):
            continue
        mine = first[i] + np.arange(k)
        cols = [mine[:, None] + (first[g] - first[i]) if hb[g] == hb[i] else
                np.broadcast_to(first[g] + np.arange(per_hop[g]), (k, int(per_hop[g])))
                for g in preds[i]]
        d = np.concatenate(cols, axis=1)
        dep_len[mine] = d.shape[1]
        pairs_t.append(np.repeat(mine, d.shape[1]))
        pairs_x.append(d.ravel())
    if empty is not None and empty.any():
        count_h = np.empty_like(count)
        count_h[order] = count
        et, ex = ring_empty_deps(h["step"], parts, empty, count_h, first, protocol)
        extra_t, extra_x = np.concatenate([extra_t, et]), np.concatenate([extra_x, ex])
    pairs_t.append(extra_t)
    pairs_x.append(extra_x)
    t_all, x_all = np.concatenate(pairs_t), np.concatenate(pairs_x)
    if extra_t.size:
        # rows ordered by waiting transfer (the CSR of deps), duplicates once
        pair = np.unique(t_all * n + x_all)
        t_all, x_all = pair // n, pair % n
        dep_len = np.bincount(t_all, minlength=n).astype(np.int64)
    if rows_of is not None:
        table["hop"] = rows_of[table["hop"]]
    by = np.argsort(x_all, kind="stable")
    arrays = (_ptr(dep_len), x_all, _ptr(np.bincount(x_all, minlength=n)), t_all[by],
              *_rows_by(table["src"], group), *_rows_by(table["dst"], group))
    for x in (table, *arrays):
        x.setflags(write=False)
    return Transfers(table, tuple(group), *arrays)


def _ptr(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _rows_by(rank: np.ndarray, group: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """CSR over the positions of ``group``: the rows (ascending) whose ``rank`` is that rank."""
    g = np.asarray(group, np.int64)
    sort = np.argsort(g, kind="stable")
    pos = sort[np.searchsorted(g, rank, sorter=sort)] if rank.size else np.zeros(0, np.int64)
    return _ptr(np.bincount(pos, minlength=len(group))), np.argsort(pos, kind="stable")


def protocol_slice_bytes(protocol: str, slice_bytes: int) -> int:
    """Largest data bytes of one message under ``protocol``: ``slice_bytes`` for Simple; one
    step's data for LL (32 KiB) and LL128 (576,000 B), as NCCL's ``calcCollChunking`` takes
    one step per chunk for them (:mod:`tokenpcap.collectives.protocols`), at most
    ``slice_bytes``."""
    if protocol == "Simple":
        return slice_bytes
    return min(slice_bytes, PROTOCOLS[protocol].step_data_bytes)


def transfers(call: CallLike, algorithm: str, layout: RankLayout, channels: int,
              slice_bytes: int, protocol: str = "Simple", p2p: P2pNet | None = None,
              window: int = 0, cached: bool = True, empty_steps: bool = False) -> Transfers:
    """The transfers of one collective call (module docstring), cached per call shape
    (``cached=False``: made anew and not kept, for a caller that keeps only sums of them;
    :func:`drop_cached` empties the cache).

    Args:
        call: ``collective``, ``group`` (ring order), ``message_bytes`` ``S``, ``elem_bytes``.
        algorithm: the scenario's ``collectives.algorithm`` (see
            :func:`tokenpcap.collectives.traffic.effective_algorithm`).
        layout: the rank layout (nodes decide NIC or NVLink).
        channels: NCCL-like channels (>= 1).
        slice_bytes: largest message (>= 1), rounded down to whole elements.
        protocol: NCCL's protocol of the call (:data:`~tokenpcap.collectives.protocols.PROTOCOLS`):
            LL and LL128 cut messages at one step's data (:func:`protocol_slice_bytes`) and a
            message's ``bytes`` are its wire bytes
            (:func:`~tokenpcap.collectives.protocols.wire_bytes` of its data).
        p2p: NCCL's network p2p path (:class:`~tokenpcap.collectives.p2p_chunks.P2pNet`): the
            network hops of a Simple SendRecv or AllToAll become NCCL's chunks on NCCL's
            channels (:func:`~tokenpcap.collectives.p2p_chunks.send_messages`), sent from the
            PXN proxy's NIC after an NVLink copy to it (:mod:`tokenpcap.collectives.pxn`).
            None: the collective slicing and the sender's own NIC.
        window: NCCL_STEPS: at most this many messages of a connection in flight
            (:func:`tokenpcap.collectives.window.window_pairs`); 0 no bound.
        empty_steps: a ring AllReduce's empty steps are messages of 0 bytes
            (:mod:`tokenpcap.collectives.empty_steps`); False: they send nothing.

    Returns:
        :class:`Transfers`; summed per hop over the rows that are not PXN copies (``nic`` or
        ``via < 0``), ``table["bytes"]`` equals the hop's bytes exactly under Simple (under
        LL/LL128 the wire bytes of the hop's data).

    Raises:
        InputError: ``channels`` or ``slice_bytes`` < 1; an unknown collective or algorithm, or a
            SendRecv group that is not a pair (:func:`tokenpcap.collectives.traffic.hops`).
    """
    if channels < 1:
        raise InputError(f"channels: got {channels}, expected an integer >= 1")
    if slice_bytes < 1:
        raise InputError(f"slice_bytes: got {slice_bytes}, expected an integer >= 1")
    if protocol not in PROTOCOLS:
        raise InputError(f"protocol: got {protocol!r}, expected one of {', '.join(PROTOCOLS)}")
    make = _transfers_cached if cached else _transfers_cached.__wrapped__
    return make(call.collective, tuple(call.group), int(call.message_bytes),
                int(call.elem_bytes), algorithm, layout, int(channels), int(slice_bytes),
                protocol, p2p, int(window), bool(empty_steps))


def drop_cached() -> None:
    """Forget every cached :class:`Transfers` (their arrays: about 100 B per transfer of each
    distinct call shape made so far), for a caller that has copied what it needs of them."""
    _transfers_cached.cache_clear()

