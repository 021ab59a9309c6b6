"""DCQCN reaction-point rules: the arithmetic of one alpha update, one cut and one rate increase
(compiled), and the column layout of the state, params and rate log that
:mod:`tokenpcap.schedule.engine.dcqcn` (the timers and the engine protocol) runs them on.

Two variants, chosen by ``p[DP_VARIANT]`` (:data:`DCQCN_VARIANTS`):

* ``connectx`` (:data:`DCQCN_CONNECTX`): NVIDIA ConnectX-4 and later, parameters under NVIDIA's
  names (mlx5 sysfs / mlxconfig; defaults in NVIDIA's "DCQCN CC Parameters" page of the DOCA
  documentation and in ``mlxconfig -q`` firmware dumps). Where NVIDIA documents no arithmetic,
  the integer arithmetic is that of google/isekai ``isekai/host/rdma/rdma_roce_cc_dcqcn.cc``
  (a RoCE DCQCN model written against those parameter names): rates in integer Mb/s, alpha an
  integer in 1/1024 units, a byte counter, and the DCQCN paper's increase stages (Zhu et al.,
  "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015).
* ``hpcc-ns3`` (:data:`DCQCN_HPCC_NS3`): HPCC ns-3's Mellanox variant (alibaba-edu/High-
  Precision-Congestion-Control ``simulation/src/point-to-point/model/rdma-hw.cc``, ``CcMode``
  1): rates in integer bit/s (``DataRate`` holds a ``uint64_t``), alpha a ``double``, no byte
  counter, rate-increase timer started by the first cut only.

The rules (the function named after each is where its source spells it out):

* First CNP (``cnp_received_mlx``; isekai ``HandleRxPacket``): alpha <- ``initial_alpha_value``
  /1024 (ns-3: 1), the alpha timer starts (``dce_tcp_rtt``), the rate-decrease check grid
  starts at ``t0 + rate_reduce_monitor_period`` (ns-3 adds 1 ns, ``ScheduleDecreaseRateMlx(q,
  1)``, "to make sure rate decrease is after alpha update"); ``rate_to_set_on_first_cnp`` > 0
  sets current and target rate to it (isekai; NVIDIA: "Rates (current, target) on first CNP").
  connectx starts the increase timer at the first CNP (isekai); ns-3 at the first cut.
  The first CNP does not mark alpha's period (both). It marks the decrease period in ns-3;
  in connectx only when ``rate_to_set_on_first_cnp`` is 0 (isekai always clears it, having set
  a rate; with 0 NVIDIA sets none, and a CNP that neither sets nor cuts the rate would be lost).
* Alpha every ``dce_tcp_rtt`` (``UpdateAlphaMlx``; isekai ``HandleAlphaUpdateTimer``, NVIDIA's
  formulas with G = ``dce_tcp_g``): CNP in the period: connectx ``a = G*a//1024 + 1024 - G``
  capped at 1023, ns-3 ``a = (1-g)*a + g``; none: ``a = G*a//1024``, ``a = (1-g)*a``.
  hpcc-ns3 takes g = (1024 - ``dce_tcp_g``)/1024 (ns-3's ``EwmaGain`` 1/256 is ``dce_tcp_g``
  1020).
* Rate decrease every ``rate_reduce_monitor_period`` when a CNP arrived in it: at most one cut
  per period (``CheckRateDecreaseMlx``; isekai ``HandleRateDecreaseTimer``). Target <- current
  if ``clamp_tgt_rate``, or an increase by the byte counter, or (``clamp_tgt_rate_after_time_inc``)
  by the timer happened since the last cut (ns-3: ``ClampTargetRate`` or ``m_rpTimeStage != 0``).
  connectx: ``R -= min(R*a >> rpg_gd, R*(100 - rpg_min_dec_fac)//100)`` in Mb/s; ns-3:
  ``R = uint64(R * (1 - a/2))`` (``DataRate * double`` truncates), both then ``max(R,
  rpg_min_rate)``; stages, byte counter reset, increase timer restarted at ``cut + rpg_time_reset``.
* Increase event (timer every ``rpg_time_reset``, ``RateIncEventTimerMlx``; and in connectx
  every ``rpg_byte_reset`` x 64 bytes sent, isekai ``SentBytes``): ns-3 by its time stage T
  (``RateIncEventMlx``): T < ``rpg_threshold`` fast recovery (``FastRecoveryMlx``), T ==
  threshold additive (``ActiveIncreaseMlx``, target += ``rpg_ai_rate``), above hyper
  (``HyperIncreaseMlx``, target += ``rpg_hai_rate``), target capped at the line rate, then
  ``R = R//2 + T//2`` (``DataRate / 2`` truncates each half). connectx by the paper's rule on
  time stage T and byte stage B (isekai ``IncreaseRate``): min(T, B) > threshold hyper, max(T,
  B) >= threshold additive, else fast recovery; ``R = (R + target)//2``. Then the stage of the
  event's kind += 1.

``rpg_byte_reset``: the byte counter counts in 64-byte units (isekai ``byte_reset * 64``;
32,767 x 64 = 2,097,088 B, Spirent's RoCEv2 DCQCN profile default "ByteResetInMb 2"); 0 turns
it off. NVIDIA's page calls the value bytes, which at 400 Gb/s would be an increase every
0.66 us; :data:`RPG_BYTE_RESET_UNIT_BYTES` holds the unit.

State ``st``: float64 ``(n_qp, NDQ)``, columns ``DQ_*``; every column holds an integer (exact
below 2**53: 104 days in ns, 9 Pb/s) except ``DQ_ALPHA`` under hpcc-ns3. Params ``p``: float64
``(NDP,)`` from :func:`tokenpcap.schedule.engine.dcqcn_params.dcqcn_params`, columns ``DP_*``.
Rate log ``log``: float64 ``(cap, NRL)``, ``nlog`` int64 ``(1,)``: each rate change appends
``(time ns, qp, old bit/s, new bit/s, alpha fraction, cause CAUSE_*, target bit/s)``
(columns ``RL_*``); rows past ``cap`` are counted in ``nlog[0]`` but not written.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.config.cc_types import RPG_BYTE_RESET_UNIT_BYTES

DCQCN_CONNECTX = 0
DCQCN_HPCC_NS3 = 1
#: variant name -> code
DCQCN_VARIANTS = {"connectx": DCQCN_CONNECTX, "hpcc-ns3": DCQCN_HPCC_NS3}

# -- per-QP state columns ------------------------------------------------------------------
DQ_RATE_BPS = 0        # current rate R_C, bit/s
DQ_TARGET_BPS = 1      # target rate R_T, bit/s
DQ_ALPHA = 2           # connectx: integer 0..1023 (/1024); hpcc-ns3: double in [0, 1]
DQ_ACTIVE = 3          # 1 once the QP saw a CNP
DQ_ALPHA_CNP = 4       # 1: a CNP arrived in the current alpha period
DQ_DEC_CNP = 5         # 1: a CNP arrived in the current rate-decrease period
DQ_TIME_STAGE = 6      # increase events by the timer since the last cut
DQ_BYTE_STAGE = 7      # increase events by the byte counter since the last cut
DQ_BYTE_COUNT = 8      # bytes sent since the last byte-counter event (or cut)
DQ_ALPHA_DUE_NS = 9    # next alpha update (-1 inactive)
DQ_DEC_BASE_NS = 10    # first point of the rate-decrease check grid (t0 + period [+1])
DQ_DEC_DUE_NS = 11     # next rate-decrease check that has a CNP to act on (-1 none)
DQ_INC_DUE_NS = 12     # next rate-increase timer (-1 none)
DQ_TIMER_NS = 13       # the earliest timer event the caller holds for the QP (-1 none)
DQ_LAST_CUT_NS = 14    # time of the last cut (-1 none)
DQ_N_CNP = 15          # CNPs received
DQ_N_CUT = 16          # cuts made
DQ_INC_PARKED_NS = 17  # where the stopped increase timer would fire next (-1 running or none)
DQ_TIMER2_NS = 18      # a later timer event the caller also holds (-1 none)
NDQ = 19

# -- params (dcqcn_params.py fills them) --------------------------------------------------
DP_VARIANT = 0
DP_LINE_BPS = 1            # the NIC's line rate, bit/s (cap of the target)
DP_MIN_BPS = 2             # rpg_min_rate
DP_AI_BPS = 3              # rpg_ai_rate
DP_HAI_BPS = 4             # rpg_hai_rate
DP_FIRST_CNP_BPS = 5       # rate_to_set_on_first_cnp (0 keeps the rate)
DP_G = 6                   # connectx: dce_tcp_g (integer); hpcc-ns3: g = (1024 - dce_tcp_g)/1024
DP_ALPHA_INIT = 7          # connectx: initial_alpha_value; hpcc-ns3: initial_alpha_value / 1024
DP_GD = 8                  # rpg_gd (connectx shift; hpcc-ns3 divides alpha by 2**(rpg_gd-10))
DP_MIN_DEC_FAC_PCT = 9     # rpg_min_dec_fac, % (connectx)
DP_ALPHA_PERIOD_NS = 10    # dce_tcp_rtt
DP_DEC_PERIOD_NS = 11      # rate_reduce_monitor_period
DP_DEC_OFFSET_NS = 12      # 1 in hpcc-ns3 (ScheduleDecreaseRateMlx(q, 1)), 0 in connectx
DP_INC_PERIOD_NS = 13      # rpg_time_reset
DP_BYTE_RESET_BYTES = 14   # rpg_byte_reset x 64 (0: off; always 0 in hpcc-ns3)
DP_THRESHOLD = 15          # rpg_threshold
DP_CLAMP = 16              # clamp_tgt_rate
DP_CLAMP_AFTER_TIME = 17   # clamp_tgt_rate_after_time_inc (1 in hpcc-ns3)
DP_RATE_UNIT_BPS = 18      # 1_000_000 in connectx (Mb/s arithmetic), 1 in hpcc-ns3
NDP = 19

# -- rate log columns ------------------------------------------------------------------------
RL_TIME_NS = 0
RL_QP = 1
RL_OLD_BPS = 2
RL_NEW_BPS = 3
RL_ALPHA = 4
RL_CAUSE = 5
RL_TARGET_BPS = 6
NRL = 7
CAUSE_FIRST_CNP = 0
CAUSE_CUT = 1
CAUSE_TIMER = 2
CAUSE_BYTES = 3

__all__ = [k for k in list(globals()) if k.startswith(("DQ_", "DP_", "RL_", "CAUSE_", "DCQCN_"))]
__all__ += ["RPG_BYTE_RESET_UNIT_BYTES", "NDQ", "NDP", "NRL"]


@njit(cache=True, _nrt=False)
def _alpha_frac(st, q, p):  # type: ignore[no-untyped-def]
    if p[DP_VARIANT] == DCQCN_CONNECTX:
        return st[q, DQ_ALPHA] / 1024.0
    return st[q, DQ_ALPHA]


@njit(cache=True, _nrt=False)
def _log(st, log, nlog, t, q, old, new, alpha, cause):  # type: ignore[no-untyped-def]
    i = nlog[0]
    if i < log.shape[0]:
        log[i, RL_TIME_NS] = t
        log[i, RL_QP] = q
        log[i, RL_OLD_BPS] = old
        log[i, RL_NEW_BPS] = new
        log[i, RL_ALPHA] = alpha
        log[i, RL_CAUSE] = cause
        log[i, RL_TARGET_BPS] = st[q, DQ_TARGET_BPS]
    nlog[0] = i + 1


@njit(cache=True, _nrt=False)
def _alpha_next(a, cnp, p):  # type: ignore[no-untyped-def]
    """Alpha after one update period (``UpdateAlphaMlx``; isekai ``HandleAlphaUpdateTimer``),
    ``cnp`` whether a CNP arrived in it."""
    if p[DP_VARIANT] == DCQCN_CONNECTX:
        g = np.int64(p[DP_G])
        ai = np.int64(a)
        if cnp:
            na = g * ai // 1024 + 1024 - g
            if na > 1023:
                na = np.int64(1023)
        else:
            na = g * ai // 1024
        return float(na)
    g = p[DP_G]
    if cnp:
        return (1.0 - g) * a + g
    return (1.0 - g) * a


@njit(cache=True, _nrt=False)
def _increase(st, q, p, by_bytes):  # type: ignore[no-untyped-def]
    """One rate-increase event (module docstring); returns the old rate (bit/s)."""
    unit = np.int64(p[DP_RATE_UNIT_BPS])
    r = np.int64(st[q, DQ_RATE_BPS]) // unit
    t = np.int64(st[q, DQ_TARGET_BPS]) // unit
    line = np.int64(p[DP_LINE_BPS]) // unit
    ts = np.int64(st[q, DQ_TIME_STAGE])
    bs = np.int64(st[q, DQ_BYTE_STAGE])
    thr = np.int64(p[DP_THRESHOLD])
    ai = np.int64(p[DP_AI_BPS]) // unit
    hai = np.int64(p[DP_HAI_BPS]) // unit
    if p[DP_VARIANT] == DCQCN_CONNECTX:
        if min(ts, bs) > thr:
            t += hai
        elif max(ts, bs) >= thr:
            t += ai
        if t > line:
            t = line
        r = (r + t) // 2
    else:
        if ts == thr:
            t += ai
        elif ts > thr:
            t += hai
        if t > line:
            t = line
        r = r // 2 + t // 2
    old = st[q, DQ_RATE_BPS]
    st[q, DQ_RATE_BPS] = float(r * unit)
    st[q, DQ_TARGET_BPS] = float(t * unit)
    if by_bytes:
        st[q, DQ_BYTE_STAGE] = float(bs + 1)
    else:
        st[q, DQ_TIME_STAGE] = float(ts + 1)
    if st[q, DQ_RATE_BPS] == old and t == line:     # a fixed point: the timer parks
        st[q, DQ_INC_PARKED_NS] = st[q, DQ_INC_DUE_NS]
        st[q, DQ_INC_DUE_NS] = -1.0
    return old


@njit(cache=True, _nrt=False)
def _cut(st, q, p, t_ns):  # type: ignore[no-untyped-def]
    """The rate decrease of a check that saw a CNP (``CheckRateDecreaseMlx``; isekai
    ``HandleRateDecreaseTimer``); returns the old rate (bit/s)."""
    unit = np.int64(p[DP_RATE_UNIT_BPS])
    old = st[q, DQ_RATE_BPS]
    park = st[q, DQ_INC_PARKED_NS]
    if park >= 0.0 and park <= t_ns:    # the timer events a parked timer skipped
        st[q, DQ_TIME_STAGE] += float(np.int64((t_ns - park) // p[DP_INC_PERIOD_NS]) + 1)
    st[q, DQ_INC_PARKED_NS] = -1.0
    if p[DP_CLAMP] != 0.0 or st[q, DQ_BYTE_STAGE] > 0.0 or (
            p[DP_CLAMP_AFTER_TIME] != 0.0 and st[q, DQ_TIME_STAGE] > 0.0):
        st[q, DQ_TARGET_BPS] = old
    mn = np.int64(p[DP_MIN_BPS])
    if p[DP_VARIANT] == DCQCN_CONNECTX:
        r = np.int64(old) // unit
        red = (r * np.int64(st[q, DQ_ALPHA])) >> np.int64(p[DP_GD])
        cap = r * (100 - np.int64(p[DP_MIN_DEC_FAC_PCT])) // 100
        if cap < red:
            red = cap
        nr = (r - red) * unit
    else:
        div = float(np.int64(1) << (np.int64(p[DP_GD]) - 10))
        nr = np.int64(old * (1.0 - st[q, DQ_ALPHA] / div))
    if nr < mn:
        nr = mn
    st[q, DQ_RATE_BPS] = float(nr)
    st[q, DQ_TIME_STAGE] = 0.0
    st[q, DQ_BYTE_STAGE] = 0.0
    st[q, DQ_BYTE_COUNT] = 0.0
    st[q, DQ_DEC_CNP] = 0.0
    st[q, DQ_DEC_DUE_NS] = -1.0
    st[q, DQ_INC_DUE_NS] = t_ns + p[DP_INC_PERIOD_NS]
    st[q, DQ_LAST_CUT_NS] = t_ns
    st[q, DQ_N_CUT] += 1.0
    return old
