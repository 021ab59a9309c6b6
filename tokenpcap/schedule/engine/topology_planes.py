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

:func:`qp_planes`: a QP sends on one port for its life; ``fabric.topology.plane_select`` says
which, as Linux mlx5 picks the tx port of a RoCE QP on a bonded (LAG) pair of ports, the
devlink parameter ``lag_port_select_mode`` (``queue_affinity``, the default, or ``hash``):

* ``round-robin`` (``queue_affinity``): ``drivers/infiniband/hw/mlx5/qp.c``
  ``get_tx_affinity_rr`` sets a QP's tx port at its RESET-to-INIT to ``atomic_add_return(1,
  &ucontext->tx_port_affinity) % lag_ports + 1``, the counter of the process's context, which
  ``mlx5_ib_alloc_ucontext`` seeds from the device's own counter (1 for the first context that
  opens the device), so that context's QPs take ports 1, 2, 1, 2, ...: plane ``i % planes`` for
  its ``i``-th QP (from 0). One context per NIC; our creation order on a NIC is the order of its
  QP ends by (peer NIC, connection, side), the order the lowering numbers them (NCCL's real
  order, channel by channel at connection setup, is not modelled).
* ``five-tuple`` (``hash``): the driver leaves the QP's affinity unset
  (``mlx5_ib_lag_should_assign_affinity`` is false in hash mode with
  ``port_select_flow_table_bypass``) and the NIC's port-selection flow table hashes each
  packet's headers; a QP's packets share their 5-tuple (its UDP source port is fixed), so the QP
  keeps one port. The NIC's hash function is not published: here zlib's CRC-32 of ``sip`` (4,
  big-endian), ``dip`` (4), ``sport`` (2), ``dport`` 4791 (2), protocol 17 (1), mod ``planes``.

Each end of a QP pair has its own port: the data of a QP take the plane of its sending end, its
ACKs the plane of its receiving end (both NICs have a port in every plane, so either way reaches
the other; the ACKs' 5-tuple is the data's reversed, with the same UDP source port).
"""
from __future__ import annotations

import zlib

import numpy as np

__all__ = ["replicate", "nic_plane_ports", "qp_planes", "qp_planes_hash"]

_I64 = np.int64
_ROCE_DPORT = (4791).to_bytes(2, "big")           # IANA RoCEv2 UDP port


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
    its ACKs take (the port of its other end, at the peer NIC); ``round-robin`` (module
    docstring)."""
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
    plane_of_end = (np.arange(ends.size, dtype=_I64) - first) % planes
    out = np.empty((q.size, 2), _I64)
    out[:, 0] = plane_of_end[np.searchsorted(ends, q)]
    out[:, 1] = plane_of_end[np.searchsorted(ends, other)]
    return out


def qp_planes_hash(sip: np.ndarray, dip: np.ndarray, sport: np.ndarray, planes: int
                   ) -> np.ndarray:
    """``five-tuple`` (module docstring): int64 ``(Q, 2)`` from each QP's sending NIC's IPv4
    address ``sip``, its peer's ``dip`` (as 32-bit ints) and its pair's UDP source port
    ``sport`` (all ``(Q,)``): column 0 the CRC-32 of the data's 5-tuple mod ``planes``, column 1
    of the ACKs' (addresses swapped)."""
    def h(a: int, b: int, p: int) -> int:
        return zlib.crc32(a.to_bytes(4, "big") + b.to_bytes(4, "big") + p.to_bytes(2, "big")
                          + _ROCE_DPORT + b"\x11") % planes
    a, b, p = (np.asarray(x, _I64).tolist() for x in (sip, dip, sport))
    return np.array([[h(x, y, q), h(y, x, q)] for x, y, q in zip(a, b, p)],
                    _I64).reshape(-1, 2)
