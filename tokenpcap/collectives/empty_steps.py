"""The empty steps of NCCL's ring AllReduce: every rank sends at every step, also when its chunk
holds no element.

**What NCCL does** (NVIDIA/nccl commit 5067397c):

* ``src/device/all_reduce.h``, ``runRing``: for every loop of a channel that has elements
  (``channelCount > 0``), every rank runs all ``2(N - 1)`` steps of the ring; at each step its
  chunk holds ``nelem = min(chunkCount, remCount - chunkOffset)`` elements, zero or less past
  the data (``chunkCount = alignUp(divUp(remCount, nranks), 16 / sizeof(T))`` puts a call of
  fewer elements than ranks in the first chunks).
* ``src/device/prims_ll.h`` ``LLGenericOp`` and ``src/device/prims_ll128.h`` ``GenericOp``
  clamp ``nelem`` to 0 and still call ``waitSend`` ("Always waitSend in case of cleanup"),
  which writes the step's size (0 bytes) into the connection's FIFO, and advance the send
  step; they read no line and wait for none when ``nelem`` is 0. ``src/device/prims_simple.h``
  ``genericOp`` runs every slice of an empty chunk through ``waitPeer`` (which waits for the
  peer's step counter and writes size 0) and ``postPeer``.
* ``src/transport/net.cc`` ``sendProxyProgress`` sends every step whose FIFO size is set,
  ``isend(..., size, ...)`` with ``size`` 0 (under LL it checks ``DIVUP(size, 16)`` = 0 lines
  for their flags: ready at once); ``recvProxyProgress`` posts a receive for every step, whose
  clear-to-send the IB transport writes to the sender.
* ``src/transport/net_ib/p2p.cc`` ``ncclIbIsend`` waits for that clear-to-send and
  ``ncclIbMultiSend`` posts the send as an ``IBV_WR_RDMA_WRITE_WITH_IMM`` whose scatter list is
  empty (``num_sge = 0`` when ``length == 0``; the rkey is "needed even for 0-size send"):
  one RDMA WRITE Only with Immediate packet with a DMA length of 0 and no payload on the wire
  (IBTA vol.1 9.2: BTH, RETH, ImmDt; :func:`tokenpcap.wire.rdma.segment` of 0 bytes).

**The model.** A ring AllReduce hop whose channel part is empty on a channel that carries some
of the call's elements (the call's active channels; NCCL's channels with ``channelCount > 0``)
is one message of 0 bytes: on the network under every protocol, and over NVLink under Simple
only (the peer's step counter, which the receiver waits for; LL and LL128 write nothing to an
NVLink peer for an empty step). It carries no payload and no wire bytes, so the plan's bytes
per phase are unchanged; it adds packets (and, with clear-to-send, its CTS). What it waits for:

* Simple: the empty step of its chunk one step before (the predecessor of the ring's chain,
  the rule of every ring hop, :mod:`tokenpcap.collectives.transfers`): ``waitPeer`` waits for
  the peer's step counter also for an empty slice;
* LL and LL128: nothing of its own (no line is read), only the rank's program order on its
  channel: the receives its last earlier step with elements on that channel waited for (none
  before it).

The element placement is the model's (:func:`~tokenpcap.collectives.hops.ring_chunk_bytes`
deals elements evenly, NCCL's ``alignUp`` fills the first chunks): which ring positions carry
the elements may differ from NCCL's for calls that are not a multiple of ``16 N`` bytes, the
number of messages does not.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ring_empty_steps", "ring_empty_deps"]


def ring_empty_steps(parts: np.ndarray, cross: np.ndarray, protocol: str) -> np.ndarray:
    """Where an empty step is a message (module docstring): bool ``(nh, C)``.

    Args:
        parts: int64 ``(nh, C)``: bytes of each hop's part on each channel (hop order).
        cross: bool ``(nh,)``: the hop crosses nodes.
        protocol: ``LL``, ``LL128`` or ``Simple``.
    """
    active = (parts > 0).any(axis=0)
    empty = (parts == 0) & active[None, :]
    if protocol != "Simple":
        empty &= np.asarray(cross, bool)[:, None]
    return empty


def ring_empty_deps(step: np.ndarray, parts: np.ndarray, empty: np.ndarray, count: np.ndarray,
                    first: np.ndarray, protocol: str) -> tuple[np.ndarray, np.ndarray]:
    """Dependency pairs ``(waiting row, awaited row)`` (int64 ``(d,)`` each) of the empty steps'
    rows (module docstring).

    Args:
        step: int ``(nh,)``: the hops' steps; the hops are a ring AllReduce's,
            :func:`~tokenpcap.collectives.algorithms.ring.ring_hops`' order (hop ``k·N + p``
            is sent by ring position ``p`` at step ``k``, whose predecessor is hop ``(k - 1)·N
            + (p - 1) mod N``).
        parts: int64 ``(nh, C)`` bytes per hop and channel; empty: bool ``(nh, C)``
            (:func:`ring_empty_steps`).
        count: int64 ``(nh, C)``: rows of each (hop, channel), empty steps included.
        first: int64 ``(nh,)``: each hop's first row; a hop's rows go channel by channel.

    Raises:
        ValueError: the hops are not in ring order.
    """
    nh, C = parts.shape
    n = int(np.count_nonzero(step == step.min())) if nh else 0
    if nh == 0 or not empty.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    steps = nh // n
    if steps * n != nh or (np.asarray(step) != np.arange(nh) // n).any():
        raise ValueError("ring_empty_deps: hops not in ring order (step k, position p at k·N + p)")
    row = first[:, None] + np.cumsum(count, axis=1) - count          # (hop, channel) first row
    k, p = np.divmod(np.arange(nh), n)
    if protocol == "Simple":
        has = k >= 1
        g = np.where(has, (k - 1) * n + (p - 1) % n, 0)
        ok = empty & has[:, None] & (count[g] > 0)
        t, c = np.nonzero(ok)
        return row[t, c], row[g[t], c]
    # LL/LL128: the last earlier step of the same position with elements on the channel
    data = (parts > 0).reshape(steps, n, C)
    at = np.where(data, np.arange(steps)[:, None, None], -1)
    last = np.maximum.accumulate(at, axis=0)
    before = np.concatenate([np.full((1, n, C), -1), last[:-1]], axis=0).reshape(nh, C)
    t, c = np.nonzero(empty & (before >= 1))    # a data step at k* >= 1 has a predecessor
    ks = before[t, c]
    g = (ks - 1) * n + (p[t] - 1) % n           # the hop that step k* waited for
    m = count[g, c]
    rep = np.repeat(np.arange(t.size), m)
    j = np.arange(rep.size) - np.repeat(np.cumsum(m) - m, m)
    return row[t[rep], c[rep]], row[g[rep], c[rep]] + j
