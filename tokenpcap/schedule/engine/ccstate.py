"""The congestion-control settings of the compiled engine (ECN marking, CNPs, DCQCN), built once
per run from the cluster's ``fabric`` profile (``fabric.ecn``, ``fabric.np``, ``fabric.cc``,
``fabric.dcqcn``: :mod:`tokenpcap.config.cc_types`) for
:mod:`tokenpcap.schedule.engine.fabstate`. A profile without them (or ``enabled: false``,
``cc: none``) gives the engine's slots 0: no mark, no CNP, no rate change.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.fabric_cc import ecn_thresholds
from tokenpcap.errors import InputError
from tokenpcap.schedule.engine import events as K
from tokenpcap.schedule.engine.dcqcn import NRL, dcqcn_state
from tokenpcap.schedule.engine.dcqcn_params import dcqcn_params

__all__ = ["ecn_ports", "cnp_settings", "rp_arrays"]

_MARK_AT = {"dequeue": 1, "enqueue": 2}


def ecn_ports(fab, fp: np.ndarray, port_gbps: np.ndarray, nic_gbps: float) -> dict:
    """Fill the RED columns of the switch ports ``fp`` (``FP_KMIN``, ``FP_KMAX``, ``FP_PMAX``)
    from ``fab.ecn`` and return the ECN config slots. ``rate_scaled`` thresholds are for a port
    at the NIC rate, scaled by the port's rate over it
    (:func:`tokenpcap.config.fabric_cc.ecn_thresholds`)."""
    ecn = getattr(fab, "ecn", None)
    fp[:, [K.FP_KMIN, K.FP_KMAX, K.FP_PMAX]] = 0
    if ecn is None or not ecn.enabled:
        return {K.F_ECN: 0, K.F_ECN_PRIOS: 0, K.F_ECN_SEED: 0}
    ks = np.array([ecn_thresholds(ecn, g, nic_gbps) for g in np.asarray(port_gbps).tolist()],
                  np.int64).reshape(-1, 2)
    fp[:, K.FP_KMIN], fp[:, K.FP_KMAX] = ks[:, 0], ks[:, 1]
    fp[:, K.FP_PMAX] = int(round(float(ecn.pmax) * K.PMAX_ONE))
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


def rp_arrays(fab, n_qp: int, nic_gbps: float) -> dict:
    """The reaction points' arrays: DCQCN state ``rp`` of every QP at the line rate, the
    parameters ``rpp`` (:func:`tokenpcap.schedule.engine.dcqcn_params.dcqcn_params` of
    ``fab.dcqcn``, HPCC ns-3's variant with ``timing: hpcc-ns3``) and the rate log ``lgr``.

    Raises:
        InputError: a DCQCN setting the state machine cannot take (naming its key).
    """
    line = int(round(float(nic_gbps) * 1e9))
    variant = "hpcc-ns3" if fab.timing == "hpcc-ns3" else "connectx"
    try:
        p = dcqcn_params(fab.dcqcn, line, variant)
    except ValueError as e:
        raise InputError(f"fabric.dcqcn.{e}") from None
    return dict(rp=dcqcn_state(max(1, int(n_qp)), p), rpp=p, lgr=np.zeros((1 << 12, NRL)))
