"""Which NIC a point-to-point send between nodes leaves on, and through which GPU (NCCL's PXN).

A port of NCCL's ``ncclTopoGetNetDev`` without a graph (the p2p path; ``src/graph/search.cc``
l. 1398-1460, NVIDIA/nccl commit 5067397c) on nodes whose GPUs share an NVLink switch and have a
NIC each (or share NICs ``gpus_per_node / nics_per_node`` to one):

* ``pxnLevel = NCCL_PXN_DISABLE ? 0 : NCCL_P2P_PXN_LEVEL`` (``PXN_DISABLE`` 0, ``P2P_PXN_LEVEL`` 2
  by default: "use PXN as much as possible to maximize aggregation"); the sender starts with its
  own NIC and itself as the proxy.
* When ``NCCL_CROSS_NIC == 0`` or ``pxnLevel != 0``: the local GPU with the peer's device index
  (local index ``j``) names NIC ``n_j``, its NIC (``ncclTopoGetLocalNet``).

  - ``NCCL_CROSS_NIC == 0``: the send uses ``n_j`` (the sender itself drives it: no NVLink hop);
  - ``pxnLevel == 1``: ``n_j`` through ``ncclTopoGetIntermediateRank`` when the sender's path to
    ``n_j`` is at most ``PATH_PXN``: on these nodes it always is (``n_j`` is the sender's own NIC,
    a ``PATH_PIX``, and the sender drives it; or another GPU's, reached over NVLink through the
    first GPU next to it, ``PATH_PXN``);
  - ``pxnLevel == 2``: ``n_j`` through ``ncclTopoGetLocalGpu(n_j)``, the first GPU next to
    ``n_j`` (``src/graph/topo.cc``), which is on the sender's NVLink (``PATH_NVL``) and next to
    its NIC (``PATH_PIX``): also when the sender shares ``n_j`` with that GPU.

  With one NIC per GPU the two levels agree, and the proxy is the sender itself exactly when
  ``n_j`` is its own NIC.
* Otherwise (``NCCL_CROSS_NIC`` 1 or 2 and no PXN) the sender's own NIC.

The receiver always uses its own NIC (``src/transport/net.cc`` ``recvSetup``: "receiver uses its
own netdev"). With PXN the sender writes each chunk over NVLink into the proxy GPU's buffer
and the proxy's network proxy thread posts it on ``n_j`` (``sendSetup``: ``ncclProxyConnect(..,
proxyRank, ..)``), so every inter-node send to a GPU of local index ``j`` is NIC ``j`` -> NIC
``j``: rail-local.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.layout import RankLayout

__all__ = ["p2p_route", "p2p_routes"]


def _first_gpu_of_nic(node: int, nic: int, layout: RankLayout) -> int:
    """The lowest GPU of ``node`` whose NIC is global NIC ``nic`` (``ncclTopoGetLocalGpu``)."""
    gpn, npn = layout.gpus_per_node, layout.nics_per_node
    local_nic = nic - node * npn
    # local GPU g has NIC g * npn // gpn: the lowest g with that NIC is ceil(local_nic * gpn / npn)
    return node * gpn + -(-local_nic * gpn // npn)


def p2p_route(src: int, dst: int, layout: RankLayout, pxn_level: int, cross_nic: int
              ) -> tuple[int, int, int]:
    """``(proxy rank, sending NIC, receiving NIC)`` (global indices) of a send from ``src`` to
    ``dst`` on another node (module docstring); ``proxy == src`` when no NVLink hop precedes the
    network send. ``pxn_level`` is 0 with ``NCCL_PXN_DISABLE`` = 1."""
    own = layout.nic(src)
    recv_nic = layout.nic(dst)
    if not (cross_nic == 0 or pxn_level != 0):
        return src, own, recv_nic
    node = src // layout.gpus_per_node
    same_index = node * layout.gpus_per_node + dst % layout.gpus_per_node
    n_j = layout.nic(same_index)
    if pxn_level == 1 and n_j == own:
        return src, n_j, recv_nic
    if pxn_level in (1, 2):
        return _first_gpu_of_nic(node, n_j, layout), n_j, recv_nic
    return src, n_j, recv_nic                       # NCCL_CROSS_NIC 0 without PXN


def p2p_routes(src: np.ndarray, dst: np.ndarray, layout: RankLayout, pxn_level: int,
               cross_nic: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised :func:`p2p_route`: int64 ``(proxy, sending NIC, receiving NIC)`` of the shape
    of ``src``."""
    src = np.asarray(src, np.int64)
    dst = np.asarray(dst, np.int64)
    gpn, npn = layout.gpus_per_node, layout.nics_per_node
    own, recv_nic = layout.nic_array(src), layout.nic_array(dst)
    if not (cross_nic == 0 or pxn_level != 0):
        return src.copy(), own, recv_nic
    node = src // gpn
    n_j = layout.nic_array(node * gpn + dst % gpn)
    if pxn_level in (1, 2):
        proxy = node * gpn + -(-(n_j - node * npn) * gpn // npn)
        if pxn_level == 1:
            proxy = np.where(n_j == own, src, proxy)
        return proxy, n_j, recv_nic
    return src.copy(), n_j, recv_nic
