"""Bytes on the wire of one LL or LL128 call, per rank and NIC, from its transfers.

Under Simple the plan counts a call's bytes from its hops (:func:`tokenpcap.collectives.traffic.
per_rank_bytes`, :func:`tokenpcap.collectives.rails.rank_nic_bytes`). Under LL and LL128 every
message is rounded up to whole lines (or warp slices) with their flags
(:func:`tokenpcap.collectives.protocols.wire_bytes`), so the bytes on the wire depend on how the
call is cut into channels and messages: they are summed here from the same
:func:`tokenpcap.collectives.transfers.transfers` table the schedule sends, which is what makes
the capture equal the plan to the byte.

Both sums are computed once per canonical group (:mod:`tokenpcap.collectives.canonical`: the
group moved down by whole nodes and, where the NICs translate with it, by a local index its
ranks share) and moved to each call: the per-rank sums are aligned with the group's positions,
which the shift keeps, and the bytes by local NIC move by the shift's local NIC part
(:func:`_moved`). Planning then costs one transfer table per canonical group instead of one per
group (a data-parallel ring of 128 nodes is one table for the ``tp`` ranks of every stage).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from tokenpcap.collectives.canonical import canonical_shape, nic_shift
from tokenpcap.collectives.hops import group_positions
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.p2p_chunks import P2pNet, send_messages
from tokenpcap.collectives.pxn import p2p_routes
from tokenpcap.collectives.traffic import CallLike, CallShape, hops
from tokenpcap.collectives.transfers import transfers

__all__ = ["WireBytes", "protocol_wire_bytes", "p2p_wire_bytes"]


class WireBytes(NamedTuple):
    """Aligned with the call's group: ``nic_bytes``/``nvlink_bytes`` int64 ``(N,)`` sent by each
    rank; ``by_nic`` int64 ``(N, nics_per_node)`` the NIC bytes by the local NIC they leave on;
    ``nic_message_sizes`` ``((wire bytes, messages), ...)`` of the NIC messages."""

    nic_bytes: np.ndarray
    nvlink_bytes: np.ndarray
    by_nic: np.ndarray
    nic_message_sizes: tuple[tuple[int, int], ...]


@functools.lru_cache(maxsize=4096)
def _cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
            layout: RankLayout, channels: int, slice_bytes: int, protocol: str,
            p2p: P2pNet | None, empty_steps: bool) -> WireBytes:
    # not kept in the transfers' cache: only these sums are (one call per group of every
    # LL/LL128 family, whose tables would outweigh the engine's state)
    t = transfers(CallShape(collective, group, s, e), algorithm, layout, channels, slice_bytes,
                  protocol, p2p, cached=False, empty_steps=empty_steps).table
    src = group_positions(group, t["src"])
    n = len(group)
    nic = t["nic"]
    b = t["bytes"].astype(np.int64)
    nic_b = np.bincount(src[nic], b[nic], minlength=n).astype(np.int64)
    nvl_b = np.bincount(src[~nic], b[~nic], minlength=n).astype(np.int64)
    local = t["src_nic"][nic].astype(np.int64) % layout.nics_per_node
    by_nic = np.zeros((n, layout.nics_per_node), np.int64)
    np.add.at(by_nic, (src[nic], local), b[nic])
    sizes, counts = np.unique(b[nic], return_counts=True)
    for x in (nic_b, nvl_b, by_nic):
        x.setflags(write=False)
    return WireBytes(nic_b, nvl_b, by_nic, tuple(zip(sizes.tolist(), counts.tolist())))


def protocol_wire_bytes(call: CallLike, algorithm: str, layout: RankLayout, channels: int,
                        slice_bytes: int, protocol: str, p2p: P2pNet | None = None,
                        empty_steps: bool = False) -> WireBytes:
    """The wire bytes of one call under ``protocol`` on ``channels`` (module docstring), a
    point-to-point call on NCCL's network p2p path ``p2p`` when given, a ring AllReduce's empty
    steps as 0-byte messages with ``empty_steps`` (:mod:`tokenpcap.collectives.empty_steps`);
    cached, read-only.

    Raises:
        InputError: as :func:`tokenpcap.collectives.transfers.transfers`.
    """
    (coll, group, s, e), local = _canonical(call, layout)
    return _moved(_cached(coll, group, s, e, algorithm, layout, int(channels), int(slice_bytes),
                          protocol, p2p, bool(empty_steps)), local)


def _canonical(call: CallLike, layout: RankLayout) -> tuple[tuple, int]:
    """``(canonical key, local NIC shift)`` of ``call``: its canonical group
    (:func:`tokenpcap.collectives.canonical.canonical_shape`) and the column shift of its bytes
    by local NIC (its NIC shift modulo ``nics_per_node``)."""
    gpn, npn = layout.gpus_per_node, layout.nics_per_node
    key, shift = canonical_shape(call.collective, tuple(call.group), int(call.message_bytes),
                                 int(call.elem_bytes), gpn, npn)
    return key, nic_shift(shift, gpn, npn) % npn


def _moved(w: WireBytes, local: int) -> WireBytes:
    """``w`` of a canonical group for the call ``local`` NICs above it on every node: the bytes
    by local NIC ``j`` become those of ``j + local`` (the canonical call's NICs are below
    ``nics_per_node - local``, as the call's are NICs of their nodes)."""
    if not local:
        return w
    by_nic = np.roll(w.by_nic, local, axis=1)
    by_nic.setflags(write=False)
    return w._replace(by_nic=by_nic)


@functools.lru_cache(maxsize=4096)
def _p2p_cached(collective: str, group: tuple[int, ...], s: int, e: int, algorithm: str,
                layout: RankLayout, channels: int, p2p: P2pNet) -> WireBytes:
    h = hops(CallShape(collective, group, s, e), algorithm, layout)
    src = group_positions(group, h["src"])
    n, npn, gpn = len(group), layout.nics_per_node, layout.gpus_per_node
    b = h["bytes"].astype(np.int64)
    cross = (h["src"] // gpn != h["dst"] // gpn) & (b > 0)
    nic_b = np.bincount(src[cross], b[cross], minlength=n).astype(np.int64)
    nvl_b = np.bincount(src[~cross], b[~cross], minlength=n).astype(np.int64)
    proxy, snic, _ = p2p_routes(h["src"][cross], h["dst"][cross], layout, p2p.pxn_level,
                                p2p.cross_nic)
    fwd = proxy != h["src"][cross]
    nvl_b += np.bincount(src[cross][fwd], b[cross][fwd], minlength=n).astype(np.int64)
    by_nic = np.zeros((n, npn), np.int64)
    np.add.at(by_nic, (src[cross], snic % npn), b[cross])
    nodes = np.bincount(np.asarray(group, np.int64) // gpn)
    sizes: dict[int, int] = {}
    hb, hc = np.unique(b[cross], return_counts=True)
    for size, count in zip(hb.tolist(), hc.tolist()):
        msg = send_messages(size, n, channels, p2p, bool((nodes > 1).any()))[2]
        ms, mc = np.unique(msg, return_counts=True)
        for a, k in zip(ms.tolist(), mc.tolist()):
            sizes[a] = sizes.get(a, 0) + k * count
    for x in (nic_b, nvl_b, by_nic):
        x.setflags(write=False)
    return WireBytes(nic_b, nvl_b, by_nic, tuple(sorted(sizes.items())))


def p2p_wire_bytes(call: CallLike, algorithm: str, layout: RankLayout, channels: int,
                   p2p: P2pNet) -> WireBytes:
    """The bytes of one Simple SendRecv or AllToAll call as NCCL's network p2p sends them
    (:mod:`tokenpcap.collectives.p2p_chunks`, :mod:`tokenpcap.collectives.pxn`), from its hops
    alone: the NIC bytes of each rank (the hops between nodes, on the PXN proxy's NIC in
    ``by_nic``), its NVLink bytes (the hops inside a node plus the copy of every hop between
    nodes whose proxy is another GPU), the sizes of the network messages. Equal to the sums
    over :func:`tokenpcap.collectives.transfers.transfers` with the same ``p2p``; cached.

    Raises:
        InputError: as :func:`tokenpcap.collectives.traffic.hops`.
    """
    hops(call, algorithm, layout)   # validates
    (coll, group, s, e), local = _canonical(call, layout)
    return _moved(_p2p_cached(coll, group, s, e, algorithm, layout, int(channels), p2p), local)
