"""NCCL's flow-control window: at most ``NCCL_STEPS`` messages in flight on one connection.

NCCL's network transport keeps ``NCCL_STEPS`` (8, ``src/include/device.h``) buffer slots per
connection. The receiver's proxy posts a receive for a slot, which the IB transport announces
to the sender with a clear-to-send write (``ncclIbIrecv`` -> ``ncclIbPostFifo``), only while the
slot is free: ``recvProxyProgress`` (``src/transport/net.cc`` l. 1519-1533) stops posting
``if (sub->posted >= sub->done + maxDepth)``, ``maxDepth = min(NCCL_STEPS, NCCL_SHARED_STEPS /
nsubs)``, where ``done`` counts the steps whose data arrived and the GPU consumed; the sender
(``sendProxyProgress``) sends step ``s`` only once its FIFO entry (the CTS) is there. So message ``k + NCCL_STEPS`` of a
connection is cleared no earlier than message ``k`` has arrived.

The model states this as a dependency rule between the transfers of one call: on every
connection between nodes (``(sending NIC, receiving NIC, channel)``) the messages, in the order
the connection carries them (step, then slice, then row: a ring's pipeline order; an AllToAll
proxy's senders in turn), are numbered ``0, 1, ...`` and message ``k + window`` waits for the
arrival of message ``k``. Its launch, which posts its clear-to-send, comes after that arrival
(the GPU's consumption of a slot takes no time in the model). Two calls on one connection are
apart in the model (the programs run a dimension's calls one after the other), so the rule
spans one call. Proxies sharing a network connection (PXN with NCCL's shared comms,
``NCCL_NET_SHARED_COMMS``) share the window: NCCL's own bound is per sender's connector, so
the model is the stricter one there.
"""
from __future__ import annotations

import numpy as np

__all__ = ["window_pairs"]


def window_pairs(table: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """``(dep_t, dep_x)`` int64: row ``dep_t`` of ``table`` (``TRANSFER_DTYPE``) waits for the
    arrival of row ``dep_x``, ``window`` messages earlier on the same connection (module
    docstring). ``window <= 0``: no pairs.
    """
    if window <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    x = np.flatnonzero(table["nic"])
    if x.size <= window:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    t = table[x]
    order = np.lexsort((x, t["slice"], t["step"], t["channel"], t["dst_nic"], t["src_nic"]))
    rows = x[order]
    s = t[order]
    key_change = np.ones(rows.size, bool)
    key_change[1:] = ((s["src_nic"][1:] != s["src_nic"][:-1])
                      | (s["dst_nic"][1:] != s["dst_nic"][:-1])
                      | (s["channel"][1:] != s["channel"][:-1]))
    start = np.maximum.accumulate(np.where(key_change, np.arange(rows.size), 0))
    pos = np.arange(rows.size) - start
    late = np.flatnonzero(pos >= window)
    return rows[late].astype(np.int64), rows[late - window].astype(np.int64)
