"""The congestion-control parts of a cluster's ``fabric:`` (frozen dataclasses): ECN marking at
the switches (:class:`EcnConfig`, ``fabric.ecn``), DCQCN's reaction point on the sending NIC
(:class:`DcqcnConfig`, ``fabric.dcqcn``) and the notification point on the receiving NIC
(:class:`NpConfig`, ``fabric.np``). Read and checked by :mod:`tokenpcap.config.fabric_cc`; they
live on :class:`tokenpcap.config.fabric_types.FabricProfile` as ``ecn``, ``dcqcn``, ``np`` beside
``cc`` (``"none"`` or ``"dcqcn"``).

DCQCN's and the NP's fields carry NVIDIA's names (mlx5 ``/sys/kernel/debug/mlx5/<pci>/cc_params``
and ``mlxconfig`` ``RPG_*``, ``DCE_TCP_*``, ``CNP_*``) in NVIDIA's units (us, Mb/s, bytes, 1/1024
fixed point), so a value read off a ConnectX can be pasted in; the ``*_ns`` properties give the
times in integer ns for the engine. Defaults are the ConnectX firmware defaults of two
``mlxconfig -q`` dumps (RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1, RPG_AI_RATE
5, RPG_HAI_RATE 50, RPG_GD 11, RPG_MIN_DEC_FAC 50, RPG_MIN_RATE 1, RATE_TO_SET_ON_FIRST_CNP 0,
DCE_TCP_G 1019, DCE_TCP_RTT 1, INITIAL_ALPHA_VALUE 1023, RATE_REDUCE_MONITOR_PERIOD 4,
MIN_TIME_BETWEEN_CNPS 4, CNP_DSCP 48, CNP_802P_PRIO 6) and NVIDIA DOCA "DCQCN CC Parameters";
docs/profiles.md has every key with its source, docs/fabric.md the algorithm.

ECN's defaults are SONiC's lossless WRED profile (``files/build_templates/qos_config.j2``
``AZURE_LOSSLESS``: green min 1,048,576 B, max 2,097,152 B, drop probability 5 %, ``ecn_all``).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EcnConfig", "DcqcnConfig", "NpConfig", "CC_MODES", "US_NS"]

#: ``fabric.cc``: ``none`` (PFC only, no CNP is sent and no rate changes: how Meta runs its RoCE
#: fabric, Llama 3 paper Sec. 3.3.1) or ``dcqcn`` (NVIDIA ConnectX's DCQCN).
CC_MODES = ("none", "dcqcn")

#: ns per us: NVIDIA's times are in us, the engine's in integer ns.
US_NS = 1000


@dataclass(frozen=True)
class EcnConfig:
    """RED/ECN marking on a switch's egress (port, traffic class) queue (``fabric.ecn``).

    A packet whose IP ECN field is ECT (1 or 2) is marked CE (3) with probability 0 while the
    queue holds at most ``kmin_bytes``, ``pmax * (q - kmin) / (kmax - kmin)`` up to
    ``kmax_bytes`` and 1 above (HPCC ns-3 ``switch-mmu.cc`` ``ShouldSendCN``; RFC 3168 5: never a
    Not-ECT packet). ``q`` is the queue's bytes at dequeue after the departing packet left
    (``mark_at = "dequeue"``, ns-3 ``SwitchNotifyDequeue``) or at enqueue before it joins
    (``"enqueue"``). ``priorities``: the 802.1p classes whose queues mark (never the control
    class). ``rate_scaled``: ``kmin_bytes``/``kmax_bytes`` are for a port at the NIC rate and a
    port of rate r gets them times r / NIC rate (:func:`tokenpcap.config.fabric_cc.ecn_thresholds`;
    HPCC ``run.py``'s 4r / 16r KB). ``seed`` keys the RED draws with (switch, port, packet).
    ``enabled``: marking on (the loader turns a null into ``cc == "dcqcn"``).
    """

    enabled: bool = False
    kmin_bytes: int = 1_048_576
    kmax_bytes: int = 2_097_152
    pmax: float = 0.05
    mark_at: str = "dequeue"               # dequeue | enqueue
    priorities: tuple[int, ...] = (3,)
    rate_scaled: bool = False
    seed: int = 0


#: bytes per unit of ``fabric.dcqcn.rpg_byte_reset`` (google/isekai ``SentBytes``: ``byte_reset *
#: 64``)
RPG_BYTE_RESET_UNIT_BYTES = 64


@dataclass(frozen=True)
class DcqcnConfig:
    """DCQCN's reaction point (the sending NIC; ``fabric.dcqcn``), NVIDIA's names and units.

    Times in us (``rpg_time_reset``, ``dce_tcp_rtt``, ``rate_reduce_monitor_period``), rates in
    Mb/s (``rpg_ai_rate``, ``rpg_hai_rate``, ``rpg_min_rate``, ``rate_to_set_on_first_cnp``, 0:
    keep the current rate), ``rpg_byte_reset`` in units of :data:`RPG_BYTE_RESET_UNIT_BYTES`
    (64 B: google/isekai's ConnectX model counts ``byte_reset * 64``, so 32,767 is 2,097,088 B,
    Spirent's 2 MB default; 0: no byte counter, as HPCC ns-3),
    ``dce_tcp_g`` and ``initial_alpha_value`` in 1/1024 (EWMA gain g = (1024 - dce_tcp_g) /
    1024: 1019 is 5/1024, 1020 is HPCC ns-3's 1/256; ``initial_alpha_value`` 1024 is ns-3's
    alpha = 1), ``rpg_gd`` log2 of the divisor Gd of alpha in 1/1024 (11: Gd = 2, a cut of alpha
    / 2 x current), ``rpg_min_dec_fac`` the largest cut of one event in % of the current rate
    (NVIDIA DOCA "DCQCN CC Parameters": "the maximal ratio of rate decrease in a single event").
    """

    rpg_time_reset: int = 300
    rpg_byte_reset: int = 32_767
    rpg_threshold: int = 1
    rpg_ai_rate: int = 5
    rpg_hai_rate: int = 50
    rpg_gd: int = 11
    rpg_min_dec_fac: int = 50
    rpg_min_rate: int = 1
    rate_to_set_on_first_cnp: int = 0
    dce_tcp_g: int = 1019
    dce_tcp_rtt: int = 1
    initial_alpha_value: int = 1023
    rate_reduce_monitor_period: int = 4
    clamp_tgt_rate: bool = False
    clamp_tgt_rate_after_time_inc: bool = True

    @property
    def rpg_time_reset_ns(self) -> int:
        """The rate-increase timer period, ns."""
        return self.rpg_time_reset * US_NS

    @property
    def dce_tcp_rtt_ns(self) -> int:
        """The alpha update period, ns."""
        return self.dce_tcp_rtt * US_NS

    @property
    def rate_reduce_monitor_period_ns(self) -> int:
        """The period of at most one rate cut, ns."""
        return self.rate_reduce_monitor_period * US_NS


@dataclass(frozen=True)
class NpConfig:
    """DCQCN's notification point (the receiving NIC; ``fabric.np``): at most one CNP per QP per
    ``min_time_between_cnps`` us (0: one per CE-marked packet), sent with IP DSCP ``cnp_dscp``,
    802.1p priority ``cnp_802p_prio`` (the switch's strict-priority control class) and UDP source
    port ``cnp_udp_sport`` (a ConnectX-4 Lx CNP carries 0). ``cnp_in_ack``: the notification
    rides the RC ACK of the marked packet instead of a CNP frame of its own, as HPCC ns-3 sets
    ``qbbHeader::FLAG_CNP`` in its ACK (``rdma-hw.cc`` ``ReceiveUdp``)."""

    min_time_between_cnps: int = 4
    cnp_dscp: int = 48
    cnp_802p_prio: int = 6
    cnp_udp_sport: int = 0
    cnp_in_ack: bool = False

    @property
    def min_time_between_cnps_ns(self) -> int:
        """The CNP pacing interval per QP, ns (0: none)."""
        return self.min_time_between_cnps * US_NS
