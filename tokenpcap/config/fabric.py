"""A cluster profile's ``fabric:`` mapping turned into a :class:`FabricProfile`, and the sizes of
the topology it describes (:func:`fabric_shape`).

Absent, or ``model: ideal``: the ideal fabric (no switch; nothing in any output changes).
``model: queued``: switches with queues and PFC, and with ``cc: dcqcn`` ECN marks, CNPs and
DCQCN (the keys of :mod:`tokenpcap.config.fabric_cc`). ``preset:`` (:data:`PRESETS`, numbers and
sources in :mod:`tokenpcap.config.fabric_presets`) fills every key; a key given in the profile
overrides the preset's; a key neither gives takes the default of the specs below (the
``th5-400g`` values, topology ``rail-optimized``). A queued fabric is checked against the
cluster: the topology must hold its NICs, and reserve plus headroom of every port of a switch
must fit that switch's buffer.

Sizes when a topology key is null (:func:`fabric_shape`): ``nodes_per_leaf`` all nodes (of the
pod, for ``clos3``); ``pods`` all nodes; ``spines`` ``nics_per_node`` per pod (as
``export --to hpcc`` writes, one per rail); ``clos3`` has as many cores as spines per pod, every
pod spine cabled to every core. A null ``uplink_gbps`` is the NIC rate times ``ceil(down links
/ (oversubscription x up links))`` (``export/hpcc.py`` ``_topology``: ``ceil(nodes /
nics_per_node)`` x the NIC rate), so the down:up bandwidth ratio is at most the one asked for,
and equal to it when it divides.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import (LINK_GBPS_RANGE, MAX_ECMP_SEED, MAX_FABRIC_PLANES,
                                     MAX_LATENCY_NS, MAX_SWITCH_BUFFER_BYTES, MAX_SWITCH_PORTS,
                                     MAX_WORLD_SIZE)
from tokenpcap.config.cc_types import DcqcnConfig, EcnConfig, NpConfig
from tokenpcap.config.fabric_cc import CC_MODES, DCQCN_SPEC, ECN_SPEC, NP_SPEC, check_cc
from tokenpcap.config.fabric_presets import PRESETS, FabricContext
from tokenpcap.config.fabric_types import (EcmpConfig, FabricProfile, PfcConfig, SwitchConfig,
                                           TopologyConfig)
from tokenpcap.errors import ProfileError

__all__ = ["PRESETS", "TOPOLOGY_KINDS", "FabricContext", "FabricShape", "fabric_from",
           "fabric_shape", "plane_port_gbps", "auto_headroom_bytes", "port_dynamic_th"]

TOPOLOGY_KINDS = ("single-switch", "rail-optimized", "leaf-spine", "clos3")


def _propagation(file: Path | None, key: str, value: Any) -> tuple[int, ...]:
    """An integer (every tier) or a list of 3 (NIC-leaf, leaf-spine, spine-core), ns."""
    one = yc.integer(0, MAX_LATENCY_NS)
    expected = (f"an integer in [0, {MAX_LATENCY_NS:,}] ns or a list of 3 of them "
                "(NIC-leaf, leaf-spine, spine-core)")
    if isinstance(value, int) and not isinstance(value, bool):
        return (one(file, key, value),) * 3
    if isinstance(value, list) and len(value) == 3:
        try:
            return tuple(one(file, key, v) for v in value)
        except ProfileError:
            pass
    raise ProfileError(file, key, value, expected)


_RATE = yc.number(ge=LINK_GBPS_RANGE[0], le=LINK_GBPS_RANGE[1])

def _topology(file: Path | None, key: str, value: Any) -> dict:
    """``topology``: a mapping, or a kind's name alone (``topology: single-switch`` is
    ``topology: {kind: single-switch}``)."""
    if isinstance(value, str):
        return {"kind": yc.enum(*TOPOLOGY_KINDS)(file, f"{key}.kind", value)}
    try:
        return yc.mapping(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value, "a mapping (key: value) or a topology kind: "
                           + ", ".join(TOPOLOGY_KINDS)) from None


_FABRIC_SPEC = {
    "model": (yc.enum("ideal", "queued"), "ideal"),
    "preset": (yc.optional(yc.enum(*PRESETS)), None),
    "topology": (yc.optional(_topology), None),
    "switch": (yc.optional(yc.mapping), None),
    "pfc": (yc.optional(yc.mapping), None),
    "ecmp": (yc.optional(yc.mapping), None),
    "timing": (yc.enum("rocev2", "hpcc-ns3"), "rocev2"),
    "qlen_sample_ns": (yc.integer(1, MAX_LATENCY_NS), 1000),
    "cc": (yc.enum(*CC_MODES), "none"),
    "ecn": (yc.optional(yc.mapping), None),
    "dcqcn": (yc.optional(yc.mapping), None),
    "np": (yc.optional(yc.mapping), None),
}

_TOPOLOGY_SPEC = {
    "kind": (yc.enum(*TOPOLOGY_KINDS), "rail-optimized"),
    "nodes_per_leaf": (yc.optional(yc.integer(1, MAX_WORLD_SIZE)), None),
    "spines": (yc.optional(yc.integer(1, MAX_SWITCH_PORTS)), None),
    "oversubscription": (yc.number(ge=1.0, le=1024.0), 1.0),
    "pods": (yc.optional(yc.integer(1, MAX_WORLD_SIZE)), None),
    "core_oversubscription": (yc.number(ge=1.0, le=1024.0), 1.0),
    "nic_link_gbps": (yc.optional(_RATE), None),
    "uplink_gbps": (yc.optional(_RATE), None),
    "propagation_ns": (yc.optional(_propagation), None),
    "planes": (yc.integer(1, MAX_FABRIC_PLANES), 1),
    "dual_tor": (yc.optional(yc.boolean), None),
    "plane_select": (yc.enum("round-robin", "five-tuple"), "round-robin"),
}

_SWITCH_SPEC = {
    "forwarding": (yc.enum("store-and-forward", "cut-through"), "cut-through"),
    "pipeline_ns": (yc.integer(0, MAX_LATENCY_NS), 700),
    "buffer_bytes": (yc.integer(1, MAX_SWITCH_BUFFER_BYTES), 165_660_324),
    "control_priority": (yc.integer(0, 7), 6),
}

_PFC_SPEC = {
    "enabled": (yc.boolean, True),
    "priorities": (yc.optional(yc.priorities), None),
    "reserve_bytes": (yc.integer(0, MAX_SWITCH_BUFFER_BYTES), 18_796),
    "headroom_bytes": (yc.optional(yc.integer(0, MAX_SWITCH_BUFFER_BYTES)), 612_140),
    "dynamic_th": (yc.integer(-16, 16), 0),
    "dynamic_th_rate_scaled": (yc.boolean, False),
    "resume_offset_bytes": (yc.integer(0, MAX_SWITCH_BUFFER_BYTES), 3_556),
    "pause_quanta": (yc.integer(1, 65_535), 65_535),
    "pause_until_resume": (yc.boolean, False),
}

_ECMP_SPEC = {
    "mode": (yc.enum("five-tuple", "dest-qp", "spray"), "five-tuple"),
    "hash": (yc.enum("crc32", "hpcc-murmur3"), "crc32"),
    "seed": (yc.integer(0, MAX_ECMP_SEED), 0),
}

#: section -> its spec, in the order of FabricProfile
_SECTIONS = {"topology": _TOPOLOGY_SPEC, "switch": _SWITCH_SPEC, "pfc": _PFC_SPEC,
             "ecmp": _ECMP_SPEC, "ecn": ECN_SPEC, "dcqcn": DCQCN_SPEC, "np": NP_SPEC}


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _section(file: Path | None, prefix: str, raw: Any, spec: dict, preset: dict,
             ctx: FabricContext) -> dict[str, Any]:
    """``raw`` read with ``spec``; the preset's values fill the keys ``raw`` does not give."""
    v = yc.read_mapping(file, prefix, {} if raw is None else raw, spec)
    given = set(raw or {})
    for k, pv in preset.items():
        if k not in given:
            v[k] = pv(ctx) if callable(pv) else pv
            if k == "priorities" and v[k] is not None:
                v[k] = tuple(v[k])
    return v


