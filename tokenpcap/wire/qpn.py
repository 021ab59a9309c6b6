"""The seeded identifiers of a run's RC queue pairs: QPNs, initial PSNs, R_Keys and buffer
addresses, and the UDP source port of a connection's QP pair.

Pure functions of the seed and the connection (so any subset of NICs, and any pipeline stage,
computes the same numbers): lowering (:mod:`tokenpcap.lower`) writes them into the frames and
the schedule's fabric model reads the UDP source ports for ECMP.

* QPNs: a connection ``(sender S, receiver R, connection index c)`` owns one RC QP pair, as an
  NCCL net_ib send/receive communicator pair does (docs/lower.md): data S→R is sent by S's QP
  with DestQP = R's QPN; R's clear-to-send writes travel back on R's QP of the same pair. The
  QPN of the end at ``nic`` towards ``peer`` is ``2 + (base(seed, nic) + role * (2**23 - 1) +
  256 * peer + c) mod (2**24 - 2)`` with role 0 at the sender, 1 at the receiver: data QPs are
  >= 2 (QP0/QP1 are SMI/GSI, IBTA vol.1 C13), unique per NIC (up to 32767 NICs).
* Initial PSN (IBTA vol.1 9.7.1), R_Key and a 1 MiB-aligned buffer address per QP: seeded
  SplitMix64 hashes of the connection.
* UDP source port: Linux's ``rdma_flow_label_to_udp_sport(rdma_calc_flow_label(a, b))`` of the
  pair's two QPNs (:func:`tokenpcap.wire.rdma.rocev2_udp_sport`), in 0xC000-0xFFFF, the same
  both ways (:func:`flow_udp_sport`).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.wire.rdma import rocev2_udp_sport

__all__ = ["QP_STRIDE", "qpn", "initial_psn", "flow_udp_sport"]

#: Connection indices per peer in the QPN rule (``qp`` must be below it).
QP_STRIDE = 256
_PSN_MASK = 0xFFFFFF
_QPN_SPACE = (1 << 24) - 2
#: Offset of the receivers' QPNs (role 1) from the senders' (role 0): half the QPN space.
_ROLE_OFFSET = _QPN_SPACE // 2
_U64 = np.uint64


def _mix(seed: int, salt: int, *keys) -> np.ndarray:
    """SplitMix64 finalizer (Steele et al. 2014) chained over int keys; uint64, shape of the keys."""
    shape = np.broadcast(*keys).shape
    x = np.full(max(1, int(np.prod(shape))), (seed * 0x9E3779B97F4A7C15 + salt) & (2**64 - 1), _U64)
    for k in keys:
        x = x ^ np.broadcast_to(np.asarray(k, dtype=np.int64), shape).reshape(-1).astype(_U64)
        x = x + _U64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
        x = x ^ (x >> _U64(31))
    return x.reshape(shape)


def qpn(seed: int, nic, peer, qp, role=0) -> np.ndarray:
    """QPN of ``nic``'s end, towards ``peer``, of the QP pair of connection index ``qp``.

    ``role`` 0: the sender's QP of connection ``(nic, peer, qp)``; 1: the receiver's QP of
    connection ``(peer, nic, qp)`` (rule in the module docstring).

    Args: int arrays of one shape (broadcast; ``qp < QP_STRIDE``, NICs < 32767, role 0 or 1).
    Returns: uint32, that shape.
    """
    base = (_mix(seed, 1, nic) % _U64(_QPN_SPACE)).astype(np.int64)
    local = (np.asarray(peer, np.int64) * QP_STRIDE + np.asarray(qp, np.int64)
             + np.asarray(role, np.int64) * _ROLE_OFFSET)
    return (2 + (base + local) % _QPN_SPACE).astype(np.uint32)


def initial_psn(seed: int, src, dst, qp, role=0) -> np.ndarray:
    """Seeded initial PSN (24 bits) of the QP at ``src`` that sends to ``dst`` on connection index
    ``qp``: the sender's QP (``role`` 0, data) or the receiver's QP (1, clear-to-send). uint32."""
    psn = _mix(seed, 2, src, dst, qp)
    if np.any(role):
        psn = np.where(np.asarray(role, bool), _mix(seed, 4, src, dst, qp), psn)
    return (psn & _U64(_PSN_MASK)).astype(np.uint32)


def _rkey_va(seed: int, src, dst, qp, role=0) -> tuple[np.ndarray, np.ndarray]:
    h = _mix(seed, 3, dst, src, qp)
    if np.any(role):
        h = np.where(np.asarray(role, bool), _mix(seed, 5, dst, src, qp), h)
    rkey = (h & _U64(0xFFFFFFFF)).astype(np.uint32)
    va = _U64(0x7F0000000000) + ((h >> _U64(32)) & _U64(0xFFFFF)) * _U64(1 << 20)   # 1 MiB aligned
    return rkey, va


def flow_udp_sport(seed: int, nic, peer, conn) -> np.ndarray:
    """UDP source port of the QP pair of connection ``(nic -> peer, conn)`` (int arrays of one
    shape, broadcast): :func:`tokenpcap.wire.rdma.rocev2_udp_sport` of the sender's QPN
    (``qpn(seed, nic, peer, conn, 0)``) and the receiver's (``qpn(seed, peer, nic, conn, 1)``),
    as lowering computes it. Every frame of the pair carries it: the data ``nic -> peer``, its
    ACKs, and the clear-to-send writes ``peer -> nic`` with their ACKs. uint16, that shape."""
    return rocev2_udp_sport(qpn(seed, nic, peer, conn, 0), qpn(seed, peer, nic, conn, 1))
