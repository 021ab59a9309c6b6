"""Bytes on the wire of one LL or LL128 call, per rank and NIC, from its transfers.

Under Simple the plan counts a call's bytes from its hops (:func:`tokenpcap.collectives.traffic.
per_rank_bytes`, :func:`tokenpcap.collectives.rails.rank_nic_bytes`). Under LL and LL128 every
message is rounded up to whole lines (or warp slices) with their flags
(:func:`tokenpcap.collectives.protocols.wire_bytes`), so the bytes on the wire depend on how the
call is cut into channels and messages: they are summed here from the same
:func:`tokenpcap.collectives.transfers.transfers` table the schedule sends, which is what makes
the capture equal the plan to the byte.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.traffic import CallLike, CallShape
from tokenpcap.collectives.transfers import transfers

__all__ = ["WireBytes", "protocol_wire_bytes"]


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
            layout: RankLayout, channels: int, slice_bytes: int, protocol: str) -> WireBytes:
    t = transfers(CallShape(collective, group, s, e), algorithm, layout, channels, slice_bytes,
                  protocol).table
    pos = {r: i for i, r in enumerate(group)}
    src = np.fromiter((pos[int(r)] for r in t["src"]), np.int64, len(t))
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
                        slice_bytes: int, protocol: str) -> WireBytes:
    """The wire bytes of one call under ``protocol`` (module docstring); cached, read-only.

    Raises:
        InputError: as :func:`tokenpcap.collectives.transfers.transfers`.
    """
    return _cached(call.collective, tuple(call.group), int(call.message_bytes),
                   int(call.elem_bytes), algorithm, layout, int(channels), int(slice_bytes),
                   protocol)
