"""The congestion-control settings of the compiled engine (ECN marking, CNPs, DCQCN), built once
per run from the cluster's ``fabric`` profile (``fabric.ecn``, ``fabric.np``, ``fabric.cc``,
``fabric.dcqcn``: :mod:`tokenpcap.config.cc_types`) for
:mod:`tokenpcap.schedule.engine.fabstate`. A profile without them (or ``enabled: false``,
``cc: none``) gives the engine's slots 0: no mark, no CNP, no rate change.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.schedule.engine import events as K

__all__ = ["ecn_ports", "cnp_settings", "PMAX_ONE"]

#: P_max = 1 in the fixed point of ``fp[:, FP_PMAX]`` (2**32).
PMAX_ONE = 1 << 32
_MARK_AT = {"dequeue": 1, "enqueue": 2}


def ecn_ports(fab, fp: np.ndarray, port_gbps: np.ndarray, nic_gbps: float) -> dict:
    """Fill the RED columns of the switch ports ``fp`` (``FP_KMIN``, ``FP_KMAX``, ``FP_PMAX``)
    from ``fab.ecn`` and return the ECN config slots. ``rate_scaled`` thresholds are for a port
    at the NIC rate, scaled by the port's rate over it (HPCC ``run.py``: K_min 4r KB and K_max
    16r KB at r Gb/s), rounded down to whole bytes."""
    ecn = getattr(fab, "ecn", None)
    fp[:, [K.FP_KMIN, K.FP_KMAX, K.FP_PMAX]] = 0
    if ecn is None or not ecn.enabled:
        return {K.F_ECN: 0, K.F_ECN_PRIOS: 0, K.F_ECN_SEED: 0}
    scale = (np.asarray(port_gbps, np.float64) / nic_gbps if ecn.rate_scaled
             else np.ones(len(port_gbps)))
    fp[:, K.FP_KMIN] = np.floor(int(ecn.kmin_bytes) * scale).astype(np.int64)
    fp[:, K.FP_KMAX] = np.floor(int(ecn.kmax_bytes) * scale).astype(np.int64)
    fp[:, K.FP_PMAX] = int(round(float(ecn.pmax) * PMAX_ONE))
    return {K.F_ECN: _MARK_AT[ecn.mark_at], K.F_ECN_PRIOS: sum(1 << int(p) for p in ecn.priorities),
            K.F_ECN_SEED: int(ecn.seed) & ((1 << 63) - 1)}


def cnp_settings(fab, cnp_tb: int, cnp_fb: int, cnp_ns: int) -> dict:
    """The notification point's config slots from ``fab.np`` and ``fab.cc``: a CNP's timing
    bytes ``cnp_tb``, frame bytes ``cnp_fb`` and NIC serialization ``cnp_ns``."""
    np_ = getattr(fab, "np", None)
    cc = 1 if getattr(fab, "cc", "none") == "dcqcn" else 0
    if np_ is None:
        return {K.F_CC: 0}
    return {K.F_CC: cc, K.F_CNP_GAP: int(np_.min_time_between_cnps_ns),
            K.F_CNP_INACK: int(bool(np_.cnp_in_ack)), K.F_CNP_TB: int(cnp_tb),
            K.F_CNP_FB: int(cnp_fb), K.F_CNP_NS: int(cnp_ns)}
