"""ECMP: which of a switch's equal-cost egress ports a packet takes (compiled, scalar).

Two hash functions:

* :func:`hpcc_ecmp_hash`: HPCC ns-3's ``SwitchNode::EcmpHash`` (alibaba-edu/High-Precision-
  Congestion-Control, ``simulation/src/point-to-point/model/switch-node.cc``), the 32-bit
  murmur3 body and finalizer over the 12 bytes ``{u32 sip, u32 dip, u32 sport | dport << 16}``
  as ``GetOutDev`` lays them out in host (little-endian) order, then ``h ^= len`` with len 12.
  ns-3 seeds it with the switch's node id (``m_ecmpSeed = m_id``) and takes ``% nexthops``.
  Its ``sip``/``dip`` are ns-3's own addresses, :func:`hpcc_node_ip` of the node ids.
* :func:`crc32_five_tuple`: zlib's CRC-32 (ISO-HDLC, reflected polynomial 0xEDB88320) of the
  13 bytes ``sip`` (4, big-endian), ``dip`` (4), ``sport`` (2), ``dport`` (2), protocol 17,
  started at ``seed`` as ``zlib.crc32(data, seed)`` does: a CRC over the 5-tuple, as switch
  ASICs hash, with a per-switch seed against hash polarisation.

:func:`ecmp_index` picks the candidate (:data:`ECMP_MODES`): ``five-tuple`` the flow hash mod
``n``; ``dest-qp`` the CRC-32 of the destination QPN's 3 bytes (big-endian, as in the BTH),
seeded, mod ``n`` (Meta's E-ECMP hashes the RoCE destination QP, Gangidi et al., SIGCOMM 2024);
``spray`` the SplitMix64 finalizer (Steele, Lea, Flood 2014) of ``flow hash << 32 | packet
index`` mod ``n``, a fresh choice per packet.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["ECMP_FIVE_TUPLE", "ECMP_DEST_QP", "ECMP_SPRAY", "HASH_CRC32", "HASH_HPCC",
           "ECMP_MODES", "ECMP_HASHES", "CRC32_TABLE", "hpcc_ecmp_hash", "crc32_five_tuple",
           "crc32_qpn", "ecmp_index", "hpcc_node_ip"]

ECMP_FIVE_TUPLE = 0
ECMP_DEST_QP = 1
ECMP_SPRAY = 2
HASH_CRC32 = 0
HASH_HPCC = 1
#: ``fabric.ecmp.mode`` -> code
ECMP_MODES = {"five-tuple": ECMP_FIVE_TUPLE, "dest-qp": ECMP_DEST_QP, "spray": ECMP_SPRAY}
#: ``fabric.ecmp.hash`` -> code
ECMP_HASHES = {"crc32": HASH_CRC32, "hpcc-murmur3": HASH_HPCC}

_M32 = 0xFFFFFFFF


def _crc_table() -> np.ndarray:
    """The byte table of the reflected CRC-32 polynomial 0xEDB88320 (zlib ``crc32.c``)."""
    t = np.zeros(256, np.uint64)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[i] = c
    return t


#: uint64 (256,) (values < 2**32): the CRC-32 table, uint64 so numba's arithmetic stays unsigned.
CRC32_TABLE = _crc_table()


@njit(cache=True)
def _rotl32(x, r):  # type: ignore[no-untyped-def]
    return ((x << np.uint64(r)) | (x >> np.uint64(32 - r))) & np.uint64(_M32)


@njit(cache=True)
def _murmur_block(h, k):  # type: ignore[no-untyped-def]
    m = np.uint64(_M32)
    k = (k * np.uint64(0xCC9E2D51)) & m
    k = _rotl32(k, 15)
    k = (k * np.uint64(0x1B873593)) & m
    h ^= k
    h = _rotl32(h, 13)
    return (h + (h << np.uint64(2)) + np.uint64(0xE6546B64)) & m


@njit(cache=True)
def hpcc_ecmp_hash(sip, dip, sport, dport, seed):  # type: ignore[no-untyped-def]
    """HPCC ns-3 ``SwitchNode::EcmpHash(buf, 12, seed)`` of ``GetOutDev``'s buffer (module
    docstring); ints (sip, dip, seed 32-bit; ports 16-bit). Returns the uint32 hash."""
    m = np.uint64(_M32)
    h = np.uint64(seed) & m
    h = _murmur_block(h, np.uint64(sip) & m)
    h = _murmur_block(h, np.uint64(dip) & m)
    h = _murmur_block(h, (np.uint64(sport) & np.uint64(0xFFFF))
                      | ((np.uint64(dport) & np.uint64(0xFFFF)) << np.uint64(16)))
    h ^= np.uint64(12)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & m
    h ^= h >> np.uint64(16)
    return np.uint32(h)


@njit(cache=True)
def _crc_be(crc, value, nbytes):  # type: ignore[no-untyped-def]
    """Feed ``nbytes`` of ``value``, most significant first, into the (inverted) CRC state."""
    for i in range(nbytes - 1, -1, -1):
        b = (np.uint64(value) >> np.uint64(8 * i)) & np.uint64(0xFF)
        crc = CRC32_TABLE[(crc ^ b) & np.uint64(0xFF)] ^ (crc >> np.uint64(8))
    return crc


@njit(cache=True)
def crc32_five_tuple(sip, dip, sport, dport, seed):  # type: ignore[no-untyped-def]
    """``zlib.crc32(sip(4 BE) dip(4) sport(2) dport(2) 17(1), seed)``: uint32."""
    m = np.uint64(_M32)
    crc = (np.uint64(seed) & m) ^ m
    crc = _crc_be(crc, sip, 4)
    crc = _crc_be(crc, dip, 4)
    crc = _crc_be(crc, sport, 2)
    crc = _crc_be(crc, dport, 2)
    crc = _crc_be(crc, 17, 1)
    return np.uint32(crc ^ m)


@njit(cache=True)
def crc32_qpn(qpn, seed):  # type: ignore[no-untyped-def]
    """``zlib.crc32(qpn.to_bytes(3, "big"), seed)``: the dest-qp hash, uint32."""
    m = np.uint64(_M32)
    crc = _crc_be((np.uint64(seed) & m) ^ m, np.uint64(qpn) & np.uint64(0xFFFFFF), 3)
    return np.uint32(crc ^ m)


@njit(cache=True)
def _spray_mix(h, packet_index):  # type: ignore[no-untyped-def]
    x = ((np.uint64(h) << np.uint64(32)) | (np.uint64(packet_index) & np.uint64(_M32))) \
        + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))) & np.uint64(_M32)


@njit(cache=True)
def ecmp_index(mode, func, sip, dip, sport, dport, dest_qpn, packet_index, seed, n):  # type: ignore[no-untyped-def]
    """The candidate 0..n-1 a packet takes (module docstring). ``mode`` in
    :data:`ECMP_MODES`, ``func`` in :data:`ECMP_HASHES` (used by five-tuple and spray),
    ``seed`` the switch's (:attr:`Topology.switch_seed`), ``n >= 1`` candidates. Returns int64."""
    if n <= 1:
        return np.int64(0)
    if mode == ECMP_DEST_QP:
        return np.int64(np.uint64(crc32_qpn(dest_qpn, seed)) % np.uint64(n))
    if func == HASH_HPCC:
        h = np.uint64(hpcc_ecmp_hash(sip, dip, sport, dport, seed))
    else:
        h = np.uint64(crc32_five_tuple(sip, dip, sport, dport, seed))
    if mode == ECMP_SPRAY:
        h = _spray_mix(h, packet_index)
    return np.int64(h % np.uint64(n))


@njit(cache=True)
def hpcc_node_ip(node):  # type: ignore[no-untyped-def]
    """The IPv4 address (as a 32-bit int) HPCC ns-3 gives host ``node``: ``third.cc``
    ``node_id_to_ip``: ``0x0b000001 + (id / 256) * 0x10000 + (id % 256) * 0x100``."""
    return np.uint32(0x0B000001 + (node // 256) * 0x00010000 + (node % 256) * 0x00000100)
