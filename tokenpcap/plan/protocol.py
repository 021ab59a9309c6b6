"""The NCCL protocol of every call of a plan, and what NCCL's tuner would have picked.

A collective's protocol is NCCL's choice (:func:`tokenpcap.collectives.tuning.choose_collective`)
among the protocols ``collectives.NCCL_PROTO`` enables, for the algorithm the scenario runs
(``collectives.algorithm``: ring or tree; the hierarchical scheme is not NCCL's and stays
Simple). The communicator is the call's group: its ranks, the nodes they span, its GPUs per node;
the topology graph comes from the cluster (NICs per node, link and NVLink rates, the GPU's
compute capability). A point-to-point call (SendRecv, each AllToAll peer) goes LL when its bytes
per peer are at most ``channels * collectives.NCCL_P2P_LL_THRESHOLD``
(:func:`~tokenpcap.collectives.tuning.choose_p2p`).

With ``collectives.channels: nccl`` a collective runs on the channels NCCL keeps for it: the
communicator's (the rings its search finds, doubled: :func:`~tokenpcap.collectives.tuning.
comm_topology`), fewer for small sizes (``topoGetAlgoInfo``: ``while (nBytes < nc * nThreads *
threadThreshold) nc--``), at most ``collectives.channels``; p2p and the hierarchical scheme keep
``collectives.channels``.

When the tuner, free to choose the algorithm too (``collectives.NCCL_ALGO``), would run a
different algorithm than the scenario's (Tree or PAT instead of the ring), the call still runs
the scenario's algorithm: :meth:`CallProtocols.forced` counts those calls per phase, and the
plan's output says so.
"""
from __future__ import annotations

from tokenpcap.collectives.algorithms import effective_algorithm
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.tuning import choose_collective, choose_p2p, comm_topology, compcap_of
from tokenpcap.config.profiles import Scenario

__all__ = ["CallProtocols", "NCCL_ALGORITHM_NAMES"]

#: The scenario's algorithm -> NCCL's name (the hierarchical scheme has none).
NCCL_ALGORITHM_NAMES = {"ring": "Ring", "tree": "Tree"}
_P2P = ("SendRecv", "AllToAll")


class CallProtocols:
    """The protocol resolver of one scenario (module docstring), cached per call shape."""

    def __init__(self, scenario: Scenario, layout: RankLayout):
        self.scenario = scenario
        self.layout = layout
        self._cache: dict[tuple[str, int, int, int], tuple[str, str | None, int]] = {}

    @property
    def all_simple(self) -> bool:
        """Every call is Simple: ``NCCL_PROTO`` Simple and no p2p LL threshold (today's
        bytes)."""
        c = self.scenario.collectives
        return c.NCCL_PROTO == "Simple" and c.NCCL_P2P_LL_THRESHOLD == 0

    def channels(self, collective: str, group: tuple[int, ...], message_bytes: int) -> int:
        """The channels the call runs on: ``collectives.channels``, or with ``channels: nccl``
        the ones NCCL's ``topoGetAlgoInfo`` keeps for a collective of this size (p2p and the
        hierarchical scheme keep ``collectives.channels``)."""
        cfg = self.scenario.collectives
        if not cfg.channels_by_size:
            return cfg.channels
        return self._choice(collective, tuple(group), int(message_bytes))[2]

    def protocol(self, collective: str, group: tuple[int, ...], message_bytes: int) -> str:
        """The call's protocol name (``LL``, ``LL128`` or ``Simple``)."""
        if self.all_simple:
            return "Simple"
        return self._choice(collective, tuple(group), int(message_bytes))[0]

    def forced(self, collective: str, group: tuple[int, ...], message_bytes: int) -> str | None:
        """``"Tree/LL"``-like: what NCCL's tuner (among the protocols ``NCCL_PROTO`` enables)
        would run when it is not the scenario's algorithm (the scenario's is forced), else
        None."""
        if collective in _P2P or len(group) < 2:
            return None
        return self._choice(collective, tuple(group), int(message_bytes))[1]

    def _choice(self, collective: str, group: tuple[int, ...], s: int) -> tuple[str, str | None, int]:
        nodes = len({r // self.layout.gpus_per_node for r in group})
        key = (collective, len(group), nodes, s)
        if key not in self._cache:
            self._cache[key] = self._decide(collective, len(group), nodes, s)
        return self._cache[key]

    def _decide(self, collective: str, n: int, nodes: int, s: int) -> tuple[str, str | None, int]:
        cfg = self.scenario.collectives
        if collective in _P2P:
            per_peer = s // n if collective == "AllToAll" else s
            return choose_p2p(per_peer, cfg.channels, cfg.NCCL_P2P_LL_THRESHOLD), None, cfg.channels
        if n < 2:
            return "Simple", None, cfg.channels
        c = self.scenario.cluster
        topo = comm_topology(n, nodes, c.nics_per_node, c.link_gbps, c.nvlink_gbps,
                             compcap_of(c.gpu.name))
        proto = "" if cfg.NCCL_PROTO == "auto" else cfg.NCCL_PROTO
        algo = "" if cfg.NCCL_ALGO == "auto" else cfg.NCCL_ALGO
        free = choose_collective(topo, collective, s, proto, algo)
        runs = NCCL_ALGORITHM_NAMES.get(effective_algorithm(collective, cfg.algorithm))
        if runs is None:
            return "Simple", None, cfg.channels
        mine = free if free.algorithm == runs else \
            choose_collective(topo, collective, s, proto, "", algorithms=(runs,))
        # the communicator's channels as NCCL trims them for the size; the scenario's count
        # (the QPs set up per peer) is the ceiling
        return mine.protocol, (None if free.algorithm == runs else
                               f"{free.algorithm}/{free.protocol}"), min(cfg.channels, mine.channels)
