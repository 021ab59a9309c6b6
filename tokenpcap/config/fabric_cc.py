"""The congestion-control keys of a cluster's ``fabric:`` (``cc``, ``ecn``, ``dcqcn``, ``np``):
their specs, their meanings for docs/profiles.md (:data:`CC_KEYS`), and the checks that need the
rest of the fabric and the cluster (:func:`check_cc`). :mod:`tokenpcap.config.fabric` reads the
mappings with these specs (a preset fills the keys a profile leaves out, then the defaults
below, which are the ConnectX and SONiC values of :mod:`tokenpcap.config.cc_types`) and builds
:class:`~tokenpcap.config.cc_types.EcnConfig`, :class:`~tokenpcap.config.cc_types.DcqcnConfig`
and :class:`~tokenpcap.config.cc_types.NpConfig` on ``ClusterProfile.fabric.ecn``,
``.dcqcn`` and ``.np``, with ``ClusterProfile.fabric.cc`` the mode.

Resolved by the loader: ``ecn.enabled`` null is ``cc == "dcqcn"``; ``ecn.priorities`` null is
``[network.pcp]`` (the data's class).

Refused, one line naming the file and the dotted key (:func:`check_cc`): ``cc: dcqcn`` under an
ideal fabric; with marking on, ``kmin_bytes`` above ``kmax_bytes`` or the control class among
``ecn.priorities``; with ``cc: dcqcn``, a DCQCN rate above the NIC's line rate, a CNP priority
that is the data's class (``network.pcp``: CNPs would queue behind the data they are to slow
down) or, for CNP frames of their own, not the switch's control class
(``switch.control_priority``, the strict-priority queue the switch puts them in). Ranges
(``pmax`` in [0, 1], periods of at least 1 us, ...) are the specs'.
"""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import MAX_ECMP_SEED, MAX_SWITCH_BUFFER_BYTES
from tokenpcap.config.cc_types import CC_MODES, EcnConfig
from tokenpcap.errors import ProfileError

__all__ = ["CC_MODES", "ECN_SPEC", "DCQCN_SPEC", "NP_SPEC", "CC_KEYS", "check_cc",
           "ecn_thresholds", "MAX_CC_US", "MAX_RATE_MBPS"]

#: Longest DCQCN or CNP period (us): 1 s, the engine's ``MAX_LATENCY_NS``; ConnectX timers are
#: at most a few ms (RPG_TIME_RESET 300 us default).
MAX_CC_US = 1_000_000
#: Largest DCQCN rate (Mb/s) a spec accepts; the NIC's line rate bounds it again (:func:`check_cc`).
MAX_RATE_MBPS = 1_000_000_000


_US = yc.integer(1, MAX_CC_US)
_MBPS = yc.integer(0, MAX_RATE_MBPS)

ECN_SPEC = {
    "enabled": (yc.optional(yc.boolean), None),
    "kmin_bytes": (yc.integer(0, MAX_SWITCH_BUFFER_BYTES), 1_048_576),
    "kmax_bytes": (yc.integer(0, MAX_SWITCH_BUFFER_BYTES), 2_097_152),
    "pmax": (yc.number(ge=0.0, le=1.0), 0.05),
    "mark_at": (yc.enum("dequeue", "enqueue"), "dequeue"),
    "priorities": (yc.optional(yc.priorities), None),
    "rate_scaled": (yc.boolean, False),
    "seed": (yc.integer(0, MAX_ECMP_SEED), 0),
}

DCQCN_SPEC = {
    "rpg_time_reset": (_US, 300),
    "rpg_byte_reset": (yc.integer(0, 2**31 - 1), 32_767),
    "rpg_threshold": (yc.integer(0, 31), 1),
    "rpg_ai_rate": (_MBPS, 5),
    "rpg_hai_rate": (_MBPS, 50),
    "rpg_gd": (yc.integer(10, 11), 11),
    "rpg_min_dec_fac": (yc.integer(0, 100), 50),
    "rpg_min_rate": (yc.integer(1, MAX_RATE_MBPS), 1),
    "rate_to_set_on_first_cnp": (_MBPS, 0),
    "dce_tcp_g": (yc.integer(0, 1023), 1019),
    "dce_tcp_rtt": (yc.integer(1, 131_071), 1),
    "initial_alpha_value": (yc.integer(1, 1024), 1023),
    "rate_reduce_monitor_period": (_US, 4),
    "clamp_tgt_rate": (yc.boolean, False),
    "clamp_tgt_rate_after_time_inc": (yc.boolean, True),
}

