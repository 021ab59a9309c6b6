"""NCCL's choice of algorithm, protocol and channels for one collective, as its tuner makes it.

A port of NCCL's default tuner (NVIDIA/nccl commit 5067397c): ``ncclTopoTuneModel``
(``src/graph/tuning.cc``) fills a latency (us) and bandwidth (GB/s) per (function, algorithm,
protocol); ``ncclTopoGetAlgoTime`` turns a size into a time, ``lat + nBytes / (1000 bw)``; and
``topoGetAlgoInfo`` (``src/enqueue.cc``) takes the fastest enabled pair and trims the channels
for small sizes (``while (nBytes < nc * nt * threadThreshold) nc--``). ``nBytes`` is the whole
buffer (``ncclFuncMaxSendRecvCount``: ``count * nRanks`` for AllGather and ReduceScatter), which
is the plan's ``message_bytes``.

Algorithms evaluated: Ring, Tree and PAT (PAT only with one GPU per node, ``ncclPatEnable``).
NVLS and NVLS_TREE need NVLink SHARP (multicast) and CollNet a SHARP network, which the cluster
profiles do not describe, so they are not candidates (NCCL disables NVLS across nodes without
CollNet anyway). Point-to-point (SendRecv, AllToAll) has no tuner: a peer's transfer goes LL
when its bytes are at most ``nChannels * NCCL_P2P_LL_THRESHOLD`` (16 KiB, ``src/enqueue.cc``
``addP2pToPlan``), else Simple; ``NCCL_PROTO`` does not apply to it.

The topology graph the tuner reads is the one NCCL's search builds (``src/graph/search.cc``,
``connect.cc``), summarised for a rail-optimised node (one NIC per GPU) of Hopper/Blackwell or
older GPUs, with the communicator holding ``ppn`` GPUs of each of ``nNodes`` nodes:

* across nodes, one search channel per NIC of those GPUs (``min(ppn, nics_per_node)``) at the
  largest speed of ``sm90SpeedArrayInter`` (``speedArrayInter`` before Hopper, ``sm100...`` on
  Blackwell) not above the NIC's GB/s; inside one node, one channel at the largest
  ``...SpeedArrayIntra`` speed not above the GPU's NVLink GB/s, as many as the NVLink bandwidth
  holds (at most ``MAXCHANNELS / 2``);
* ``ncclTopoDupChannels``: doubled at half the speed when ``bwIntra >= 25`` unless
  ``ccMin > 80 && bwIntra < 50 && nChannels > 4``;
* the communicator's channels: ``min(MAXCHANNELS, 2 * nChannels)`` (``connect.cc``, "Duplication
  should be complete now"), doubled again when ``ccMin >= 90 && nNodes > 1 && bwIntra > 45 &&
  nChannels < 16``;
* the tree graph equals the ring graph (``treeGraph->minChannels = maxChannels =
  ringGraph->nChannels``), balanced-tree pattern across nodes; ``typeIntra`` NVLink,
  ``typeInter`` at most PXN (LL128 enabled on Hopper), ``latencyInter`` 0, an Intel x86 host
  (``getNetOverhead`` 1 us, ``llMaxBws`` row 0 across nodes).

``NCCL_PROTO`` and ``NCCL_ALGO`` take NCCL's list syntax (``parseList``): ``"LL,Simple"``,
``"^LL128"``, ``"LL;allreduce:Simple"``, names case-insensitive.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tokenpcap.errors import InputError
from tokenpcap.collectives.protocols import PROTOCOL_IDS

__all__ = ["ALGOS", "FUNCS", "Graph", "CommTopology", "Choice", "comm_topology", "parse_list",
           "tune_model", "algo_time", "choose_collective", "choose_p2p", "compcap_of",
           "P2P_LL_THRESHOLD_BYTES", "MAX_CHANNELS"]

#: ``ncclAlgoStr`` in NCCL_ALGO_* order (``src/include/device.h``).
ALGOS = ("Tree", "Ring", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")
#: ``ncclFuncStr`` in ncclFunc_t order.
FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv")
MAX_CHANNELS = 64                               # MAXCHANNELS, src/include/device.h
P2P_LL_THRESHOLD_BYTES = 16384                  # NCCL_P2P_LL_THRESHOLD default, src/enqueue.cc
_PCI_BW = 12.0                                  # src/graph/topo.h
_TREE, _RING, _PAT = 0, 1, 6
_LL, _LL128, _SIMPLE = 0, 1, 2
_NVLINK, _PCI, _NET = 0, 1, 2

# tuning.cc ncclTunerConstantsDefaults (only the Tree, Ring and PAT rows are read)
_BASE_LAT = {_TREE: (6.8, 14.0, 8.4), _RING: (6.6, 14.0, 8.4), _PAT: (8.0, 8.0, 8.0)}
_HW_LAT = {
    _NVLINK: {_TREE: (0.6, 1.25, 4.0), _RING: (0.6, 1.9, 3.4), _PAT: (0, 0, 4.0)},
    _PCI: {_TREE: (1.0, 1.9, 4.0), _RING: (1.0, 2.5, 5.7), _PAT: (0, 0, 4.0)},
    _NET: {_TREE: (5.0, 8.5, 14), _RING: (2.7, 4.0, 14.0), _PAT: (0, 0, 14)},
}
_LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (2 * 141.0, 2 * 45.0, 2 * 35.0))
_PER_CH_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (40.0,) * 3)
_PER_CH_TREE_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
_PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)
# search.cc speed arrays (GB/s per channel)
_SPEED_INTRA = {0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
                90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
                100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)}
_SPEED_INTER = {0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0,
                    2.4, 1.2, 0.24, 0.12),
                90: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                     0.24, 0.12),
                100: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                      6.0, 3.0, 2.4, 1.2, 0.24, 0.12)}
# comm.h / device.h thread constants
_MAX_THREADS = {_LL: 512, _LL128: 640, _SIMPLE: 512}      # NCCL_LL/LL128/SIMPLE_MAX_NTHREADS
_THREAD_THRESHOLD = {_LL: 8, _LL128: 8, _SIMPLE: 64}      # NCCL_*_THREAD_THRESHOLD

#: GPU name prefix -> compute capability x 10 (the profiles name the GPU, NCCL reads the SM).
_COMPCAP = {"A100": 80, "A800": 80, "H100": 90, "H800": 90, "H200": 90, "H20": 90, "B200": 100,
            "GB200": 100, "B100": 100, "V100": 70}


def compcap_of(gpu_name: str) -> int:
    """Compute capability x 10 of a profile's GPU (its name's prefix: A100 80, H100/H800 90,
    B200 100, V100 70); 90 for a name not listed (the bundled clusters are Hopper)."""
    for prefix in sorted(_COMPCAP, key=len, reverse=True):
        if gpu_name.upper().startswith(prefix):
            return _COMPCAP[prefix]
    return 90


def _cc_index(cc: int) -> int:
    return 3 if cc >= 100 else 2 if cc >= 90 else 1 if cc >= 80 else 0


def _log2i(n: int) -> int:
    return n.bit_length() - 1          # log2Down: -1 for 0


@dataclass(frozen=True)
class Graph:
    """The fields of ``struct ncclTopoGraph`` the tuner reads (GB/s per channel)."""

    n_channels: int
    bw_intra: float
    bw_inter: float


@dataclass(frozen=True)
class CommTopology:
    """One communicator: ``n_ranks`` GPUs on ``n_nodes`` nodes, the ring graph (= tree graph),
    the communicator's channels and the GPUs' compute capability x 10."""

    n_ranks: int
    n_nodes: int
    graph: Graph
    comm_channels: int
    compcap: int


def comm_topology(n_ranks: int, n_nodes: int, nics_per_node: int, nic_gbps: float,
                  nvlink_gbps: float, compcap: int) -> CommTopology:
    """The graph NCCL's search finds for a communicator (module docstring)."""
    ppn = max(1, n_ranks // max(1, n_nodes))
    key = 100 if compcap >= 100 else 90 if compcap >= 90 else 0
    if n_nodes > 1:
        speeds, limit, n = _SPEED_INTER[key], nic_gbps / 8, max(1, min(ppn, nics_per_node))
    else:
        speeds, limit = _SPEED_INTRA[key], nvlink_gbps / 8
    bw = next((s for s in speeds if s <= limit), speeds[-1])
    if n_nodes == 1:
        n = max(1, min(MAX_CHANNELS // 2, int(limit // bw)))
    if bw >= 25.0 and not (compcap > 80 and bw < 50.0 and n > 4):       # ncclTopoDupChannels
        dup = min(2 * n, MAX_CHANNELS // 2)
        bw /= -(-dup // n)
        n = dup
    comm = min(MAX_CHANNELS, 2 * n)
    if compcap >= 90 and n_nodes > 1 and bw > 45.0 and comm < 16:
        comm = min(MAX_CHANNELS, 2 * comm)
    return CommTopology(n_ranks, n_nodes, Graph(n, bw, bw), comm, compcap)


def parse_list(text: str, elems: tuple[str, ...], what: str) -> dict[str, dict[str, bool]]:
    """NCCL's ``parseList`` of ``NCCL_PROTO`` / ``NCCL_ALGO``: per function of :data:`FUNCS`,
    per element, enabled or not. ``None``-like empty text enables everything.

    Raises:
        InputError: an unknown element or function name, or a later entry without a prefix.
    """
    out = {f: {e: True for e in elems} for f in FUNCS}
    for i, token in enumerate(t for t in text.split(";") if t.strip()):
        prefix, _, body = token.rpartition(":")
        if not prefix and i:
            raise InputError(f"{what}: got {text!r}, expected every entry after the first to "
                             f"have a 'function:' prefix")
        unset = body.startswith("^")
        names = [n.strip() for n in body.lstrip("^").split(",") if n.strip()]
        low = {e.lower(): e for e in elems}
        for n in names:
            if n.lower() not in low:
                raise InputError(f"{what}: got {n!r}, expected one of {', '.join(elems)}")
        funcs = [f for f in FUNCS if not prefix or f.lower() == prefix.strip().lower()]
        if not funcs:
            raise InputError(f"{what}: got prefix {prefix!r}, expected one of {', '.join(FUNCS)}")
        chosen = {low[n.lower()] for n in names}
        for f in funcs:
            out[f] = {e: (e in chosen) != unset for e in elems}
    return out


@functools.lru_cache(maxsize=256)
def tune_model(topo: CommTopology, nccl_proto: str = "", nccl_algo: str = ""
               ) -> tuple[dict[tuple[str, int, int], float], dict[tuple[str, int, int], float]]:
    """``ncclTopoTuneModel``: ``(bandwidths, latencies)`` keyed ``(function, algo, proto)``
    (NCCL indices), GB/s and us; a bandwidth 0 means disabled."""
    n_ranks, n_nodes, g, cc = topo.n_ranks, topo.n_nodes, topo.graph, topo.compcap
    ci, index2 = _cc_index(cc), (n_nodes - 1 if n_nodes <= 2 else 2)
    index1 = ci if n_nodes == 1 else 0
    ll_max_bw = _LL_MAX_BWS[index1][index2]
    per_ch_tree, per_ch_ring_ll128 = _PER_CH_TREE[ci][index2], _PER_CH_RING_LL128[ci][index2]
    per_ch_tree_ll128 = _PER_CH_TREE_LL128[ci][index2]
    ppn = n_ranks / n_nodes
    intra_hw, hw = _NVLINK, (_NVLINK if n_nodes == 1 else _NET)
    pat_enable = cc >= 60 and n_nodes == n_ranks
    protos = parse_list(nccl_proto, PROTOCOL_IDS, "NCCL_PROTO")
    algos = parse_list(nccl_algo, ALGOS, "NCCL_ALGO")
    bws: dict[tuple[str, int, int], float] = {}
    lats: dict[tuple[str, int, int], float] = {}
    for coll in FUNCS[:5]:
        nsteps = (2 * (n_ranks - 1) if coll == "AllReduce" else
                  n_ranks - 1 if coll in ("ReduceScatter", "AllGather") else n_ranks)
        for a in (_TREE, _RING, _PAT):
            if coll in ("Broadcast", "Reduce") and a != _RING:
                continue
            if coll in ("ReduceScatter", "AllGather") and a == _TREE:
                continue
            if coll == "AllReduce" and a == _PAT:
                continue
            for p in (_LL, _LL128, _SIMPLE):
                if a == _PAT and (p != _SIMPLE or not pat_enable):
                    continue
                bw = g.bw_intra if n_nodes <= 2 else g.bw_inter
                bus = g.n_channels * bw
                if a == _RING and p == _LL:
                    bus = min(ll_max_bw, bus * .5)
                if a == _RING and p == _LL128:
                    bus = min(bus * 0.92, g.n_channels * per_ch_ring_ll128)
                if a == _TREE and coll == "AllReduce":
                    bus = min(bus * .92, g.n_channels * per_ch_tree)
                if a == _TREE and p == _LL:
                    bus = min(bus * 1.0 / 3.8, ll_max_bw)
                if a == _TREE and p == _LL128:
                    bus = min(bus * (7.0 / 9.0 if n_nodes == 1 else 120.0 / 128.0),
                              g.n_channels * per_ch_tree_ll128)
                if a == _PAT:
                    bus *= .75
                if not (a != _RING and coll in ("AllGather", "ReduceScatter")):
                    bus *= (n_ranks / nsteps) if a == _RING else .5
                lat = _BASE_LAT[a][p]
                intra_lat = _HW_LAT[intra_hw][a][p]
                inter_lat = _HW_LAT[_NET][_TREE][p] if ppn == 1 else _HW_LAT[_NET][a][p]
                if a == _RING:
                    ring_lat = _HW_LAT[hw][a][p]
                    if coll in ("Reduce", "Broadcast"):
                        lat += ring_lat                      # sameChannels
                    else:
                        net_overhead = (1.0 * (3 if p == _SIMPLE else 1)) if n_nodes > 1 else 0.0
                        intra_lat = max(intra_lat, net_overhead)
                        n_inter = (0 if n_nodes == 1 else 2 * (n_nodes - 1) if coll == "AllReduce"
                                   else n_nodes - 1)
                        lat += (nsteps - n_inter) * intra_lat + n_inter * inter_lat
                elif a == _TREE:
                    if coll == "AllReduce":
                        lat += 2 * ((n_ranks // n_nodes - 1) * intra_lat + _log2i(n_nodes) * inter_lat)
                elif coll in ("AllGather", "ReduceScatter"):                       # PAT
                    lat += _log2i(n_nodes) * (inter_lat / 3.5) + n_ranks * 2.8
                enabled = protos[coll][PROTOCOL_IDS[p]] and algos[coll][ALGOS[a]]
                if p == _LL128:                       # protoEnable 2: Hopper up to PXN, NVLink
                    enabled = enabled and cc >= 70
                bws[(coll, a, p)] = bus if enabled else 0.0
                lats[(coll, a, p)] = lat
    return bws, lats


def algo_time(topo: CommTopology, coll: str, a: int, p: int, n_bytes: int,
              nccl_proto: str = "", nccl_algo: str = "") -> float:
    """``ncclTopoGetAlgoTime`` with one op (``numPipeOps`` 1): us, or -1 when disabled."""
    bws, lats = tune_model(topo, nccl_proto, nccl_algo)
    bw, lat = bws.get((coll, a, p), 0.0), lats.get((coll, a, p), 0.0)
    if bw == 0:
        return -1.0
    log_size = _log2i(n_bytes >> 6)
    if a == _TREE and coll == "AllReduce" and 0 <= log_size < 23:
        bw *= _TREE_CORRECTION[p][log_size]
    if (a == _RING and p == _SIMPLE and topo.n_nodes > 1 and coll == "AllReduce"
            and n_bytes // (topo.comm_channels * topo.n_ranks) >= 64):
        lat *= 1.9 if topo.compcap < 80 else 1.4
    return lat + n_bytes / (1000 * bw)


@dataclass(frozen=True)
class Choice:
    """NCCL's pick for one call: ``algorithm`` (NCCL's name), ``protocol`` (a
    :data:`~tokenpcap.collectives.protocols.PROTOCOLS` name), ``channels`` (the channels the
    call runs on) and ``time_us`` (the model's estimate)."""

    algorithm: str
    protocol: str
    channels: int
    time_us: float


def choose_collective(topo: CommTopology, coll: str, n_bytes: int, nccl_proto: str = "",
                      nccl_algo: str = "", algorithms: tuple[str, ...] = ALGOS) -> Choice:
    """``topoGetAlgoInfo`` for Ring/Tree/PAT: the fastest enabled (algorithm, protocol), then
    the channels trimmed for small sizes. ``algorithms`` restricts the candidates further (the
    scenario's own algorithm, when NCCL's choice is not to override it).

    Raises:
        InputError: ``NCCL_PROTO``/``NCCL_ALGO`` leave no algorithm and protocol (NCCL:
            "No algorithm/protocol available").
    """
    if topo.n_ranks <= 1:
        return Choice("Ring", "Simple", 1, 0.0)
    best: tuple[float, int, int] | None = None
    for a in (_TREE, _RING, _PAT):                  # NCCL loops a then p, ties keep the first
        if ALGOS[a] not in algorithms:
            continue
        for p in (_LL, _LL128, _SIMPLE):
            t = algo_time(topo, coll, a, p, n_bytes, nccl_proto, nccl_algo)
            if t >= 0 and (best is None or t < best[0]):
                best = (t, a, p)
    if best is None:
        raise InputError(f"NCCL_PROTO {nccl_proto!r} / NCCL_ALGO {nccl_algo!r}: no algorithm and "
                         f"protocol available for {coll}")
    t, a, p = best
    nc, nt = topo.comm_channels, _MAX_THREADS[p]
    if a == _RING and p == _SIMPLE and topo.graph.bw_intra * topo.graph.n_channels <= _PCI_BW:
        nt = 256
    thr = _THREAD_THRESHOLD[p] * (topo.n_ranks if (a == _RING and p == _LL) else 1)
    while n_bytes < nc * nt * thr and nc >= 2:
        nc -= 1
    return Choice(ALGOS[a], PROTOCOL_IDS[p], nc, t)


def choose_p2p(per_peer_bytes: int, channels: int,
               ll_threshold_bytes: int = P2P_LL_THRESHOLD_BYTES) -> str:
    """The protocol of a point-to-point transfer (``addP2pToPlan``): LL when ``bytes <= channels
    * NCCL_P2P_LL_THRESHOLD``, else Simple. ``NCCL_PROTO`` does not apply to p2p (the LL
    buffers of p2p connections are always set up, ``src/transport/net.cc``); a threshold of 0
    keeps every non-empty transfer Simple."""
    return "LL" if 0 < per_peer_bytes <= channels * ll_threshold_bytes else "Simple"
