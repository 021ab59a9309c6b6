"""What congestion control did, as the tables of :mod:`tokenpcap.records.cc`, read from the
compiled engine's arrays after (or during) a run (modules ecn, npoint, rpoint, dcqcn)."""
from __future__ import annotations

import numpy as np

from tokenpcap.records.cc import CE_PORT_DTYPE, CE_QP_DTYPE, CNP_DTYPE, RATE_DTYPE
from tokenpcap.schedule.engine import dcqcn as D
from tokenpcap.schedule.engine import events as K

__all__ = ["cc_log"]


def cc_log(eng) -> dict[str, np.ndarray]:
    """``{"cnps", "rates", "ce_ports", "ce_qps"}`` of the engine ``eng``
    (:class:`tokenpcap.schedule.engine.state.Engine`) with a queued fabric. Returns copies."""
    S, sc = eng.S, eng.sc
    g = S.lgn[: int(sc[K.NLGN])]
    cnps = np.zeros(g.shape[0], CNP_DTYPE)
    for j, name in enumerate(CNP_DTYPE.names):
        cnps[name] = g[:, j]
    r = S.lgr[: min(int(sc[K.NLGR]), S.lgr.shape[0])]
    rates = np.zeros(r.shape[0], RATE_DTYPE)
    for name, col in (("time_ns", D.RL_TIME_NS), ("qp", D.RL_QP), ("old_bps", D.RL_OLD_BPS),
                      ("new_bps", D.RL_NEW_BPS), ("alpha", D.RL_ALPHA), ("cause", D.RL_CAUSE)):
        rates[name] = r[:, col]
    fp = S.fp
    used = np.flatnonzero(fp[:, K.FP_CE] > 0)
    ports = np.zeros(used.size, CE_PORT_DTYPE)
    ports["switch"], ports["port"] = fp[used, K.FP_SW], fp[used, K.FP_NUM_ON_SW]
    ports["ce_marked"] = fp[used, K.FP_CE]
    qp = S.qp
    qs = np.flatnonzero((qp[:, K.Q_CE] > 0) | (qp[:, K.Q_CNPRX] > 0))
    qps = np.zeros(qs.size, CE_QP_DTYPE)
    qps["qp"], qps["src_nic"], qps["dst_nic"] = qs, qp[qs, K.Q_PORT], S.q_peer[qs]
    qps["ce_received"], qps["cnps_received"] = qp[qs, K.Q_CE], qp[qs, K.Q_CNPRX]
    return dict(cnps=cnps, rates=rates, ce_ports=ports, ce_qps=qps)