NP_SPEC = {
    "min_time_between_cnps": (yc.integer(0, MAX_CC_US), 4),
    "cnp_dscp": (yc.integer(0, 63), 48),
    "cnp_802p_prio": (yc.integer(0, 7), 6),
    "cnp_udp_sport": (yc.integer(0, 65_535), 0),
    "cnp_in_ack": (yc.boolean, False),
}

_DOCA = "NVIDIA DOCA DCQCN CC Parameters; ConnectX `mlxconfig -q`"
_NS3 = "HPCC ns-3 `run.py`"

#: dotted key -> (unit, meaning) for docs/profiles.md (:mod:`tokenpcap.config.spectable`)
CC_KEYS: dict[str, tuple[str, str]] = {
    "cluster.fabric.cc": ("", "`none`: PFC only, no CNP and no rate change (Meta's RoCE fabric, "
                              "Llama 3 paper Sec. 3.3.1); `dcqcn`: ConnectX DCQCN (CNPs from "
                              "the receiver, rate cuts and recovery at the sender); a preset "
                              "leaves it `none`"),
    "cluster.fabric.ecn": ("", "ECN marking at the switches, the keys below"),
    "cluster.fabric.dcqcn": ("", "DCQCN at the sending NIC (`cc: dcqcn`), the keys below"),
    "cluster.fabric.np": ("", "the CNPs of the receiving NIC (`cc: dcqcn`), the keys below"),
    "cluster.fabric.ecn.enabled": ("", "mark ECT packets CE in the queues of `priorities`; "
                                       "absent: on with `cc: dcqcn`"),
    "cluster.fabric.ecn.kmin_bytes": ("bytes", "no mark while the egress queue holds at most "
                                               "this (SONiC AZURE_LOSSLESS WRED 1,048,576; "
                                               "hpcc-ns3 4 x r Gb/s x 1000; SimAI.conf 400G "
                                               "800,000); at most `kmax_bytes`"),
    "cluster.fabric.ecn.kmax_bytes": ("bytes", "every ECT packet marked above this (SONiC "
                                               "2,097,152; hpcc-ns3 16 x r x 1000; SimAI.conf "
                                               "400G 3,200,000)"),
    "cluster.fabric.ecn.pmax": ("probability", "mark probability at `kmax_bytes`, linear from 0 "
                                               "at `kmin_bytes` (SONiC 5 %; HPCC `run.py` and "
                                               "SimAI.conf 0.2)"),
    "cluster.fabric.ecn.mark_at": ("", "queue depth seen at dequeue, after the packet left "
                                       "(HPCC ns-3 `SwitchNotifyDequeue`; sonic-mgmt's ECN test "
                                       "plan tests egress marking) or at enqueue"),
    "cluster.fabric.ecn.priorities": ("", "802.1p classes whose queues mark; never "
                                          "`switch.control_priority`; absent: `[network.pcp]`"),
    "cluster.fabric.ecn.rate_scaled": ("", "thresholds are for a port at the NIC rate; a port of "
                                           "rate r gets them x r / NIC rate (HPCC `run.py` "
                                           "KMIN_MAP/KMAX_MAP: 4r/16r KB per link speed)"),
    "cluster.fabric.ecn.seed": ("", "keys the RED draw of each packet with (switch, port, "
                                    "packet), so marks do not depend on event order"),
    "cluster.fabric.dcqcn.rpg_time_reset": ("us", f"rate-increase timer ({_DOCA} RPG_TIME_RESET "
                                                  f"300; {_NS3} RP_TIMER 300)"),
    "cluster.fabric.dcqcn.rpg_byte_reset": ("64 B", "rate-increase byte counter (RPG_BYTE_"
                                                    "RESET 32,767 = 2,097,088 B, in 64-byte "
                                                    "units as google/isekai counts it); 0: "
                                                    "none (HPCC ns-3 has none)"),
    "cluster.fabric.dcqcn.rpg_threshold": ("stages", "fast-recovery stages before additive "
                                                     "increase (RPG_THRESHOLD 1; ns-3 "
                                                     "FAST_RECOVERY_TIMES 1)"),
    "cluster.fabric.dcqcn.rpg_ai_rate": ("Mb/s", "additive increase of the target rate "
                                                 "(RPG_AI_RATE 5; ns-3 RATE_AI 5 x r / 25: 80 "
                                                 "at 400G); at most the NIC rate"),
    "cluster.fabric.dcqcn.rpg_hai_rate": ("Mb/s", "hyper increase (RPG_HAI_RATE 50; ns-3 "
                                                  "RATE_HAI 50 x r / 25: 800 at 400G); at most "
                                                  "the NIC rate"),
    "cluster.fabric.dcqcn.rpg_gd": ("", "log2 of the alpha-to-cut divisor Gd in 1/1024 (DOCA: "
                                        "10..11; RPG_GD 11: Gd 2, cut = alpha / 2 x current, "
                                        "as ns-3's rate x (1 - alpha / 2))"),
    "cluster.fabric.dcqcn.rpg_min_dec_fac": ("%", "largest cut of one event, in % of the "
                                                  "current rate (DOCA: 'the maximal ratio of "
                                                  "rate decrease in a single event', "
                                                  "RPG_MIN_DEC_FAC 50)"),
    "cluster.fabric.dcqcn.rpg_min_rate": ("Mb/s", "rate floor (RPG_MIN_RATE 1; ns-3 MIN_RATE "
                                                  "1000); at most the NIC rate"),
    "cluster.fabric.dcqcn.rate_to_set_on_first_cnp": ("Mb/s", "rate on a QP's first CNP; 0: "
                                                              "keep the current rate "
                                                              "(RATE_TO_SET_ON_FIRST_CNP 0; "
                                                              "ns-3 RateOnFirstCnp 1.0)"),
    "cluster.fabric.dcqcn.dce_tcp_g": ("1/1024", "alpha <- (1 - g) alpha + g x CNP seen, g = "
                                                 "(1024 - dce_tcp_g) / 1024 (DCE_TCP_G 1019: "
                                                 "5/1024; ns-3 EWMA_GAIN 1/256: 1020)"),
    "cluster.fabric.dcqcn.dce_tcp_rtt": ("us", "alpha update period (DCE_TCP_RTT 1; ns-3 "
                                               "ALPHA_RESUME_INTERVAL 1)"),
    "cluster.fabric.dcqcn.initial_alpha_value": ("1/1024", "alpha on a QP's first CNP "
                                                           "(INITIAL_ALPHA_VALUE 1023, ConnectX "
                                                           "1..1023; 1024 is ns-3's alpha = 1)"),
    "cluster.fabric.dcqcn.rate_reduce_monitor_period": ("us", "at most one cut per period "
                                                              "(RATE_REDUCE_MONITOR_PERIOD 4; "
                                                              "ns-3 RATE_DECREASE_INTERVAL 4)"),
    "cluster.fabric.dcqcn.clamp_tgt_rate": ("", "every cut sets the target rate to the current "
                                                "rate (CLAMP_TGT_RATE false; ns-3 "
                                                "CLAMP_TARGET_RATE 0)"),
    "cluster.fabric.dcqcn.clamp_tgt_rate_after_time_inc": ("", "a cut sets the target rate "
                                                               "only after a timer increase "
                                                               "(CLAMP_TGT_RATE_AFTER_TIME_INC "
                                                               "true; ns-3 `CheckRateDecrease"
                                                               "Mlx` with m_rpTimeStage)"),
    "cluster.fabric.np.min_time_between_cnps": ("us", "at most one CNP per QP per interval "
                                                      "(MIN_TIME_BETWEEN_CNPS 4); 0: one per "
                                                      "CE-marked packet (HPCC ns-3)"),
    "cluster.fabric.np.cnp_dscp": ("", "IP DSCP of CNPs (CNP_DSCP 48)"),
    "cluster.fabric.np.cnp_802p_prio": ("", "802.1p priority of CNPs (CNP_802P_PRIO 6): the "
                                            "switch's `control_priority`, never the data's "
                                            "`network.pcp`"),
    "cluster.fabric.np.cnp_udp_sport": ("", "UDP source port of CNPs (a ConnectX-4 Lx CNP "
                                            "capture: 0)"),
    "cluster.fabric.np.cnp_in_ack": ("", "the notification rides the ACK of the marked packet, "
                                         "no CNP frame of its own (HPCC ns-3 "
                                         "`qbbHeader::FLAG_CNP`)"),
}


