"""Planes: a queued fabric made of ``planes`` disjoint copies of one topology, every NIC with one
port in each, and which plane a QP's packets take.

Alibaba HPN (Qian et al., "Alibaba HPN: A Data Center Network for Large Language Model
Training", SIGCOMM 2024): every host has 8 NICs of 2 x 200 Gb/s; the two ports of a NIC go to two
different ToRs (non-stacked dual-ToR), and port 0 and port 1 of every NIC are in separate planes
of the tier above (dual-plane), so no switch links the planes. aliyun/SimAI's topology template
``AlibabaHPN`` (``astra-sim-alibabacloud/inputs/topo/gen_Topo_Template.py``) encodes the same
cluster: 15,360 GPUs, 200 Gb/s per port, 240 ASWs of 128 NIC ports, 120 PSWs, dual-plane.

:func:`replicate` makes the copies from the link list of one plane (``topology.py``'s order):
plane ``k``'s switches are plane 0's shifted by ``k x S1`` and named ``p<k>-<name>``, its links
follow plane 0's in the same order (so ns-3 gives host ``g`` one device per plane: device ``k +
1`` is its port in plane ``k``, as ``third.cc`` numbers a node's devices in the order its links
are installed), and every NIC link runs at the NIC's rate divided by ``planes``.

:func:`qp_planes`: a QP sends on one port for its life. The rule is Linux mlx5's for RoCE over a
bonded (LAG) pair of ports in queue-affinity mode, ``drivers/infiniband/hw/mlx5/qp.c``
``get_tx_affinity_rr``: at a QP's RESET-to-INIT the driver sets its tx port to
``atomic_add_return(1, &tx_port_affinity) % lag_ports + 1``, a counter per device (per user
context), so the QPs of a NIC take ports 2, 1, 2, 1, ... in creation order: plane ``(i + 1) %
planes`` for the ``i``-th (from 0). Our creation order on a NIC is the order of its QP ends by
(peer NIC, connection, side), the order the lowering numbers them; NCCL's real order (channel by
channel at connection setup) is not modelled. Each end of a QP pair has its own port: the data of
a QP take the plane of its sending end, its ACKs the plane of its receiving end (both NICs have a
port in every plane, so either way reaches the other).
"""
from __future__ import annotations

import numpy as np

__all__ = ["replicate", "nic_plane_ports", "qp_planes"]

_I64 = np.int64


def replicate(names: list[str], tiers: list[int], a: np.ndarray, b: np.ndarray,
              rate: np.ndarray, delay: np.ndarray, planes: int
              ) -> tuple[list[str], list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                         np.ndarray]:
    """``planes`` copies of one plane's switches (``names``, ``tiers``, ``S1`` of them) and links
    (``a``, ``b``: ends, ``-1 - nic`` for a NIC, else a switch index; ``rate`` Gb/s float64,
    ``delay`` ns int64; all ``(L1,)``), as the module docstring says. Returns ``(names, tiers, a,
    b, rate, delay, switch_plane)`` with ``planes x S1`` switches and ``planes x L1`` links;
    ``switch_plane`` int64 ``(S,)``. One plane: the inputs unchanged (``switch_plane`` zeros)."""
    s1 = len(names)
    if planes == 1:
        return names, tiers, a, b, rate, delay, np.zeros(s1, _I64)
    shift = lambda x, k: np.where(x >= 0, x + k * s1, x)   # noqa: E731 - NIC ends stay
    return ([f"p{k}-{n}" for k in range(planes) for n in names], list(tiers) * planes,
            np.concatenate([shift(a, k) for k in range(planes)]),
            np.concatenate([shift(b, k) for k in range(planes)]),
            np.tile(rate, planes), np.tile(delay, planes),
            np.repeat(np.arange(planes, dtype=_I64), s1))


def nic_plane_ports(port_switch: np.ndarray, port_peer_nic: np.ndarray,
                    switch_plane: np.ndarray, n_nic: int) -> np.ndarray:
    """``(planes, N)`` int64: the switch port NIC ``g``'s link in plane ``k`` enters.

    Raises:
        ValueError: a NIC without exactly one port in every plane (a topology built wrongly).
    """
    planes = int(switch_plane.max(initial=0)) + 1
    out = np.full((planes, n_nic), -1, _I64)
    has = np.flatnonzero(port_peer_nic >= 0)
    k, g = switch_plane[port_switch[has]], port_peer_nic[has]
    if has.size != planes * n_nic or np.unique(k * n_nic + g).size != has.size:
        raise ValueError(f"NIC ports: got {has.size}, expected one per NIC and plane "
                         f"({planes} x {n_nic})")
    out[k, g] = has
    return out


def qp_planes(qcodes: np.ndarray, n_nic: int, qp_stride: int, planes: int) -> np.ndarray:
    """The planes of the QPs with the global codes ``qcodes`` (int64 ``(Q,)``, sorted: ``((nic *
    N + peer) * qp_stride + conn) * 2 + side``, :mod:`tokenpcap.schedule.engine.state`) as
    int64 ``(Q, 2)``: column 0 the plane its data take (its own end's port), column 1 the plane
    its ACKs take (the port of its other end, at the peer NIC). Module docstring for the rule."""
    q = np.asarray(qcodes, _I64)
    if planes == 1 or q.size == 0:
        return np.zeros((q.size, 2), _I64)
    side = q % 2
    rest = q // 2
    conn, rest = rest % qp_stride, rest // qp_stride
    peer, me = rest % n_nic, rest // n_nic
    other = (((peer * n_nic + me) * qp_stride + conn) * 2 + (1 - side)).astype(_I64)
    ends = np.unique(np.concatenate([q, other]))          # every QP end, NIC-major, sorted
    nic_of = ends // (2 * qp_stride * n_nic)
    first = np.searchsorted(nic_of, nic_of, side="left")
    plane_of_end = (np.arange(ends.size, dtype=_I64) - first + 1) % planes
    out = np.empty((q.size, 2), _I64)
    out[:, 0] = plane_of_end[np.searchsorted(ends, q)]
    out[:, 1] = plane_of_end[np.searchsorted(ends, other)]
    return out
