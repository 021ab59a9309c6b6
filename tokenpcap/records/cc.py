"""What congestion control did during a queued-fabric run, as tables: the CNPs, every DCQCN rate
change, the CE marks per switch port and per QP. The vocabulary between the engine that fills
them (``Schedule.cc_log()``, :mod:`tokenpcap.schedule.engine.cclog`) and what reads them.

A *congestion-control log* is a dict ``{table name: numpy structured array of shape (n,)}`` with
exactly the keys and dtypes of :data:`CC_TABLES`; every column is described, with its unit, in
:data:`CC_COLUMN_DOCS`. Times are integer ns of simulation time since the start of the run (as
:mod:`tokenpcap.records.fabric`); switches and ports are numbered as there; a QP is the engine's
QP index (one per sending NIC, peer NIC, connection and role) with its two NICs beside it.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CNP_DTYPE", "RATE_DTYPE", "CE_PORT_DTYPE", "CE_QP_DTYPE", "CC_TABLES",
           "CC_COLUMN_DOCS", "RATE_CAUSES"]

#: One row per CNP that reached its reaction point (the data's sender). Shape ``(n,)``, by time.
CNP_DTYPE = np.dtype([("time_ns", "<i8"), ("np_nic", "<i4"), ("rp_nic", "<i4"), ("qp", "<i8")])

#: One row per DCQCN rate change of a QP. Shape ``(n,)``, by time per QP.
RATE_DTYPE = np.dtype([("time_ns", "<i8"), ("qp", "<i8"), ("old_bps", "<i8"), ("new_bps", "<i8"),
                       ("alpha", "<f8"), ("cause", "u1")])

#: One row per switch egress port that marked CE. Shape ``(n,)``.
CE_PORT_DTYPE = np.dtype([("switch", "<i4"), ("port", "<i4"), ("ce_marked", "<i8")])

#: One row per QP whose data was marked or which received CNPs. Shape ``(n,)``.
CE_QP_DTYPE = np.dtype([("qp", "<i8"), ("src_nic", "<i4"), ("dst_nic", "<i4"),
                        ("ce_received", "<i8"), ("cnps_received", "<i8")])

#: The tables of a congestion-control log: name -> dtype.
CC_TABLES: dict[str, np.dtype] = {
    "cnps": CNP_DTYPE,
    "rates": RATE_DTYPE,
    "ce_ports": CE_PORT_DTYPE,
    "ce_qps": CE_QP_DTYPE,
}

#: ``RATE_DTYPE.cause`` codes (:mod:`tokenpcap.schedule.engine.dcqcn` ``CAUSE_*``).
RATE_CAUSES = {0: "first CNP (rate_to_set_on_first_cnp)", 1: "cut (rate decrease)",
               2: "increase by the timer (rpg_time_reset)",
               3: "increase by the byte counter (rpg_byte_reset)"}

_QP = "the engine's QP index (sending NIC, peer NIC, connection, role)"

#: ``{table: {column: (unit, meaning)}}`` for every column of :data:`CC_TABLES`.
CC_COLUMN_DOCS: dict[str, dict[str, tuple[str, str]]] = {
    "cnps": {
        "time_ns": ("ns", "the CNP (or the ACK carrying the CNP flag) reaches the reaction point"),
        "np_nic": ("", "notification point: the NIC that received CE-marked data and sent it"),
        "rp_nic": ("", "reaction point: the NIC that sent the data (it receives the CNP)"),
        "qp": ("", _QP + " of the data the CNP names"),
    },
    "rates": {
        "time_ns": ("ns", "the rate changes (DCQCN event time)"),
        "qp": ("", _QP),
        "old_bps": ("bit/s", "rate before"),
        "new_bps": ("bit/s", "rate after"),
        "alpha": ("", "DCQCN's alpha after the event, a fraction in [0, 1]"),
        "cause": ("", "what changed it: " + "; ".join(f"{k} {v}" for k, v in RATE_CAUSES.items())),
    },
    "ce_ports": {
        "switch": ("", "switch index: Topology.switch_names[switch]"),
        "port": ("", "egress port number on that switch, from 0"),
        "ce_marked": ("packets", "packets this egress port marked CE (RED)"),
    },
    "ce_qps": {
        "qp": ("", _QP),
        "src_nic": ("", "the QP's NIC (the data's sender, the reaction point)"),
        "dst_nic": ("", "its peer (the data's receiver, the notification point)"),
        "ce_received": ("packets", "packets of its data that arrived CE-marked at its peer"),
        "cnps_received": ("CNPs", "CNPs for it that reached its NIC"),
    },
}
