"""Cluster profiles: a YAML mapping (a file, or a scenario's inline ``cluster:``) turned into a
:class:`~tokenpcap.config.types.ClusterProfile`, with its ``gpu:`` and ``network:`` mappings.

The keys, defaults and ranges are the specs below (``docs/profiles.md`` is generated from them).
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import (LINK_GBPS_RANGE, MAX_GPUS_PER_NODE, MAX_LATENCY_NS,
                                     MAX_PEAK_TFLOPS, MAX_WORLD_SIZE, MFU_RANGE,
                                     MIN_PEAK_TFLOPS)
from tokenpcap.config.fabric import FabricContext, fabric_from
from tokenpcap.config.types import ClusterProfile, GpuProfile, NetworkProfile
from tokenpcap.errors import ProfileError

__all__ = ["load_cluster", "cluster_from"]


_GPU_SPEC = {"name": (yc.string, yc.REQUIRED),
             "peak_tflops": (yc.number(ge=MIN_PEAK_TFLOPS, le=MAX_PEAK_TFLOPS), yc.REQUIRED),
             "gemm_efficiency": (yc.optional(yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1])), None),
             "attention_efficiency": (yc.optional(yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1])),
                                      None)}

_NETWORK_SPEC = {
    "ip_version": (yc.enum(4, 6), 4),
    "dscp": (yc.integer(0, 63), 26),
    "ecn": (yc.integer(0, 3), 2),
    "ttl": (yc.integer(1, 255), 64),
    "vlan_id": (yc.optional(yc.integer(1, 4094)), None),
    "pcp": (yc.integer(0, 7), 3),
    "mac_prefix": (yc.mac_prefix, "02:00:00"),
    "ipv4_base": (yc.ipv4, "198.18.0.0"),
    "ipv6_base": (yc.ipv6, "2001:2::"),
    "pkey": (yc.integer(0, 0xFFFF), 0xFFFF),
    "latency_ns": (yc.integer(0, MAX_LATENCY_NS), 1000),
    "ib_sl": (yc.integer(0, 15), 0),
    "ib_vl": (yc.integer(0, 14), 0),
}

_CLUSTER_SPEC = {
    "name": (yc.string, None),
    "description": (yc.string, ""),
    "nodes": (yc.integer(1, MAX_WORLD_SIZE), yc.REQUIRED),
    "gpus_per_node": (yc.integer(1, MAX_GPUS_PER_NODE), yc.REQUIRED),
    "nics_per_node": (yc.integer(1, MAX_GPUS_PER_NODE), yc.REQUIRED),
    "link_gbps": (yc.number(ge=LINK_GBPS_RANGE[0], le=LINK_GBPS_RANGE[1]), yc.REQUIRED),
    "nvlink_gbps": (yc.number(ge=LINK_GBPS_RANGE[0], le=LINK_GBPS_RANGE[1]), yc.REQUIRED),
    "gpu": (yc.mapping, yc.REQUIRED),
    "transport": (yc.enum("rocev2", "infiniband"), "rocev2"),
    "pmtu_bytes": (yc.enum(256, 512, 1024, 2048, 4096), 4096),
    "network": (yc.optional(yc.mapping), None),
    "fabric": (yc.optional(yc.mapping), None),
}


def load_cluster(path: str | Path) -> ClusterProfile:
    """Load a cluster profile (YAML): nodes, GPUs and NICs per node, link rates, transport, PMTU.

    The optional ``network:`` mapping fills :class:`NetworkProfile` (addressing and marking);
    absent keys take its defaults. The optional ``fabric:`` mapping fills
    :class:`~tokenpcap.config.fabric_types.FabricProfile` (:mod:`tokenpcap.config.fabric`); absent, the
    fabric is ideal.

    Raises:
        ProfileError: unknown or missing key, wrong type, value out of range, or more NICs than
            GPUs per node (NIC of local GPU g is ``g * nics_per_node // gpus_per_node``), or a
            ``fabric:`` the cluster cannot be built with (:func:`~tokenpcap.config.fabric.fabric_from`),
            or a queued fabric on a transport other than rocev2.
    """
    path = Path(path)
    return cluster_from(path, "", yc.load_yaml(path), path)


def cluster_from(file: Path, prefix: str, data: Any,
                 cluster_path: Path | None) -> ClusterProfile:
    """The cluster of mapping ``data`` read from ``file`` at dotted key ``prefix`` ("" for a
    cluster file; "cluster" for a scenario's inline cluster, whose ``cluster_path`` is None).

    Raises:
        ProfileError: as :func:`load_cluster`, naming ``file`` and ``prefix.key``.
    """
    v = yc.read_mapping(file, prefix, data, _CLUSTER_SPEC)
    key = (lambda k: f"{prefix}.{k}" if prefix else k)
    if v["nics_per_node"] > v["gpus_per_node"]:
        raise ProfileError(file, key("nics_per_node"), v["nics_per_node"],
                           f"an integer <= gpus_per_node {v['gpus_per_node']}")
    gpus = v["nodes"] * v["gpus_per_node"]
    if gpus > MAX_WORLD_SIZE:
        raise ProfileError(file, key("nodes"), v["nodes"],
                           f"nodes*gpus_per_node <= {MAX_WORLD_SIZE:,} GPUs (got {v['nodes']}*"
                           f"{v['gpus_per_node']} = {gpus:,}; the largest published training run "
                           "used 16,384)")
    g = yc.read_mapping(file, key("gpu"), v["gpu"], _GPU_SPEC)
    net = NetworkProfile(**yc.read_mapping(file, key("network"), v["network"] or {},
                                           _NETWORK_SPEC))
    if int(ipaddress.IPv4Address(net.ipv4_base)) & 0xFF:
        raise ProfileError(file, key("network.ipv4_base"), net.ipv4_base,
                           "an IPv4 address whose last octet is 0, e.g. '198.18.0.0' (NIC i of "
                           "node n gets base + 256*n + i + 1)")
    fabric = fabric_from(file, key("fabric"), v["fabric"], FabricContext(
        nodes=v["nodes"], nics_per_node=v["nics_per_node"], link_gbps=v["link_gbps"],
        latency_ns=net.latency_ns, pcp=net.pcp))
    if fabric.queued and v["transport"] != "rocev2":
        raise ProfileError(file, key("fabric.model"), fabric.model,
                           f"'ideal' with transport {v['transport']!r} (a queued fabric needs "
                           "transport rocev2: InfiniBand's credit-based link-level flow control, "
                           "IBTA vol. 1 7.9, is not modelled)")
    name = v["name"] if v["name"] is not None else (cluster_path.stem if cluster_path else "cluster")
    return ClusterProfile(
        name=name, nodes=v["nodes"], gpus_per_node=v["gpus_per_node"],
        nics_per_node=v["nics_per_node"], link_gbps=v["link_gbps"], nvlink_gbps=v["nvlink_gbps"],
        gpu=GpuProfile(**g), transport=v["transport"], pmtu_bytes=v["pmtu_bytes"], network=net,
        path=cluster_path, description=v["description"], source=file, source_key=prefix,
        fabric=fabric,
    )