def ecn_thresholds(ecn: EcnConfig, port_gbps: float, nic_gbps: float) -> tuple[int, int]:
    """``(kmin, kmax)`` bytes of an egress port of ``port_gbps`` in a fabric whose NICs run at
    ``nic_gbps``: ``ecn.kmin_bytes``/``kmax_bytes``, or with ``rate_scaled`` those times
    port / NIC rate, floored (exact in integers for integer Gb/s: HPCC ``run.py`` gives a port of
    r Gb/s 4r and 16r KB of 1000 B)."""
    if not ecn.rate_scaled:
        return ecn.kmin_bytes, ecn.kmax_bytes
    f = Fraction(float(port_gbps)) / Fraction(float(nic_gbps))
    return int(ecn.kmin_bytes * f), int(ecn.kmax_bytes * f)


def check_cc(fabric: Any, link_gbps: float, pcp: int,
             where: Callable[[str], tuple[Path | None, str]]) -> None:
    """The checks of the module docstring on a loaded fabric (a
    :class:`~tokenpcap.config.fabric_types.FabricProfile`) of a cluster whose NICs run at ``link_gbps``
    and send their data at 802.1p priority ``pcp``; ``where(key)`` names ``(file, dotted key)``.

    Raises:
        ProfileError: the first failing check, naming its key.
    """
    if not fabric.queued:
        if fabric.cc != "none":
            raise ProfileError(*where("cc"), fabric.cc,
                               "'none' under model 'ideal' (DCQCN reacts to marks of switch "
                               "queues; an ideal fabric has none: set model: queued)")
        return
    ecn, dc, np_, control = fabric.ecn, fabric.dcqcn, fabric.np, fabric.switch.control_priority
    if ecn.enabled:
        if ecn.kmin_bytes > ecn.kmax_bytes:
            raise ProfileError(*where("ecn.kmin_bytes"), ecn.kmin_bytes,
                               f"at most {where('ecn.kmax_bytes')[1]} {ecn.kmax_bytes:,}")
        if control in ecn.priorities:
            raise ProfileError(*where("ecn.priorities"), list(ecn.priorities),
                               f"priorities without switch.control_priority {control} (the "
                               "control class of ACKs and CNPs is never marked)")
    if fabric.cc != "dcqcn":
        return
    line_mbps = float(link_gbps) * 1000.0
    for k in ("rpg_ai_rate", "rpg_hai_rate", "rpg_min_rate", "rate_to_set_on_first_cnp"):
        v = getattr(dc, k)
        if v > line_mbps:
            raise ProfileError(*where(f"dcqcn.{k}"), v,
                               f"at most the NIC's line rate {line_mbps:,.0f} Mb/s (link_gbps "
                               f"{float(link_gbps):g})")
    if np_.cnp_802p_prio == pcp:
        raise ProfileError(*where("np.cnp_802p_prio"), np_.cnp_802p_prio,
                           f"a priority other than the data's network.pcp {pcp} (a CNP would "
                           "queue behind the data it is to slow down)")
    if not np_.cnp_in_ack and np_.cnp_802p_prio != control:
        raise ProfileError(*where("np.cnp_802p_prio"), np_.cnp_802p_prio,
                           f"switch.control_priority {control} (the switch queues CNPs in its "
                           "strict-priority control class; set both)")

