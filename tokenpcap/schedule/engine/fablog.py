"""What the queued fabric did, as the tables of :mod:`tokenpcap.records.fabric`, read from the
compiled engine's arrays after (or during) a run (:mod:`tokenpcap.schedule.engine.fabric`).

Times are simulation ns from the start of the run. ``links``: one row per switch egress port with
traffic or PFC, ``tx_frames``/``tx_bytes`` without the PFC frames it sent (``pfc_sent``);
``nics``: one row per NIC with traffic, ``rx_frames``/``rx_bytes`` without the PFC frames it
received (``pfc_received``), ``paused_ns`` the time its data priority was paused; ``drops``: one
row per (switch port, priority) that dropped (lossy priorities only: a lossless one never drops).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records.fabric import (DROP_DTYPE, LINK_DTYPE, NIC_FABRIC_DTYPE, PFC_EVENT_DTYPE,
                                      QUEUE_DEPTH_DTYPE, FabricSummary)
from tokenpcap.schedule.engine import events as K

__all__ = ["fabric_log", "PFC_FRAME_BYTES"]

#: An 802.1Qbb frame without FCS (60 B; 64 on the wire with it).
PFC_FRAME_BYTES = 60


def fabric_log(eng, topology, fabric) -> tuple[dict[str, np.ndarray], FabricSummary]:
    """``({"pfc", "queues", "links", "nics", "drops"}, FabricSummary)`` of the engine ``eng``
    (:class:`tokenpcap.schedule.engine.state.Engine`) on ``topology`` with the cluster's
    ``fabric`` profile. Returns copies."""
    S, sc = eng.S, eng.sc
    lg = S.lgp[: int(sc[K.NLGP])]
    pfc = np.zeros(lg.shape[0], PFC_EVENT_DTYPE)
    for j, name in enumerate(("time_ns", "switch", "port", "priority", "xoff", "quanta")):
        pfc[name] = lg[:, j]
    lq = S.lgq[: int(sc[K.NLGQ])]
    order = np.lexsort((lq[:, 3], lq[:, 2], lq[:, 1], lq[:, 0]))
    lq = lq[order]
    queues = np.zeros(lq.shape[0], QUEUE_DEPTH_DTYPE)
    for j, name in enumerate(("time_ns", "switch", "port", "priority", "max_bytes")):
        queues[name] = lq[:, j]
    fp = S.fp
    used = np.flatnonzero((fp[:, K.FP_TXF] > 0) | (fp[:, K.FP_PFCR] > 0))
    links = np.zeros(used.size, LINK_DTYPE)
    f = fp[used]
    links["switch"], links["port"] = f[:, K.FP_SW], f[:, K.FP_NUM_ON_SW]
    links["peer_nic"] = f[:, K.FP_PEER_NIC]
    peer = f[:, K.FP_PEER_PORT]
    sw = peer >= 0
    links["peer_switch"] = np.where(sw, topology.port_switch[np.maximum(peer, 0)], -1)
    links["peer_port"] = np.where(sw, topology.port_number[np.maximum(peer, 0)], -1)
    links["gbps"] = topology.port_gbps[used]
    links["tx_frames"] = f[:, K.FP_TXF] - f[:, K.FP_PFCS]
    links["tx_bytes"] = f[:, K.FP_TXB] - PFC_FRAME_BYTES * f[:, K.FP_PFCS]
    links["pfc_sent"], links["pfc_received"] = f[:, K.FP_PFCS], f[:, K.FP_PFCR]
    links["paused_ns"], links["max_queue_bytes"] = f[:, K.FP_PAUSED_NS], f[:, K.FP_MAXQ]
    fn = S.fn
    nu = np.flatnonzero(fn[:, K.FN_RXF] > 0)
    nics = np.zeros(nu.size, NIC_FABRIC_DTYPE)
    g = fn[nu]
    nics["nic"] = nu
    nics["pfc_received"] = g[:, K.FN_PFCR]
    nics["paused_ns"] = g[:, K.FN_PAUSED_NS]
    nics["rx_frames"] = g[:, K.FN_RXF] - g[:, K.FN_PFCR]
    nics["rx_bytes"] = g[:, K.FN_RXB] - PFC_FRAME_BYTES * g[:, K.FN_PFCR]
    dq = np.flatnonzero(S.fi[:, K.I8_DROPS] > 0)
    drops = np.zeros(dq.size, DROP_DTYPE)
    drops["switch"] = fp[dq // 8, K.FP_SW]
    drops["port"] = fp[dq // 8, K.FP_NUM_ON_SW]
    drops["priority"] = dq % 8
    drops["packets"], drops["bytes"] = S.fi[dq, K.I8_DROPS], S.fi[dq, K.I8_DROPB]
    summary = FabricSummary(
        switch_names=tuple(topology.switch_names),
        packet_hops=int((fp[:, K.FP_TXF] - fp[:, K.FP_PFCS]).sum()),
        headroom_overflows=int(sc[K.HDRM_OVER]), drops_total=int(drops["packets"].sum()),
        preset=fabric.preset or "", topology_kind=fabric.topology.kind,
        lossless_priorities=tuple(int(p) for p in fabric.pfc.priorities) if fabric.pfc.enabled else (),
        qlen_sample_ns=int(fabric.qlen_sample_ns))
    return dict(pfc=pfc, queues=queues, links=links, nics=nics, drops=drops), summary
