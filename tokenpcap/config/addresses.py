"""Addresses of the NICs of a cluster: NIC ``i`` of node ``n`` always gets the same ones.

Global NIC index ``g = n * nics_per_node + i`` (the order of ``MESSAGE_DTYPE.src_nic``). The
defaults keep a replayed trace out of production address space:

========== ====================================================== ==================================
address    rule                                                   default example (node 3, NIC 5)
========== ====================================================== ==================================
MAC        ``mac_prefix`` + node (big-endian, the bytes left but    ``02:00:00:00:03:05``
           one) + NIC (last byte); ``02:`` is a locally
           administered unicast prefix (IEEE 802 clause 8.2)
IPv4       ``ipv4_base + 256 * node + NIC + 1``, inside the block   ``198.18.3.6``
           that holds ``ipv4_base`` (:data:`IPV4_BLOCKS`: RFC 2544's
           benchmarking 198.18.0.0/15, 512 nodes; RFC 1918's
           10.0.0.0/8, 65,536 nodes, and the others; else the /15);
           last octet never 0 or 255
IPv6       ``ipv6_base + node << 64 + NIC + 1``, inside the /48     ``2001:2:0:3::6``
           that holds ``ipv6_base`` (RFC 5180 block 2001:2::/48)
LID        ``1 + g``; unicast LIDs are 0x0001..0xBFFF (IBTA vol.1   ``0x001e`` with 8 NICs per node
           4.1.3); a RoCEv2 cluster of more NICs (its frames
           carry no LID) gets 0, the reserved LID, for all
GID        ``fe80::/64`` + modified EUI-64 of the MAC (RFC 4291     ``fe80::ff:fe00:305``
           2.5.1, appendix A); the IB default subnet prefix
========== ====================================================== ==================================

Switch ports (the source MAC of the 802.1Qbb PFC frames a switch port sends) have their own rule,
:func:`switch_port_macs`: ``06:00`` + the global port id as 32 bits big-endian (port 5 ->
``06:00:00:00:00:05``). ``06:`` is locally administered unicast (IEEE 802 clause 8.2: I/G bit 0,
U/L bit 1). A ``network.mac_prefix`` whose NIC MACs could start with ``06:00`` is refused, so the
two never collide.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InfeasiblePlanError, InputError, ProfileError
from tokenpcap.config.profiles import ClusterProfile

__all__ = ["NicAddresses", "nic_addresses", "switch_port_macs", "IB_UNICAST_LID_MAX",
           "SWITCH_MAC_PREFIX", "IPV4_BLOCKS"]

#: First two octets of every switch port's MAC (:func:`switch_port_macs`).
SWITCH_MAC_PREFIX = b"\x06\x00"

#: The address blocks an ``ipv4_base`` may fill, largest first (RFC 1918 section 3: the private
#: 10/8, 172.16/12, 192.168/16; RFC 2544 appendix C.2.2, RFC 6890: the benchmarking
#: 198.18.0.0/15). A base outside them fills the /15 that holds it.
IPV4_BLOCKS = tuple(ipaddress.ip_network(n) for n in (
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "198.18.0.0/15"))


def _ipv4_block(base: int) -> ipaddress.IPv4Network:
    """The block of :data:`IPV4_BLOCKS` holding ``base``, else the /15 that holds it."""
    addr = ipaddress.IPv4Address(base)
    return next((b for b in IPV4_BLOCKS if addr in b),
                ipaddress.ip_network((base >> 17 << 17, 15)))


#: Highest unicast LID (IBTA vol.1 4.1.3: 0x0001-0xBFFF unicast, 0xC000-0xFFFE multicast).
IB_UNICAST_LID_MAX = 0xBFFF


@dataclass(frozen=True, eq=False)
class NicAddresses:
    """Per-NIC addresses, row ``g`` = global NIC ``g``. All arrays are read-only.

    Attributes:
        mac: uint8 ``(n, 6)``; ipv4: uint8 ``(n, 4)``; ipv6: uint8 ``(n, 16)``;
        lid: uint16 ``(n,)``; gid: uint8 ``(n, 16)`` (IB GRH source/destination GID).
    """

    mac: np.ndarray
    ipv4: np.ndarray
    ipv6: np.ndarray
    lid: np.ndarray
    gid: np.ndarray

    def __len__(self) -> int:
        return int(self.lid.size)


def _bytes_be(values: list[int], width: int) -> np.ndarray:
    """Python ints (may exceed 64 bits) → uint8 ``(n, width)`` big-endian."""
    return np.frombuffer(b"".join(v.to_bytes(width, "big") for v in values), np.uint8).reshape(-1, width)


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.flags.writeable = False
    return a


def _mac_prefix(cluster: ClusterProfile) -> bytes:
    text = cluster.network.mac_prefix
    try:
        raw = bytes(int(p, 16) for p in text.split(":"))
        ok = all(len(p) in (1, 2) for p in text.split(":")) and 1 <= len(raw) <= 5
    except (ValueError, AttributeError):
        ok = False
    if not ok:
        raise ProfileError(cluster.path, "network.mac_prefix", text,
                           "1 to 5 hex octets separated by ':' (e.g. '02:00:00')")
    if raw[0] & 1:
        raise ProfileError(cluster.path, "network.mac_prefix", text,
                           "a unicast prefix (first octet even; '02:...' is locally administered)")
    if raw[:len(SWITCH_MAC_PREFIX)] == SWITCH_MAC_PREFIX[:len(raw)]:
        raise ProfileError(cluster.path, "network.mac_prefix", text,
                           "a prefix whose MACs cannot start with 06:00 (switch ports' MACs, "
                           "tokenpcap.config.addresses.switch_port_macs)")
    return raw


def switch_port_macs(port_ids) -> np.ndarray:
    """MAC of each switch port: ``06:00`` + the global port id, 32 bits big-endian.

    A pure rule (module docstring): the same port always gets the same MAC, whatever the cluster,
    and no NIC MAC equals one (:func:`nic_addresses` refuses a prefix that could).

    Args:
        port_ids: int array ``(n,)`` of global switch port ids (the topology numbers its switch
            ports 0..P-1), each in 0..2**32-1.

    Returns:
        uint8 ``(n, 6)``.

    Raises:
        InputError: a port id outside 0..2**32-1.
    """
    ids = np.asarray(port_ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() > 0xFFFFFFFF):
        bad = int(ids[(ids < 0) | (ids > 0xFFFFFFFF)][0])
        raise InputError(f"switch port id: got {bad}, expected 0..{0xFFFFFFFF} (32 bits of the MAC)")
    mac = np.empty((ids.size, 6), np.uint8)
    mac[:, :2] = np.frombuffer(SWITCH_MAC_PREFIX, np.uint8)
    mac[:, 2:] = (ids[:, None] >> np.array([24, 16, 8, 0])) & 0xFF
    return mac


def _base(cluster: ClusterProfile, key: str, version: int) -> int:
    text = getattr(cluster.network, key)
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        addr = None
    if addr is None or addr.version != version:
        raise ProfileError(cluster.path, f"network.{key}", text, f"an IPv{version} address")
    return int(addr)


def _too_many(cluster: ClusterProfile, key: str, value: object, limit: str) -> InfeasiblePlanError:
    where = str(cluster.path) if cluster.path is not None else f"cluster {cluster.name!r}"
    return InfeasiblePlanError(
        f"{where}: {key}: got {value!r} for {cluster.nodes} nodes x {cluster.nics_per_node} NICs, "
        f"expected a cluster of at most {limit}")


def nic_addresses(cluster: ClusterProfile) -> NicAddresses:
    """MAC, IPv4, IPv6, LID and GID of every NIC of ``cluster`` (rules in the module docstring).

    Returns:
        :class:`NicAddresses` with ``nodes * nics_per_node`` rows.

    Raises:
        ProfileError: a malformed ``network.mac_prefix``, ``ipv4_base`` or ``ipv6_base``.
        InfeasiblePlanError: more nodes or NICs than the address ranges hold (LIDs: only on
            InfiniBand).
    """
    nodes, per = int(cluster.nodes), int(cluster.nics_per_node)
    node = np.repeat(np.arange(nodes, dtype=np.int64), per)
    nic = np.tile(np.arange(per, dtype=np.int64), nodes)
    n = nodes * per

    prefix = _mac_prefix(cluster)
    node_bytes = 6 - len(prefix) - 1
    if per > 256 or nodes > 256 ** node_bytes:
        raise _too_many(cluster, "network.mac_prefix", cluster.network.mac_prefix,
                        f"{256 ** node_bytes} nodes x 256 NICs")
    mac = np.empty((n, 6), np.uint8)
    mac[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    for b in range(node_bytes):
        mac[:, len(prefix) + b] = (node >> (8 * (node_bytes - 1 - b))) & 0xFF
    mac[:, 5] = nic

    v4 = _base(cluster, "ipv4_base", 4)
    if v4 & 0xFF:
        raise ProfileError(cluster.path, "network.ipv4_base", cluster.network.ipv4_base,
                           "an IPv4 address whose last octet is 0 (e.g. '198.18.0.0')")
    last_v4 = v4 + 256 * (nodes - 1) + per
    block = _ipv4_block(v4)
    if per > 254 or last_v4 > int(block.broadcast_address):
        fits = (int(block.broadcast_address) + 1 - v4) // 256
        held = f"the {fits:,} node{'' if fits == 1 else 's'} {block} holds after the base"
        bigger = "" if block.prefixlen == 8 else (
            "; network.ipv4_base 10.0.0.0 (RFC 1918's 10.0.0.0/8) holds 65,536 nodes")
        raise _too_many(cluster, "network.ipv4_base", cluster.network.ipv4_base,
                        f"254 NICs per node and {held}{bigger}")
    ipv4 = ((v4 + 256 * node + nic + 1)[:, None] >> np.array([24, 16, 8, 0])) & 0xFF

    v6 = _base(cluster, "ipv6_base", 6)
    last_v6 = v6 + ((nodes - 1) << 64) + per
    if (last_v6 >> 80) != (v6 >> 80):
        raise _too_many(cluster, "network.ipv6_base", cluster.network.ipv6_base,
                        "as many nodes as the /48 holds after the base")
    ipv6 = _bytes_be([v6 + (int(a) << 64) + int(b) + 1 for a, b in zip(node, nic)], 16)

    if n <= IB_UNICAST_LID_MAX:
        lid = np.arange(1, n + 1, dtype=np.uint16)
    elif cluster.transport == "infiniband":
        raise _too_many(cluster, "nodes * nics_per_node", n,
                        f"{IB_UNICAST_LID_MAX} NICs (IB unicast LIDs)")
    else:                  # RoCEv2 frames carry no LRH: LID 0, the reserved value, for every NIC
        lid = np.zeros(n, np.uint16)

    eui = np.empty((n, 8), np.uint8)           # modified EUI-64: MAC[0:3] ff fe MAC[3:6], U/L flipped
    eui[:, :3], eui[:, 3], eui[:, 4], eui[:, 5:] = mac[:, :3], 0xFF, 0xFE, mac[:, 3:]
    eui[:, 0] ^= 0x02
    gid = np.zeros((n, 16), np.uint8)
    gid[:, 0], gid[:, 1], gid[:, 8:] = 0xFE, 0x80, eui

    return NicAddresses(_frozen(mac), _frozen(ipv4.astype(np.uint8)), _frozen(ipv6), _frozen(lid), _frozen(gid))
