"""The typed objects of a cluster's fabric (``fabric:`` and its ``topology``, ``switch``, ``pfc``
and ``ecmp`` mappings; frozen dataclasses), read and checked by :mod:`tokenpcap.config.fabric`;
the congestion-control ones (``ecn``, ``dcqcn``, ``np``) are in :mod:`tokenpcap.config.cc_types`.
:mod:`tokenpcap.config.profiles` re-exports them (import them from there).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tokenpcap.config.cc_types import DcqcnConfig, EcnConfig, NpConfig

__all__ = ["TopologyConfig", "SwitchConfig", "PfcConfig", "EcmpConfig", "FabricProfile"]


@dataclass(frozen=True)
class TopologyConfig:
    """How the switches are cabled (``fabric.topology``; read and checked by
    :mod:`tokenpcap.config.fabric`, built by :func:`tokenpcap.schedule.engine.topology.build_topology`).

    ``kind``: ``single-switch`` (every NIC on one switch), ``rail-optimized`` (one leaf per rail,
    i.e. NIC index within a node, per scalable unit of ``nodes_per_leaf`` nodes; every leaf to
    every spine), ``leaf-spine`` (all NICs of ``nodes_per_leaf`` consecutive nodes on one leaf)
    or ``clos3`` (pods of ``pods`` nodes, each a rail-optimized two-tier pod, cores above).
    ``None`` sizes take the defaults of :func:`tokenpcap.config.fabric.fabric_shape`.
    ``propagation_ns`` is per tier: (NIC-leaf, leaf-spine, spine-core). ``planes``: copies of
    that topology with no link between them, every NIC with one port of ``link_gbps / planes``
    in each (``dual_tor`` says so: a NIC's ports reach different ToRs; None: ``planes > 1``),
    each QP on the plane ``plane_select`` gives it (``round-robin`` | ``five-tuple``),
    :mod:`tokenpcap.schedule.engine.topology_planes`.
    """

    kind: str = "rail-optimized"
    nodes_per_leaf: int | None = None
    spines: int | None = None
    oversubscription: float = 1.0
    pods: int | None = None
    core_oversubscription: float = 1.0
    nic_link_gbps: float | None = None
    uplink_gbps: float | None = None
    propagation_ns: tuple[int, ...] = (500, 500, 500)
    planes: int = 1
    dual_tor: bool | None = None
    plane_select: str = "round-robin"


@dataclass(frozen=True)
class SwitchConfig:
    """One switch (``fabric.switch``): forwarding mode, pipeline latency per hop (ns), the
    shared buffer (bytes) and the strict-priority class of ACKs and CNPs (0..7)."""

    forwarding: str = "cut-through"        # store-and-forward | cut-through
    pipeline_ns: int = 700
    buffer_bytes: int = 165_660_324
    control_priority: int = 6


@dataclass(frozen=True)
class PfcConfig:
    """Priority flow control (IEEE 802.1Qbb) and the ingress buffer accounting
    (``fabric.pfc``): per (ingress port, priority) ``reserve_bytes`` guaranteed, then the
    shared pool up to the dynamic threshold alpha x free shared buffer with alpha =
    2**``dynamic_th``, then ``headroom_bytes`` (None: 3 x port rate x propagation, HPCC ns-3
    ``third.cc``). XON at threshold - ``resume_offset_bytes``; an XOFF pauses for
    ``pause_quanta`` x 512 bit times, or until the XON when ``pause_until_resume``."""

    enabled: bool = True
    priorities: tuple[int, ...] = (3,)
    reserve_bytes: int = 18_796
    headroom_bytes: int | None = 612_140
    dynamic_th: int = 0
    dynamic_th_rate_scaled: bool = False
    resume_offset_bytes: int = 3_556
    pause_quanta: int = 65_535
    pause_until_resume: bool = False


@dataclass(frozen=True)
class EcmpConfig:
    """ECMP path choice (``fabric.ecmp``): ``mode`` five-tuple | dest-qp | spray, ``hash``
    crc32 | hpcc-murmur3, ``seed`` combined with the switch index into each switch's seed."""

    mode: str = "five-tuple"
    hash: str = "crc32"
    seed: int = 0


@dataclass(frozen=True)
class FabricProfile:
    """The network between the NICs (a cluster profile's ``fabric:``). ``model`` ``ideal``
    (the default: no switch, no queue; every other field is then unused and changes no output)
    or ``queued`` (switches with queues and PFC in the engine). ``preset`` names the preset the
    values came from (:data:`tokenpcap.config.fabric.PRESETS`). ``timing``: ``rocev2`` (our
    frames with layer-1 overhead, serialization rounded up to whole ns) or ``hpcc-ns3``
    (frame = payload + 48 B, no layer-1 overhead, serialization truncated to whole ns, an ACK
    per packet, as HPCC ns-3 does). ``qlen_sample_ns``: queue-depth sampling interval.
    ``cc`` ``none`` | ``dcqcn``, with ``ecn``, ``dcqcn`` and ``np``: :mod:`tokenpcap.config.cc_types`."""

    model: str = "ideal"                   # ideal | queued
    preset: str | None = None
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    switch: SwitchConfig = field(default_factory=SwitchConfig)
    pfc: PfcConfig = field(default_factory=PfcConfig)
    ecmp: EcmpConfig = field(default_factory=EcmpConfig)
    timing: str = "rocev2"                 # rocev2 | hpcc-ns3
    qlen_sample_ns: int = 1000
    cc: str = "none"                       # none | dcqcn
    ecn: EcnConfig = field(default_factory=EcnConfig)
    dcqcn: DcqcnConfig = field(default_factory=DcqcnConfig)
    np: NpConfig = field(default_factory=NpConfig)

    @property
    def queued(self) -> bool:
        """True when the fabric is modelled (``model == "queued"``)."""
        return self.model == "queued"
