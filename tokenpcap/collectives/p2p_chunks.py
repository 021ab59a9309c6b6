"""How NCCL cuts a network point-to-point send into channels and chunks (Simple protocol).

A port of NCCL's rules (NVIDIA/nccl commit 5067397c) for a send between nodes of a communicator
that spans more than one node (``comm->nNodes > 1``), for SendRecv and every AllToAll peer:

* **Step (chunk) size.** ``comm->p2pChunkSize = NCCL_P2P_NET_CHUNKSIZE`` (128 KiB), at most
  ``NCCL_BUFFSIZE / NCCL_STEPS`` = 4 MiB / 8 (``src/init.cc`` ``computeBuffSizes``, l. 818-843).
* **Channels per network peer.** ``ncclTopoGetNchannels`` (``src/graph/paths.cc`` l. 920-957):
  a remote peer gets ``max(netCount, divUp(netBw, P2P_PER_CHANNEL_NET_BW))`` channels
  (``P2P_PER_CHANNEL_NET_BW`` = 14 GB/s; ``netCount``/``netBw``: the GPU's local NICs and their
  GB/s, ``ncclTopoGetLocalNetCountByBw``), an NVLink peer ``2 * max(1, nvlinkBw / linkBw)``;
  ``ncclTopoComputeP2pChannelsPerPeer`` keeps the least over the communicator's peers, and
  ``ncclTopoComputeP2pChannels`` (l. 977-1004) rounds it and the communicator's p2p channels
  ``p2pnChannels = pow2Up(min(nChannels, MAXCHANNELS))`` up to powers of two, then halves the
  per-peer count ``while perPeer * divUp(nRanks, NCCL_MAX_DEV_WORK_P2P_PER_BATCH) > p2pnChannels``.
* **Channels of one send.** ``scheduleP2pTasksToPlan`` (``src/enqueue.cc`` l. 1141-1145):
  ``nChannelsMax = perPeer``, ``nChannelsMin`` halved from it ``while nChannelsMin * nRanks >
  p2pnChannels``; ``addP2pToPlan`` (l. 920-929): ``nChannels = min(nChannelsMin, divUp(bytes,
  step / 2))``, doubled while the part ``divUp(bytes, nChannels)`` exceeds ``step`` and
  ``nChannels <= nChannelsMax / 2``.
* **Chunk of one send.** ``addP2pToPlan`` (l. 936-943): ``step``, a quarter of it when the send
  is smaller than one step, half of it when smaller than ``8 * step``.
* **Parts.** ``ncclP2pPartBounds`` (``src/include/device.h``): part ``k`` of ``n`` is
  ``[k * pb, min((k + 1) * pb, bytes))`` with ``pb = alignUp(divUp(bytes, n), 4096)``; each part
  goes as ``divUp(part, chunk)`` steps of at most ``chunk`` bytes, one network message each: one
  RDMA WRITE with immediate and one clear-to-send by the receiver (``src/transport/net.cc``,
  ``net_ib``).

The model numbers a send's parts ``0 .. n-1`` as its channels (modulo the scenario's channels);
NCCL rotates the first channel per p2p round (``ncclP2pChannelBaseForRound``), which only
renumbers the connections. Sends on NVLink keep the collective slicing
(:mod:`tokenpcap.collectives.transfers`); LL p2p sends (``NCCL_P2P_LL_THRESHOLD``) keep the LL
lowering.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["NCCL_STEPS", "P2P_NET_CHUNKSIZE_BYTES", "P2P_PER_CHANNEL_NET_BW_GBYTES",
           "NCCL_MAX_DEV_WORK_P2P_PER_BATCH", "P2pNet", "p2p_chunk_bytes",
           "channels_per_net_peer", "channels_per_nvlink_peer", "send_channels",
           "send_parts", "send_chunk_bytes", "ll_send_chunk_bytes", "part_bounds", "send_messages"]

NCCL_STEPS = 8                              # src/include/device.h
DEFAULT_BUFFSIZE_BYTES = 1 << 22            # src/include/comm.h DEFAULT_BUFFSIZE (Simple)
P2P_NET_CHUNKSIZE_BYTES = 1 << 17           # src/init.cc NCCL_P2P_NET_CHUNKSIZE
P2P_PER_CHANNEL_NET_BW_GBYTES = 14          # src/graph/paths.cc P2P_PER_CHANNEL_NET_BW (GB/s)
NCCL_MAX_DEV_WORK_P2P_PER_BATCH = 8         # src/include/device.h
MAX_CHANNELS = 64                           # MAXCHANNELS, src/include/device.h
PART_ALIGN_BYTES = 4 << 10                  # ncclP2pPartBounds alignUp(.., 4 << 10)
#: ``ncclTopoNVLinkBw`` per link, GB/s (``src/graph/topo.h`` SM*_NVLINK_BW), by compcap x 10.
_NVLINK_LINK_GBYTES = ((100, 40.1), (90, 20.6), (87, 20.0), (86, 12.0), (80, 20.0), (70, 20.0),
                       (0, 18.0))


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _pow2_up(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class P2pNet:
    """What NCCL's network p2p path of one scenario depends on (hashable, for the caches).

    Attributes:
        pxn_level: ``NCCL_P2P_PXN_LEVEL``, 0 when ``NCCL_PXN_DISABLE`` is 1.
        cross_nic: ``NCCL_CROSS_NIC``.
        chunk_bytes: ``comm->p2pChunkSize`` (:func:`p2p_chunk_bytes`).
        net_peer_channels: channels of a remote peer (:func:`channels_per_net_peer`).
        nvlink_peer_channels: channels of a peer on the node (:func:`channels_per_nvlink_peer`).
    """

    pxn_level: int = 2
    cross_nic: int = 2
    chunk_bytes: int = P2P_NET_CHUNKSIZE_BYTES
    net_peer_channels: int = 4
    nvlink_peer_channels: int = 36


def p2p_chunk_bytes(net_chunksize: int) -> int:
    """``comm->p2pChunkSize`` across nodes: ``NCCL_P2P_NET_CHUNKSIZE``, at most ``NCCL_BUFFSIZE /
    NCCL_STEPS`` (4 MiB / 8 = 512 KiB; ``src/init.cc`` l. 842).

    Raises:
        InputError: ``net_chunksize < 1``.
    """
    if net_chunksize < 1:
        raise InputError(f"NCCL_P2P_NET_CHUNKSIZE: got {net_chunksize}, expected >= 1")
    return min(int(net_chunksize), DEFAULT_BUFFSIZE_BYTES // NCCL_STEPS)


def channels_per_net_peer(nic_gbps: float, nics_per_gpu: int = 1) -> int:
    """``ncclTopoGetNchannels`` of a remote peer: ``max(netCount, divUp((int)netBw, 14))`` with
    ``netCount`` the GPU's local NICs and ``netBw`` their GB/s (``nic_gbps / 8`` each): 4 for one
    400 Gb/s NIC, 2 for one 200 Gb/s NIC."""
    count = max(1, int(nics_per_gpu))
    net_bw = int(count * float(nic_gbps) / 8)
    return max(count, _div_up(net_bw, P2P_PER_CHANNEL_NET_BW_GBYTES))


def channels_per_nvlink_peer(nvlink_gbps: float, compcap: int) -> int:
    """``ncclTopoGetNchannels`` of a peer over NVLink: ``2 * max(1, (int)(bw / linkBw))`` with
    ``bw`` the GPU's NVLink GB/s (``nvlink_gbps / 8``) and ``linkBw`` ``ncclTopoNVLinkBw`` of its
    compute capability (H100: 450 / 20.6 -> 42)."""
    link = next(bw for cc, bw in _NVLINK_LINK_GBYTES if compcap >= cc)
    return 2 * max(1, int(float(nvlink_gbps) / 8 / link))


@functools.lru_cache(maxsize=1024)
def send_channels(n_ranks: int, comm_channels: int, net_peer: int, nvlink_peer: int | None
                  ) -> tuple[int, int]:
    """``(nChannelsMin, nChannelsMax)`` of a p2p send in a communicator of ``n_ranks`` ranks on
    more than one node with ``comm_channels`` channels (module docstring): ``perPeer`` is the
    least of ``net_peer`` and (when the communicator has a peer on the sender's node)
    ``nvlink_peer``."""
    per_peer = net_peer if nvlink_peer is None else min(net_peer, nvlink_peer)
    p2p_n = _pow2_up(min(max(1, comm_channels), MAX_CHANNELS))
    per_peer = _pow2_up(per_peer)
    while per_peer * _div_up(n_ranks, NCCL_MAX_DEV_WORK_P2P_PER_BATCH) > p2p_n and per_peer > 1:
        per_peer //= 2
    c_max = c_min = per_peer
    while c_min * n_ranks > p2p_n and c_min > 1:
        c_min //= 2
    return c_min, c_max


def send_parts(nbytes: int, c_min: int, c_max: int, step: int) -> int:
    """``nChannels`` of a send of ``nbytes`` > 0 (``addP2pToPlan``, ``nNodes > 1``)."""
    min_part, max_part = step // 2, step
    n = min(c_min, _div_up(nbytes, max(1, min_part)))
    part = max(min_part, _div_up(nbytes, n))
    while part > max_part and n <= c_max // 2:
        n *= 2
        part = _div_up(nbytes, n)
    return n


def send_chunk_bytes(nbytes: int, step: int) -> int:
    """Chunk of a network Simple send (``addP2pToPlan``): ``step // 4`` below one step,
    ``step // 2`` below 8 steps, else ``step``."""
    if nbytes < step:
        return step // 4
    if nbytes < 8 * step:
        return step // 2
    return step


def part_bounds(n_parts: int, nbytes: int) -> np.ndarray:
    """int64 ``(n_parts, 2)`` begin and end of each part (``ncclP2pPartBounds``)."""
    pb = _div_up(_div_up(nbytes, n_parts), PART_ALIGN_BYTES) * PART_ALIGN_BYTES
    k = np.arange(n_parts, dtype=np.int64)
    return np.stack([np.minimum(k * pb, nbytes), np.minimum((k + 1) * pb, nbytes)], axis=1)


def ll_send_chunk_bytes(nbytes: int) -> int:
    """Data bytes of a chunk of a network LL send of ``nbytes`` (``addP2pToPlan``): the LL
    step (``buffSizes[LL] / NCCL_STEPS``, 64 KiB of lines), halved below 8 steps for the
    network, and half of it data (8 of every 16 bytes): 16 KiB, or 32 KiB from 512 KiB on."""
    from tokenpcap.collectives.protocols import PROTOCOLS

    step = PROTOCOLS["LL"].step_bytes
    chunk = step // 2 if nbytes < 8 * step else step
    return chunk // 2


@functools.lru_cache(maxsize=4096)
def send_messages(nbytes: int, n_ranks: int, comm_channels: int, p2p: P2pNet,
                  nvlink_peers: bool, protocol: str = "Simple"
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The network messages of one send of ``nbytes`` > 0 (module docstring): int64 arrays
    ``(part, offset, bytes)`` of shape ``(m,)`` in part order then offset order (read-only),
    ``bytes`` the data of each. ``nvlink_peers``: the communicator has a peer on the sender's
    node (it takes part in ``perPeer``'s least). ``protocol`` ``LL``: the same parts (NCCL picks
    them before the protocol), cut into :func:`ll_send_chunk_bytes` chunks."""
    c_min, c_max = send_channels(n_ranks, comm_channels, p2p.net_peer_channels,
                                 p2p.nvlink_peer_channels if nvlink_peers else None)
    n = send_parts(nbytes, c_min, c_max, p2p.chunk_bytes)
    chunk = max(1, send_chunk_bytes(nbytes, p2p.chunk_bytes) if protocol == "Simple"
                else ll_send_chunk_bytes(nbytes))
    bounds = part_bounds(n, nbytes)
    size = bounds[:, 1] - bounds[:, 0]
    steps = -(-size // chunk)
    part = np.repeat(np.arange(n, dtype=np.int64), steps)
    j = np.arange(part.size, dtype=np.int64) - np.repeat(np.cumsum(steps) - steps, steps)
    off = bounds[part, 0] + j * chunk
    nb = np.minimum(chunk, bounds[part, 1] - off)
    for x in (part, off, nb):
        x.setflags(write=False)
    return part, off, nb


def network_rows(table: np.ndarray, offsets: np.ndarray, layout, group: tuple[int, ...],
                 channels: int, p2p: P2pNet, protocol: str = "Simple",
                 hop_bytes: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replace the rows of ``table`` (:data:`~tokenpcap.collectives.transfers.TRANSFER_DTYPE`,
    one call of a point-to-point algorithm) that cross nodes by NCCL's messages of each hop
    (:func:`send_messages`) on the NICs :func:`tokenpcap.collectives.pxn.p2p_routes` names,
    each preceded by its NVLink copy to the proxy GPU when the proxy is not the sender.

    ``offsets``: int64 ``(n_hops,)`` each hop's offset in the call's buffer; ``group``: the
    communicator's ranks (its size and whether a node holds two of them); ``protocol``: the
    call's (NCCL sends p2p as Simple or LL, on the same connection and PXN path, and a message's
    ``bytes`` are its LL lines, :func:`tokenpcap.collectives.protocols.wire_bytes`);
    ``hop_bytes``: int64 ``(n_hops,)`` the data of each hop (default: the sum of its rows'
    ``bytes``, which is the data under Simple). Returns ``(table,
    dep_t, dep_x)``: the new table (NVLink rows unchanged, then ordered by step, hop, channel,
    slice; a copy before its network message) and the pairs "row ``dep_t`` waits for the
    arrival of row ``dep_x``" (each network message on its copy).
    """
    from tokenpcap.collectives.pxn import p2p_routes

    keep = table[~table["nic"]]
    cross = table[table["nic"]]
    if not cross.size:
        return table, np.zeros(0, np.int64), np.zeros(0, np.int64)
    from tokenpcap.collectives.protocols import wire_bytes

    hop_ids, first = np.unique(cross["hop"], return_index=True)
    hb = (np.asarray(hop_bytes, np.int64) if hop_bytes is not None else
          np.bincount(cross["hop"], weights=cross["bytes"].astype(np.float64)).astype(np.int64))
    head = cross[first]
    sizes = hb[hop_ids]
    gpn = layout.gpus_per_node
    nvlink_peers = bool((np.bincount(np.asarray(group, np.int64) // gpn) > 1).any())
    n_ranks = len(group)
    parts = []
    for b in np.unique(sizes).tolist():
        which = np.flatnonzero(sizes == b)
        part, off, nb = send_messages(int(b), int(n_ranks), int(channels), p2p, nvlink_peers,
                                      protocol)
        m = part.size
        hi = np.repeat(which, m)
        rows = np.zeros(hi.size, table.dtype)
        for f in ("hop", "step", "src", "dst", "chunk"):
            rows[f] = head[f][hi]
        rows["channel"] = np.tile(part % channels, which.size)
        j = np.arange(m, dtype=np.int64) - np.searchsorted(part, part)
        rows["slice"] = np.tile(j, which.size)
        rows["bytes"] = np.tile(wire_bytes(protocol, nb), which.size)
        rows["byte_offset"] = offsets[hop_ids[hi]] + np.tile(off, which.size)
        parts.append(rows)
    return _routed(keep, np.concatenate(parts), layout, p2p)


def _routed(keep: np.ndarray, net: np.ndarray, layout, p2p: P2pNet
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`network_rows`'s result of the NVLink rows ``keep`` and the network messages
    ``net``: the PXN route of each message and its copy to the proxy GPU."""
    from tokenpcap.collectives.pxn import p2p_routes

    proxy, snic, dnic = p2p_routes(net["src"], net["dst"], layout, p2p.pxn_level, p2p.cross_nic)
    net["nic"] = True
    net["src_nic"], net["dst_nic"] = snic, dnic
    fwd_mask = proxy != net["src"]
    net["via"] = np.where(fwd_mask, proxy, -1)
    fwd = net[fwd_mask].copy()
    fwd["nic"] = False
    fwd["src_nic"] = fwd["dst_nic"] = -1
    keep = keep.copy()
    keep["via"] = -1
    allrows = np.concatenate([keep, fwd, net])
    kind = np.concatenate([np.zeros(keep.size, np.int8), np.zeros(fwd.size, np.int8),
                           np.ones(net.size, np.int8)])
    order = np.lexsort((kind, allrows["slice"], allrows["channel"], allrows["hop"],
                        allrows["step"]))
    new = allrows[order]
    where = np.empty(order.size, np.int64)
    where[order] = np.arange(order.size)
    n_keep, n_fwd = keep.size, fwd.size
    dep_x = where[n_keep + np.arange(n_fwd)]
    dep_t = where[n_keep + n_fwd + np.flatnonzero(fwd_mask)]
    return new, dep_t, dep_x
