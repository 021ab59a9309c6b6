"""Stage 3 (part): the calls of a ``flows`` workload (:mod:`tokenpcap.config.flowfile`).

Every flow of the file is one ``SendRecv`` call of its ``size_bytes`` from ``src`` to ``dst``
(label ``wl/run/SendRecv``), whole on its connection lane (``Family.channel``: one message per
flow when it fits in ``collectives.slice_bytes``). The calls are grouped into one family per
distinct ``(size_bytes, lane)``, families in ascending ``(size_bytes, lane)``, each family's
groups in file order; :func:`call_flows` gives the flow of every call in that order (the
schedule starts each call at its flow's time, :mod:`tokenpcap.schedule.workload`).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.workload import Workload
from tokenpcap.plan.family import Family, Inst
from tokenpcap.plan.workload import DIM, PHASE, register_planner

__all__ = ["call_flows"]

#: Bytes of one element of a flow: a flow file's sizes are bytes (10,258 B is not whole fp32).
_ELEM_BYTES = 1


def call_flows(w: Workload) -> np.ndarray:
    """int64 ``(C,)``: the row of ``w.flows`` of each call, in the plan's call order."""
    f = w.flows
    return np.lexsort((np.arange(f.size), f["lane"], f["size_bytes"])).astype(np.int64)


@register_planner("flows")
def _flows(w: Workload) -> list[Family]:
    f = w.flows
    order = call_flows(w)
    key = f["size_bytes"][order] * (1 << 20) + f["lane"][order]
    cut = np.flatnonzero(np.diff(key)) + 1
    out = []
    for ix in np.split(order, cut):
        pairs = list(zip(f["src"][ix].tolist(), f["dst"][ix].tolist()))
        out.append(Family(DIM, PHASE, "SendRecv", int(f["size_bytes"][ix[0]]), _ELEM_BYTES, 0,
                          pairs, [Inst(microbatch=0, op=w.kind)], channel=int(f["lane"][ix[0]])))
    return out