def fabric_from(file: Path | None, prefix: str, data: Any, ctx: FabricContext) -> FabricProfile:
    """The fabric of mapping ``data`` (None: absent) at dotted key ``prefix`` of ``file``.

    An ideal fabric is only read (keys and ranges), not checked against the cluster.

    Raises:
        ProfileError: unknown key or preset, a value out of range; for a queued fabric: a
            control priority that is also lossless, a topology that cannot hold the cluster's
            NICs, planes that do not split link_gbps into whole Mb/s, dual_tor against planes,
            a NIC link off the NIC's (per-plane) rate, headroom larger than the buffer, or
            reserve + headroom of a switch's ports over its buffer; the checks of
            :func:`tokenpcap.config.fabric_cc.check_cc` (ECN, DCQCN, CNP class); the message
            names ``file`` and ``prefix.key``.
    """
    v = yc.read_mapping(file, prefix, {} if data is None else data, _FABRIC_SPEC)
    preset = PRESETS.get(v["preset"], {}) if v["preset"] is not None else {}
    given = set(data or {})
    for k in ("timing", "qlen_sample_ns", "cc"):
        if k not in given and k in preset:
            v[k] = preset[k]
    parts = {name: _section(file, _join(prefix, name), v[name], spec, preset.get(name, {}), ctx)
             for name, spec in _SECTIONS.items()}
    t, sw, pfc = parts["topology"], parts["switch"], parts["pfc"]
    if t["propagation_ns"] is None:
        t["propagation_ns"] = (max(1, int(ctx.latency_ns) // 2),) * 3
    if pfc["priorities"] is None:
        pfc["priorities"] = (int(ctx.pcp),)
    ecn = parts["ecn"]
    if ecn["enabled"] is None:
        ecn["enabled"] = v["cc"] == "dcqcn"
    if ecn["priorities"] is None:
        ecn["priorities"] = (int(ctx.pcp),)
    fabric = FabricProfile(model=v["model"], preset=v["preset"],
                           topology=TopologyConfig(**t), switch=SwitchConfig(**sw),
                           pfc=PfcConfig(**pfc), ecmp=EcmpConfig(**parts["ecmp"]),
                           timing=v["timing"], qlen_sample_ns=v["qlen_sample_ns"], cc=v["cc"],
                           ecn=EcnConfig(**ecn), dcqcn=DcqcnConfig(**parts["dcqcn"]),
                           np=NpConfig(**parts["np"]))
    key = (lambda k: _join(prefix, k))
    check_cc(fabric, ctx.link_gbps, ctx.pcp, lambda k: (file, key(k)))
    if not fabric.queued:
        extra = sorted(k for k in given - {"model", "cc"} if (data or {})[k] not in (None, {}))
        if extra:
            raise ProfileError(file, key("model"), fabric.model,
                               f"'queued' when the fabric sets {', '.join(extra)} (an ideal "
                               "fabric has no switch: its keys would change nothing)")
        return fabric
    _check_planes(fabric.topology, ctx, lambda k: (file, key(f"topology.{k}")))
    if fabric.switch.control_priority in fabric.pfc.priorities:
        raise ProfileError(file, key("switch.control_priority"), fabric.switch.control_priority,
                           f"a priority outside the lossless pfc.priorities "
                           f"{list(fabric.pfc.priorities)} (control frames must not be paused)")
    shape = fabric_shape(ctx.nodes, ctx.nics_per_node, ctx.link_gbps, fabric.topology,
                         where=lambda k: (file, key(f"topology.{k}")))
    _check_buffer(fabric, shape, lambda k: (file, key(k)))
    return fabric


def plane_port_gbps(link_gbps: float, planes: int) -> float:
    """The rate (Gb/s) of each of a NIC's ``planes`` ports: its ``link_gbps`` split evenly (Alibaba
    HPN: a 400G NIC as 2 x 200G, one port per plane)."""
    return float(Fraction(repr(float(link_gbps))) / int(planes))


def _check_planes(t: TopologyConfig, ctx: FabricContext,
                  where: Callable[[str], tuple[Path | None, str]]) -> None:
    """The NIC's rate splits into ``planes`` ports of whole Mb/s (what ns-3's ``DataRate`` text
    and a port speed can say), ``dual_tor`` agrees with ``planes``, and ``nic_link_gbps`` is the
    port rate."""
    port = Fraction(repr(float(ctx.link_gbps))) / t.planes
    if (port * 1000).denominator != 1:
        raise ProfileError(*where("planes"), t.planes,
                           f"a number of planes that splits link_gbps {ctx.link_gbps:g} into "
                           "ports of whole Mb/s (one port per plane)")
    if t.dual_tor is True and t.planes == 1:
        raise ProfileError(*where("dual_tor"), True,
                           "false or null with planes 1 (two ToRs that share one plane's "
                           "spines are not modelled: set planes 2, a ToR in each plane)")
    if t.dual_tor is False and t.planes > 1:
        raise ProfileError(*where("dual_tor"), False,
                           f"true or null with planes {t.planes} (each plane has its own ToRs, "
                           "so a NIC's ports reach different ToRs)")
    nl = t.nic_link_gbps
    if nl is not None and Fraction(repr(float(nl))) != port:
        what = ("the cluster's link_gbps" if t.planes == 1 else
                f"link_gbps {ctx.link_gbps:g} / planes {t.planes}:")
        raise ProfileError(*where("nic_link_gbps"), nl,
                           f"null or {what} {float(port):g} (a NIC's link runs at the NIC's "
                           "rate, split evenly among its planes; change link_gbps to change "
                           "both)")


@dataclass(frozen=True)
class FabricShape:
    """The sizes of a topology (:func:`fabric_shape`). ``pods`` pods of ``pod_nodes`` nodes;
    per pod ``leaves`` leaves of ``leaf_nics`` NIC ports each and ``spines`` spines; ``cores``
    cores (clos3 only, else 0); link rates in Gb/s (``core_gbps`` 0 without cores); the ports
    of each kind of switch as ``(count, gbps, tier)`` groups (tier 0 NIC-leaf, 1 leaf-spine, 2
    spine-core; ``propagation_ns[tier]``)."""

    kind: str
    pods: int
    pod_nodes: int
    nodes_per_leaf: int
    leaves: int
    leaf_nics: int
    spines: int
    cores: int
    nic_gbps: float
    uplink_gbps: float
    core_gbps: float
    leaf_ports: tuple[tuple[int, float, int], ...]
    spine_ports: tuple[tuple[int, float, int], ...]
    core_ports: tuple[tuple[int, float, int], ...]


def _rate_for(nic_gbps: float, down_gbps: Fraction, ratio: float, up_links: int) -> float:
    """The NIC rate times ``ceil(down / (ratio x up_links x NIC rate))``: the smallest whole
    multiple of the NIC rate that keeps down:up at most ``ratio``."""
    n = math.ceil(down_gbps / (Fraction(ratio) * up_links * Fraction(nic_gbps)))
    return float(nic_gbps) * max(1, n)


def fabric_shape(nodes: int, nics_per_node: int, link_gbps: float, t: TopologyConfig,
                 where: Callable[[str], tuple[Path | None, str]] = lambda k: (None, k)
                 ) -> FabricShape:
    """The sizes of topology ``t`` for ``nodes`` nodes of ``nics_per_node`` NICs at
    ``link_gbps`` (module docstring for the defaults); with ``t.planes > 1`` the sizes of one
    plane (every plane is the same, its NIC links at :func:`plane_port_gbps`). ``where(key)``
    names ``(file, dotted key)`` of a topology key in errors.

    Raises:
        ProfileError: ``pods`` or ``nodes_per_leaf`` does not divide the nodes (of a pod), or a
            switch would have more than ``MAX_SWITCH_PORTS`` ports.
    """
    def fail(k: str, got: Any, expected: str) -> ProfileError:
        return ProfileError(*where(k), got, expected)

    nic = float(t.nic_link_gbps if t.nic_link_gbps is not None
                else plane_port_gbps(link_gbps, t.planes))
    pod_nodes = nodes
    if t.kind == "clos3" and t.pods is not None:
        if nodes % t.pods:
            raise fail("pods", t.pods, f"a divisor of the cluster's {nodes} nodes (nodes per pod)")
        pod_nodes = t.pods
    pods = nodes // pod_nodes
    if t.kind == "single-switch":
        ports = nodes * nics_per_node
        if ports > MAX_SWITCH_PORTS:
            raise fail("kind", t.kind, f"a topology with at most {MAX_SWITCH_PORTS} ports per "
                                       f"switch (one switch would have {ports})")
        return FabricShape(t.kind, 1, nodes, nodes, 1, ports, 0, 0, nic, 0.0, 0.0,
                           ((ports, nic, 0),), (), ())
    npl = t.nodes_per_leaf if t.nodes_per_leaf is not None else pod_nodes
    if pod_nodes % npl:
        what = "the pod's" if t.kind == "clos3" else "the cluster's"
        raise fail("nodes_per_leaf", npl, f"a divisor of {what} {pod_nodes} nodes")
    units = pod_nodes // npl
    rail = t.kind in ("rail-optimized", "clos3")
    leaves = units * nics_per_node if rail else units
    leaf_nics = npl if rail else npl * nics_per_node
    spines = t.spines if t.spines is not None else nics_per_node
    up = (float(t.uplink_gbps) if t.uplink_gbps is not None else
          _rate_for(nic, Fraction(leaf_nics) * Fraction(nic), t.oversubscription, spines))
    cores = spines if t.kind == "clos3" else 0
    core = 0.0
    if cores:
        core = (float(t.uplink_gbps) if t.uplink_gbps is not None else
                _rate_for(nic, Fraction(leaves) * Fraction(up), t.core_oversubscription, cores))
    shape = FabricShape(t.kind, pods, pod_nodes, npl, leaves, leaf_nics, spines, cores, nic, up,
                        core, ((leaf_nics, nic, 0), (spines, up, 1)),
                        ((leaves, up, 1),) + (((cores, core, 2),) if cores else ()),
                        ((pods * spines, core, 2),) if cores else ())
    for name, groups, k in (("leaf", shape.leaf_ports, "nodes_per_leaf"),
                            ("spine", shape.spine_ports, "spines"),
                            ("core", shape.core_ports, "pods")):
        n = sum(c for c, _, _ in groups)
        if n > MAX_SWITCH_PORTS:
            got = getattr(t, k)
            raise fail(k, got, f"a topology with at most {MAX_SWITCH_PORTS} ports per switch "
                               f"(a {name} would have {n}; set nodes_per_leaf/pods smaller)")
    return shape


def auto_headroom_bytes(port_gbps: float, propagation_ns: int) -> int:
    """PFC headroom of one port when ``pfc.headroom_bytes`` is null: HPCC ns-3 ``third.cc``
    ``headroom = rate * delay / 8 / 1000000000 * 3`` (rate in bit/s, delay in ns, integer
    division as in the C++: three times the bytes in flight over the link)."""
    rate_bps = int(round(float(port_gbps) * 1e9))
    return rate_bps * int(propagation_ns) // 8 // 1_000_000_000 * 3


def port_dynamic_th(pfc: PfcConfig, port_gbps: float, nic_gbps: float) -> int:
    """The dynamic threshold exponent of an ingress port (alpha = 2**result of the free shared
    buffer): ``pfc.dynamic_th``, plus (``dynamic_th_rate_scaled``) one per halving of the port
    rate needed to reach the NIC rate, while negative: HPCC ns-3 ``third.cc`` ``while (rate >
    nic_rate && pfc_a_shift > 0) { pfc_a_shift--; rate /= 2; }`` with ``dynamic_th =
    -pfc_a_shift``."""
    th = int(pfc.dynamic_th)
    if pfc.dynamic_th_rate_scaled:
        rate, nic = int(round(port_gbps * 1e9)), int(round(nic_gbps * 1e9))
        while rate > nic and th < 0:
            th += 1
            rate //= 2
    return th


#: Buffer a switch needs per port at least: one frame of the largest PMTU (4,096 B payload + 74 B
#: of RoCEv2 headers, rounded up): a store-and-forward port must hold the frame it forwards.
MIN_PORT_BUFFER_BYTES = 4_224


def _check_buffer(f: FabricProfile, shape: FabricShape,
                  where: Callable[[str], tuple[Path | None, str]]) -> None:
    """Headroom and reserve of every (ingress port, lossless priority) of a switch must fit
    its buffer (SONiC and HPCC ns-3 both take them out of the shared pool first)."""
    if not f.pfc.enabled:
        return
    buf, prop = f.switch.buffer_bytes, f.topology.propagation_ns
    hr = f.pfc.headroom_bytes
    if hr is not None and hr > buf:
        raise ProfileError(*where("pfc.headroom_bytes"), hr,
                           f"at most switch.buffer_bytes {buf:,}")
    prios = len(f.pfc.priorities)
    for name, groups in (("leaf", shape.leaf_ports), ("spine", shape.spine_ports),
                         ("core", shape.core_ports)):
        ports = sum(c for c, _, _ in groups)
        if ports and buf < ports * MIN_PORT_BUFFER_BYTES:
            raise ProfileError(*where("switch.buffer_bytes"), buf,
                               f"at least {ports * MIN_PORT_BUFFER_BYTES:,} (one largest RoCEv2 "
                               f"frame, {MIN_PORT_BUFFER_BYTES:,} B, for each of the {ports} "
                               f"ports of a {name})")
        need = prios * sum(c * (f.pfc.reserve_bytes + (
            hr if hr is not None else auto_headroom_bytes(g, prop[tier]))) for c, g, tier in groups)
        if need > buf:
            key = "pfc.headroom_bytes" if hr is not None else "pfc.reserve_bytes"
            got = hr if hr is not None else f.pfc.reserve_bytes
            raise ProfileError(*where(key), got,
                               f"reserve + headroom of the {ports} ports x {prios} lossless "
                               f"priorities of a {name} within switch.buffer_bytes {buf:,} "
                               f"(they need {need:,}; fewer nodes_per_leaf or a bigger buffer)")
